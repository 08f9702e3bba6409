"""`elmo-hf export`: converted fixtures export to the original files, trained models convert back unchanged."""

import json
import re

import h5py
import numpy as np
import pytest
import torch
from conftest import FIXTURE_SETS, FIXTURES, tiny_config

from elmo_hf import ElmoForPreTraining, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from elmo_hf.cli import run_subcommand
from elmo_hf.conversion.convert import convert_checkpoint
from elmo_hf.conversion.export import export_original
from elmo_hf.corpus.data import ElmoWordVocabulary

SENTENCES = [["The", "biLM", "reads", "characters", "."], ["Zoë", "naïvely", "exports", "!"]]


def datasets_of(path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as file:
        found = {}
        file.visititems(lambda name, item: found.__setitem__(name, item) if isinstance(item, h5py.Dataset) else None)
        return {name: (dataset[()], dataset.dtype, dataset.chunks, dataset.compression, dict(dataset.attrs))
                for name, dataset in found.items()}


@pytest.mark.parametrize("name", FIXTURE_SETS)
def test_fixture_converted_and_exported_equals_the_original_file(name, converted, tmp_path):
    assert run_subcommand("export", ["--model", str(converted[name]), "--output", str(tmp_path / "out")]) == 0
    original = datasets_of(FIXTURES / name / "lm_weights.hdf5")
    exported = datasets_of(tmp_path / "out" / "weights.hdf5")
    assert sorted(exported) == sorted(original)
    for dataset, (values, dtype, chunks, compression, attrs) in original.items():
        assert exported[dataset][1:] == (dtype, chunks, compression, attrs), dataset
        if dataset.endswith("/B"):
            # conversion adds the forget bias 1.0 in float32; taking it out again recovers B up to that rounding
            np.testing.assert_allclose(exported[dataset][0], values, rtol=0, atol=2**-23)
        else:
            np.testing.assert_array_equal(exported[dataset][0], values, err_msg=dataset)
    options = json.loads((tmp_path / "out" / "options.json").read_text())
    reference = json.loads((FIXTURES / name / "options.json").read_text())
    compared = {
        "lstm": ("dim", "projection_dim", "n_layers", "cell_clip", "proj_clip"),
        "char_cnn": ("filters", "n_highway", "activation", "embedding", "max_characters_per_token"),
    }
    for section, keys in compared.items():
        for key in keys:
            assert options[section].get(key) == reference[section].get(key), (section, key)
    assert bool(options["lstm"]["use_skip_connections"]) == bool(reference["lstm"].get("use_skip_connections"))


def outputs(model: ElmoModel) -> tuple[torch.Tensor, ...]:
    inputs = ElmoTokenizer()(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model.eval()(**inputs, output_hidden_states=True).hidden_states


def test_trained_pretraining_model_exports_and_converts_back_to_identical_outputs(tmp_path):
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config(word_vocab_size=5, max_characters_per_token=50, initializer_range=0.3))
    with torch.no_grad():  # weights as training leaves them: every parameter moved, forget biases included
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
        model.elmo.token_encoder.char_embeddings.weight[0] = 0
    model.save_pretrained(tmp_path / "trained")
    ElmoWordVocabulary(["</S>", "<S>", "<UNK>", "a", "b"]).save(tmp_path / "trained")
    assert export_original(tmp_path / "trained", tmp_path / "original") == []
    with h5py.File(tmp_path / "original" / "softmax.hdf5", "r") as softmax:
        np.testing.assert_array_equal(softmax["softmax/W"][()], model.softmax.weight.detach().numpy())
        np.testing.assert_array_equal(softmax["softmax/b"][()], model.softmax.bias.detach().numpy())
    assert (tmp_path / "original" / "vocab.txt").read_text() == "</S>\n<S>\n<UNK>\na\nb\n"
    assert json.loads((tmp_path / "original" / "options.json").read_text())["n_tokens_vocab"] == 5
    original = tmp_path / "original"
    back = convert_checkpoint(original / "options.json", original / "weights.hdf5", tmp_path / "back")
    for ours, theirs in zip(outputs(model.elmo), outputs(ElmoModel.from_pretrained(back))):
        torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-6)


def test_task_head_exports_its_biLM_and_names_what_is_left_out(tmp_path, capsys):
    torch.manual_seed(0)
    head = ElmoForTokenClassification(tiny_config(num_labels=3))
    head.save_pretrained(tmp_path / "head")
    assert run_subcommand("export", ["--model", str(tmp_path / "head"), "--output", str(tmp_path / "out")]) == 0
    assert "classifier.weight" in capsys.readouterr().out
    back = convert_checkpoint(tmp_path / "out" / "options.json", tmp_path / "out" / "weights.hdf5", tmp_path / "back")
    for ours, theirs in zip(outputs(head.elmo), outputs(ElmoModel.from_pretrained(back))):
        torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(max_characters_per_token=20), "reads exactly 50 characters"),
        (dict(padding_row=True), "no exact counterpart"),
    ],
)
def test_models_the_format_cannot_hold_are_refused_and_nothing_is_written(change, message, tmp_path, capsys):
    padding_row = change.pop("padding_row", False)
    model = ElmoModel(tiny_config(**change))
    if padding_row:
        with torch.no_grad():
            model.token_encoder.char_embeddings.weight[0] = 1.0
    model.save_pretrained(tmp_path / "model")
    assert run_subcommand("export", ["--model", str(tmp_path / "model"), "--output", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["model"]


def test_export_takes_a_packaged_model_name_offline(tmp_path, capsys):
    """Issue 26 item 1: `--model elmo-en-mini` is the packaged model's folder, with no Hub call."""
    assert run_subcommand("export", ["--model", "elmo-en-mini", "--output", str(tmp_path / "mini")]) == 0
    mini = tmp_path / "mini"
    back = convert_checkpoint(mini / "options.json", mini / "weights.hdf5", tmp_path / "back")
    packaged = ElmoModel.from_pretrained("elmo-en-mini")
    for ours, theirs in zip(outputs(packaged), outputs(ElmoModel.from_pretrained(back))):
        torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-6)


def _saved(folder):
    ElmoModel(tiny_config()).save_pretrained(folder)
    return folder


def _set_config(folder, **fields):
    """Changes fields of a saved folder's config.json, so that it no longer describes the weights beside it."""
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **fields}))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda model: (model / "config.json").write_text('{"num_layers": '), "config.json cannot be read as JSON"),
        (lambda model: (model / "config.json").write_text("[]"), "config.json holds a JSON list, not an object"),
        (lambda model: _set_config(model, num_layers=3), "its weights lack bilm.layers.2.backward_cell"),
        (lambda model: _set_config(model, num_highway_layers=0), "its weights hold token_encoder.highway.layers.0"),
        (lambda model: (model / "config.json").write_text('{"num_layers": -1}'), "num_layers must be a positive"),
        (lambda model: (model / "model.safetensors").write_bytes(b"garbage"), "cannot be read: Error while deseria"),
        (lambda model: (model / "config.json").unlink(), "is neither a folder holding a config.json nor the name"),
        (lambda model: (model.parent / "file").write_text(""), "is inside .*file, which is a file; give a folder"),
    ],
    ids=[
        "config-not-json", "config-not-an-object", "more-layers", "fewer-highways", "config-bad-value",
        "weights-not-safetensors", "no-config", "output-under-a-file",
    ],
)
def test_export_unusable_model_or_output_gives_one_error_line_and_exit_2(tmp_path, capsys, damage, message):
    """Issue 23 items 12 and 13: one `error:` line, exit status 2, nothing written."""
    model = _saved(tmp_path / "model")
    damage(model)
    capsys.readouterr()
    status = run_subcommand("export", ["--model", str(model), "--output", str(tmp_path / "file" / "out")])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert re.search(message, err), err


def test_export_into_a_read_only_folder_gives_one_error_line_and_exit_1(tmp_path, read_only_folder, capsys):
    """Issue 23 item 13: no raw OSError, nothing written."""
    output, model = read_only_folder / "out", _saved(tmp_path / "model")
    capsys.readouterr()
    assert run_subcommand("export", ["--model", str(model), "--output", str(output)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: writing --output {output} failed: Permission denied") and len(err.splitlines()) == 1
    assert list(read_only_folder.iterdir()) == []
