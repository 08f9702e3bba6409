"""elmo-hf convert on damaged or hostile checkpoints and on outputs it cannot write: one `error:` line, no traceback,
nothing written; and the self-check, which sees every character id and any non-finite output."""

import errno
import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import FIXTURES

from elmo_hf import ElmoModel
from elmo_hf.conversion.checkpoint import (
    CHAR_EMBEDDINGS,
    PROJECTION_BIAS,
    PROJECTION_WEIGHT,
    ConversionError,
    convert_config,
    original_shapes,
    read_options,
    read_weights,
)
from elmo_hf.cli.convert import main
from elmo_hf.conversion.convert import (
    check_against_reference,
    convert_checkpoint,
    model_from_checkpoint,
    read_config,
)
from elmo_hf.conversion.reference import every_character_sentence, words_to_char_ids
from elmo_hf.tokenization_elmo import BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN

OPTIONS = FIXTURES / "allennlp" / "options.json"
WEIGHTS = FIXTURES / "allennlp" / "lm_weights.hdf5"
CONFIG = convert_config(read_options(OPTIONS))
# The character id of byte 0xFF, which no UTF-8 text contains: a sentence of words never reaches its embedding row.
BYTE_FF = 256


def run(tmp_path: Path, capsys, weights: Path = WEIGHTS, *options: str) -> tuple[int, str, str]:
    """`elmo-hf convert` on the fixture options and `weights` into tmp_path/out: (exit status, stdout, stderr)."""
    status = main(["--options", str(OPTIONS), "--weights", str(weights), "--output", str(tmp_path / "out"), *options])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def edited_weights(tmp_path: Path, name: str, edit) -> Path:
    """A copy of the fixture weights whose dataset `name` is replaced by `edit(its float32 array)`."""
    path = tmp_path / "weights.hdf5"
    shutil.copy(WEIGHTS, path)
    with h5py.File(path, "r+") as file:
        array = edit(file[name][()])
        del file[name]
        file[name] = array
    return path


def set_item(index, value, dtype=None):
    def edit(array):
        array = array.astype(dtype or array.dtype)
        array[index] = value
        return array

    return edit


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        (PROJECTION_WEIGHT, set_item((3, 5), np.inf),
         "dataset 'CNN_proj/W_proj' holds 1 non-finite values (NaN or inf), the first inf at index (3, 5)"),
        (PROJECTION_WEIGHT, set_item((0, 1), 1e39, np.float64),
         "dataset 'CNN_proj/W_proj' is float64 and 1 of its values do not fit float32 (the first, 1e+39 at index "
         "(0, 1), would become inf)"),
        (PROJECTION_BIAS, set_item(2, 1e-50, np.float64),
         "dataset 'CNN_proj/b_proj' is float64 and 1 of its values do not fit float32 (the first, 1e-50 at index "
         "(2,), would become 0.0)"),
        # A NaN in the row of one character: every output of a sentence containing it would be NaN.
        (CHAR_EMBEDDINGS, set_item((BYTE_FF - 1, 0), np.nan),
         "dataset 'char_embed' holds 1 non-finite values (NaN or inf), the first nan at index (255, 0)"),
    ],
    ids=["inf", "float64-overflow", "float64-underflow", "nan-character-row"],
)
def test_non_finite_and_lossy_weights_are_refused(tmp_path, capsys, name, edit, message):
    status, out, err = run(tmp_path, capsys, edited_weights(tmp_path, name, edit))
    assert status == 2 and err.startswith("error: weights file ") and message in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_float64_and_float16_checkpoints_that_fit_float32_convert(tmp_path):
    """Lossless casts are accepted: float64 holding float32 values, and float16 (converted exactly)."""
    path = tmp_path / "weights.hdf5"
    with h5py.File(WEIGHTS, "r") as source, h5py.File(path, "w") as copy:
        for name in original_shapes(CONFIG):
            copy[name] = source[name][()].astype(np.float16 if name == PROJECTION_BIAS else np.float64)
    expected, actual = read_weights(WEIGHTS, CONFIG), read_weights(path, CONFIG)
    for name, array in expected.items():
        target = array.astype(np.float16).astype(np.float32) if name == PROJECTION_BIAS else array
        assert actual[name].dtype == np.float32 and np.array_equal(actual[name], target), name
    convert_checkpoint(OPTIONS, path, tmp_path / "out")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda array: array.astype("S8"), "dataset 'CNN_proj/b_proj' has dtype |S8; ELMo weights are floating point"),
        (lambda array: array.astype(np.complex64),
         "dataset 'CNN_proj/b_proj' has dtype complex64; ELMo weights are floating point"),
        (lambda array: array.astype(np.int32), "dataset 'CNN_proj/b_proj' has dtype int32"),
    ],
    ids=["string", "complex", "integer"],
)
def test_non_float_datasets_are_refused(tmp_path, capsys, edit, message):
    status, out, err = run(tmp_path, capsys, edited_weights(tmp_path, PROJECTION_BIAS, edit))
    assert status == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_truncated_weights_file(tmp_path, capsys):
    path = tmp_path / "weights.hdf5"
    data = WEIGHTS.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    status, out, err = run(tmp_path, capsys, path)
    assert status == 2, err
    assert err.startswith(f"error: weights file {path} cannot be read (") and "truncated or damaged" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_self_check_sentence_uses_every_character_id():
    sentence = every_character_sentence(CONFIG)
    boundaries = words_to_char_ids([BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN], CONFIG)
    assert set(np.concatenate([sentence, boundaries]).ravel()) == set(range(1, CONFIG.char_vocab_size))
    assert sentence.shape[1] == CONFIG.max_characters_per_token


def fixture_model() -> tuple[ElmoModel, dict[str, np.ndarray]]:
    arrays = read_weights(WEIGHTS, CONFIG)
    return model_from_checkpoint(arrays, CONFIG), arrays


def test_self_check_sees_a_non_finite_row_of_a_rare_character():
    """A NaN in byte 0xFF's row (which passed into the model) makes the check fail though no text contains 0xFF."""
    model, arrays = fixture_model()
    arrays[CHAR_EMBEDDINGS][BYTE_FF - 1, 0] = np.nan
    with torch.no_grad():
        model.token_encoder.char_embeddings.weight[BYTE_FF, 0] = torch.nan
    with pytest.raises(ConversionError, match=r"layer 0 is not finite \(NaN or inf\) on a sentence that uses every"):
        check_against_reference(model, arrays)


def test_self_check_sees_a_wrong_row_of_a_rare_character():
    model, arrays = fixture_model()
    with torch.no_grad():
        model.token_encoder.char_embeddings.weight[BYTE_FF] += 1.0
    with pytest.raises(ConversionError, match="differs from the reference computation in layer 0"):
        check_against_reference(model, arrays)


def test_self_check_fails_on_finite_weights_that_overflow_float32(tmp_path, capsys):
    """Every weight finite, but the token projection's products overflow float32: no folder, a clear error."""
    path = edited_weights(tmp_path, PROJECTION_WEIGHT, lambda array: np.full_like(array, 3e38))
    status, out, err = run(tmp_path, capsys, path)
    assert status == 2 and "layer 0 is not finite (NaN or inf)" in err and "too large for float32" in err, err
    assert not (tmp_path / "out").exists()


def test_the_check_result_is_printed_per_layer(tmp_path, capsys):
    status, out, err = run(tmp_path, capsys)
    assert status == 0, err
    line = next(line for line in out.splitlines() if line.startswith("checked against the float64 reference"))
    differences = [float(part.split(": ")[1]) for part in line.split("per layer ")[1].split(" (")[0].split(", ")]
    assert len(differences) == CONFIG.num_layers + 1 and max(differences) < 1e-5


def test_read_only_output_folder(read_only_folder, capsys):
    read_only = read_only_folder
    output = read_only / "out"
    status = main(["--options", str(OPTIONS), "--weights", str(WEIGHTS), "--output", str(output)])
    err = capsys.readouterr().err
    assert status == 1, err
    assert err.startswith(f"error: writing --output {output} failed: Permission denied") and "Traceback" not in err
    assert list(read_only.iterdir()) == []


def test_dangling_symlink_output(tmp_path, capsys):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "missing" / "elmo")
    status, out, err = run(tmp_path, capsys)
    assert status == 2, err
    assert f"error: --output {link} is a symbolic link to {tmp_path / 'missing' / 'elmo'}, which does not exist" in err
    assert link.is_symlink() and not (tmp_path / "missing").exists()


def test_symlink_output_writes_where_it_points(tmp_path, capsys):
    (tmp_path / "real").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "real")
    status, out, err = run(tmp_path, capsys)
    assert status == 0, err
    assert (tmp_path / "out").is_symlink() and (tmp_path / "real" / "model.safetensors").is_file()


def full_disk(self, folder, *args, **kwargs):
    """`save_pretrained` on a full disk: part of a file is written, then the write fails."""
    (Path(folder) / "model.safetensors").write_bytes(b"\0" * 1000)
    raise OSError(errno.ENOSPC, "No space left on device", str(Path(folder) / "model.safetensors"))


def test_full_disk(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ElmoModel, "save_pretrained", full_disk)
    status, out, err = run(tmp_path, capsys)
    assert status == 1, err
    assert err.startswith(f"error: writing --output {tmp_path / 'out'} failed: No space left on device (")
    assert "Nothing was written" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_full_disk_keeps_the_previous_output(tmp_path, capsys, monkeypatch):
    assert run(tmp_path, capsys)[0] == 0
    before = {path.name: path.read_bytes() for path in (tmp_path / "out").iterdir()}
    monkeypatch.setattr(ElmoModel, "save_pretrained", full_disk)
    status, out, err = run(tmp_path, capsys, WEIGHTS, "--overwrite")
    assert status == 1 and "No space left on device" in err
    assert {path.name: path.read_bytes() for path in (tmp_path / "out").iterdir()} == before
    assert [path.name for path in tmp_path.iterdir()] == ["out"]


def test_nan_weights_are_reported_as_such_not_as_a_wrong_layout(tmp_path):
    weights = tmp_path / "weights.hdf5"
    weights.write_bytes((FIXTURES / "allennlp" / "lm_weights.hdf5").read_bytes())
    with h5py.File(weights, "r+") as file:
        file["CNN_proj/W_proj"][0, 0] = np.nan
    with pytest.raises(ConversionError, match="NaN") as raised:
        convert_checkpoint(FIXTURES / "allennlp" / "options.json", weights, tmp_path / "out")
    assert "layout" not in str(raised.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"num_layers": ', "config.json cannot be read as JSON"),
        ("[]", "config.json holds a JSON list, not an object"),
        ('{"lstm_dim": "abc"}', "cannot be loaded ("),
        ('{"num_layers": 0}', "cannot be loaded (ElmoConfig.num_layers must be a positive"),
    ],
)
def test_read_config_refuses_a_config_json_it_cannot_use_in_one_line(tmp_path, text, message):
    """`read_config`, which every command reading a model folder's config goes through, says what is wrong with a
    config.json on one line (a check between fields reaches it wrapped in the strict dataclass's two lines)."""
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConversionError, match=re.escape(message)) as refusal:
        read_config(tmp_path, ConversionError)
    assert "\n" not in str(refusal.value)


def test_read_config_applies_overrides(tmp_path):
    """Fields given to `read_config` replace the file's (pretrain --model with a new softmax sets its size)."""
    CONFIG.save_pretrained(tmp_path)
    assert read_config(tmp_path, ConversionError, word_vocab_size=12).word_vocab_size == 12
