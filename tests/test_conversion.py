"""elmo-hf convert: the folder it writes, remote-code loading, and every bad checkpoint."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import FIXTURES

from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.conversion.checkpoint import ConversionError
from elmo_hf.cli.convert import main
from elmo_hf.conversion.convert import convert_checkpoint
from elmo_hf.errors import ElmoInputError, ElmoRunError

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = FIXTURES / "allennlp" / "options.json"
WEIGHTS = FIXTURES / "allennlp" / "lm_weights.hdf5"


def test_folder_contents(converted):
    folder = converted["allennlp"]
    names = {path.name for path in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "README.md"} <= names
    assert {"configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py"} <= names
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "elmo"
    assert config["auto_map"]["AutoModel"] == "modeling_elmo.ElmoModel"
    assert config["auto_map"]["AutoConfig"] == "configuration_elmo.ElmoConfig"
    assert config["use_skip_connections"] is True and config["cell_clip"] == 3
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", "pt") as weights:
        assert all(weights.get_tensor(key).dtype == torch.float32 for key in weights.keys())
    assert json.loads((converted["bilm-tf"] / "config.json").read_text())["use_skip_connections"] is False


def test_auto_classes_load_the_converted_folder(converted):
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(converted["allennlp"])
    tokenizer = AutoTokenizer.from_pretrained(converted["allennlp"])
    assert type(model) is ElmoModel and type(tokenizer) is ElmoTokenizer


REMOTE_SCRIPT = """
import sys
sys.modules["elmo_hf"] = None  # elmo_hf must not be importable here
import torch
from transformers import AutoModel, AutoTokenizer
folder = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
assert "elmo_hf" not in type(model).__module__, type(model).__module__
inputs = tokenizer([["The", "remote", "code", "works", "."]], is_split_into_words=True, return_tensors="pt")
with torch.no_grad():
    torch.save(model(**inputs, output_hidden_states=True).hidden_states, sys.argv[2])
"""


def test_remote_code_load_without_the_package(converted, tokenizer, tmp_path):
    result = tmp_path / "hidden.pt"
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(converted["allennlp"]), str(result)],
        check=True, cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    remote = torch.load(result)
    local = ElmoModel.from_pretrained(converted["allennlp"]).eval()
    inputs = tokenizer([["The", "remote", "code", "works", "."]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        expected = local(**inputs, output_hidden_states=True).hidden_states
    for remote_layer, local_layer in zip(remote, expected):
        assert torch.equal(remote_layer, local_layer)


def test_command_line(tmp_path, capsys):
    output = tmp_path / "out"
    assert main(["--options", str(OPTIONS), "--weights", str(WEIGHTS), "--output", str(output)]) == 0
    assert (output / "model.safetensors").is_file()
    assert main(["--options", str(OPTIONS), "--weights", str(WEIGHTS), "--output", str(output)]) == 2
    assert "not empty; pass --overwrite" in capsys.readouterr().err
    assert main(["--options", str(OPTIONS), "--weights", str(WEIGHTS), "--output", str(output), "--overwrite"]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"max_characters_per_token": 10**12}, "options.json char_cnn.max_characters_per_token is 1000000000000; at "
                                                "most 1000 is converted (the released ELMo checkpoints use 50)."),
        ({"max_characters_per_token": 4}, "options.json describes an invalid architecture: ElmoConfig.filters has "
                                          "width 5, wider than max_characters_per_token (4)."),
    ],
)
def test_absurd_or_inconsistent_options_are_one_error_line_and_write_nothing(tmp_path, capsys, edit, message):
    """An absurd max_characters_per_token exhausted memory building the model; a check between the config's fields
    printed a second line."""
    options = write_options(tmp_path, lambda options: options["char_cnn"].update(edit))
    output = tmp_path / "out"
    assert main(["--options", str(options), "--weights", str(WEIGHTS), "--output", str(output)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {message}\n" and not captured.out
    assert sorted(path.name for path in tmp_path.iterdir()) == ["options.json"]


def test_script_runs_as_a_program(tmp_path):
    output = tmp_path / "cli"
    completed = subprocess.run(
        [sys.executable, str(ROOT / "conversion" / "convert.py"), "--options", str(OPTIONS), "--weights",
         str(WEIGHTS), "--output", str(output)],
        capture_output=True, text=True,
    )
    assert completed.returncode == 0, completed.stderr
    assert (output / "config.json").is_file()


def copy_weights(tmp_path: Path, edit) -> Path:
    """A copy of the fixture weights with `edit(h5py.File)` applied."""
    path = tmp_path / "weights.hdf5"
    shutil.copy(WEIGHTS, path)
    with h5py.File(path, "r+") as file:
        edit(file)
    return path


def write_options(tmp_path: Path, edit) -> Path:
    options = json.loads(OPTIONS.read_text())
    edit(options)
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))
    return path


def replace_dataset(name: str, array: np.ndarray):
    def edit(file):
        del file[name]
        file[name] = array

    return edit


@pytest.mark.parametrize(
    ("make_options", "make_weights", "message"),
    [
        (lambda tmp: tmp / "absent.json", lambda tmp: WEIGHTS, "options file not found"),
        (lambda tmp: OPTIONS, lambda tmp: tmp / "absent.hdf5", "weights file not found"),
        (lambda tmp: OPTIONS, lambda tmp: OPTIONS, "is not an HDF5 file"),
        (lambda tmp: WEIGHTS, lambda tmp: WEIGHTS, "is not valid JSON"),
        (
            lambda tmp: write_options(tmp, lambda options: options.pop("lstm")),
            lambda tmp: WEIGHTS,
            "no 'lstm' and 'char_cnn' sections",
        ),
        (
            lambda tmp: write_options(tmp, lambda options: options["lstm"].pop("dim")),
            lambda tmp: WEIGHTS,
            "lacks the field 'dim'",
        ),
        (
            lambda tmp: write_options(tmp, lambda options: options["char_cnn"].update(activation="gelu")),
            lambda tmp: WEIGHTS,
            "unknown activation 'gelu'",
        ),
        (
            lambda tmp: OPTIONS,
            lambda tmp: copy_weights(tmp, lambda file: file.__delitem__("CNN_high_1/W_carry")),
            "missing dataset 'CNN_high_1/W_carry'",
        ),
        (
            lambda tmp: OPTIONS,
            lambda tmp: copy_weights(tmp, replace_dataset("CNN_proj/W_proj", np.zeros((124, 8), np.float32))),
            r"dataset 'CNN_proj/W_proj' has shape \(124, 8\), the options imply \(124, 16\)",
        ),
        (
            lambda tmp: write_options(tmp, lambda options: options["lstm"].update(dim=32)),
            lambda tmp: WEIGHTS,
            "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' has shape",
        ),
    ],
)
def test_bad_checkpoints_are_refused_before_writing(tmp_path, make_options, make_weights, message):
    output = tmp_path / "out"
    with pytest.raises(ConversionError, match=message):
        convert_checkpoint(make_options(tmp_path), make_weights(tmp_path), output)
    assert not output.exists()
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".out")]


def test_wrong_layout_fails_validation_and_leaves_nothing(tmp_path, monkeypatch):
    """A converter that got the gate order wrong is caught by the reference check, and nothing is written."""
    import elmo_hf.conversion.checkpoint

    monkeypatch.setattr(elmo_hf.conversion.checkpoint, "TF_TO_TORCH_GATES", (0, 1, 2, 3))
    output = tmp_path / "out"
    with pytest.raises(ConversionError, match="differs from the reference computation in layer 1"):
        convert_checkpoint(OPTIONS, WEIGHTS, output)
    assert list(tmp_path.iterdir()) == []


def test_output_that_is_a_file_is_refused(tmp_path):
    output = tmp_path / "file"
    output.write_text("x")
    with pytest.raises(ConversionError, match="is a file"):
        convert_checkpoint(OPTIONS, WEIGHTS, output)
    assert output.read_text() == "x"


def test_empty_output_folder_is_used(tmp_path):
    output = tmp_path / "empty"
    output.mkdir()
    convert_checkpoint(OPTIONS, WEIGHTS, output)
    assert (output / "model.safetensors").is_file()


def test_conversion_library_is_typed_and_its_errors_follow_the_exit_status_rule():
    """Issue 22 item 4: the commands wrap typed functions; argparse lives in elmo_hf/cli only; one error class per
    meaning, each an `ElmoInputError` (exit status 2)."""
    from elmo_hf.conversion import export, manylangs, onnx

    for path in (ROOT / "elmo_hf" / "conversion").glob("*.py"):
        assert "argparse" not in path.read_text(encoding="utf-8"), path.name
    for error in (ConversionError, export.OriginalExportError, onnx.OnnxExportError):
        assert issubclass(error, ElmoInputError) and not issubclass(error, ElmoRunError)
    assert export.OriginalExportError is not onnx.OnnxExportError and not hasattr(export, "ExportError")
    for function in (convert_checkpoint, manylangs.convert_manylangs, export.export_original, onnx.export_onnx):
        hints = typing.get_type_hints(function)
        assert hints and all(hint is not argparse.Namespace for hint in hints.values()), function.__name__
