"""`save_pretrained` / `from_pretrained` as an experienced transformers user drives them, hostile cases included: every
case either gives back the saved model (bitwise, or within the dtype's rounding) or raises one error that names the
problem, never a silently wrong model."""

import copy
import errno
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from conftest import tiny_config
from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassFieldValidationError
from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from elmo_hf import ElmoConfig, ElmoForTokenClassification, ElmoModel, ElmoTokenizer


@pytest.fixture(scope="module")
def inputs(tokenizer):
    return tokenizer([["Ann", "lives", "here"], ["Hi"]], is_split_into_words=True, padding=True, return_tensors="pt")


def outputs(model, inputs) -> torch.Tensor:
    """The logits of a head, the top layer of the biLM."""
    with torch.no_grad():
        output = model.eval()(**inputs)
    return output.logits if hasattr(output, "logits") else output.last_hidden_state


@pytest.fixture
def saved(tmp_path) -> tuple[ElmoModel, Path]:
    """A tiny biLM and the folder it was saved to."""
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).eval()
    model.save_pretrained(tmp_path / "model")
    return model, tmp_path / "model"


def edited_config(folder: Path, **changes):
    """Rewrites `folder`'s config.json with `changes` (a value of `None` removes the key)."""
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "load",
    [
        ElmoModel.from_pretrained,
        AutoModel.from_pretrained,
        lambda path: AutoModel.from_pretrained(path, trust_remote_code=True),
    ],
    ids=["ElmoModel", "AutoModel", "AutoModel-remote-code"],
)
def test_many_tiny_shards_load_back_bitwise(load, inputs, tmp_path):
    torch.manual_seed(0)
    model = ElmoModel(tiny_config())
    model.save_pretrained(tmp_path, max_shard_size="1KB")
    assert len(list(tmp_path.glob("model-*-of-*.safetensors"))) > 10
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert torch.equal(outputs(load(tmp_path), inputs), outputs(model, inputs))


def test_dtype_auto_restores_the_saved_dtype_and_a_bfloat16_load_is_within_its_rounding(saved, inputs, tmp_path):
    model, folder = saved
    assert ElmoModel.from_pretrained(folder, dtype="auto").dtype == torch.float32
    bfloat16 = ElmoModel.from_pretrained(folder, dtype=torch.bfloat16)
    assert bfloat16.dtype == torch.bfloat16
    torch.testing.assert_close(outputs(bfloat16, inputs).float(), outputs(model, inputs), rtol=0.02, atol=0.01)
    bfloat16.save_pretrained(tmp_path / "bf16")
    reloaded = ElmoModel.from_pretrained(tmp_path / "bf16", dtype="auto")
    assert reloaded.dtype == torch.bfloat16
    assert torch.equal(outputs(reloaded, inputs), outputs(bfloat16, inputs))


def test_a_float16_model_saved_and_loaded_gives_the_same_bits(saved, inputs, tmp_path):
    half = copy.deepcopy(saved[0]).to(torch.float16)
    half.save_pretrained(tmp_path / "fp16")
    for dtype in ("auto", None):
        loaded = ElmoModel.from_pretrained(tmp_path / "fp16", **({"dtype": dtype} if dtype else {}))
        assert loaded.dtype == torch.float16
        assert torch.equal(outputs(loaded, inputs), outputs(half, inputs))


@pytest.mark.parametrize("options", [{"low_cpu_mem_usage": True}, {"device_map": "cpu"}, {"device_map": "auto"}])
def test_low_cpu_mem_usage_and_device_map_on_a_cpu_load_the_same_bits(options, saved, inputs):
    model, folder = saved
    assert torch.equal(outputs(ElmoModel.from_pretrained(folder, **options), inputs), outputs(model, inputs))


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],
        lambda data: data[:-8],
        lambda data: b"hello, this is not a safetensors file",
        lambda data: b"",
    ],
    ids=["cut-in-half", "cut-by-8-bytes", "not-safetensors", "empty"],
)
def test_a_damaged_weights_file_is_one_oserror_naming_the_folder_and_the_fix(damage, saved):
    _, folder = saved
    weights = folder / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    for load in (ElmoModel.from_pretrained, AutoModel.from_pretrained):
        with pytest.raises(OSError, match=rf"weights of {folder} cannot be read .*Save or download the model again"):
            load(folder)


@pytest.mark.parametrize("content", [None, "{}", "[1, 2]"], ids=["missing", "empty-object", "a-list"])
def test_a_folder_without_an_elmo_config_is_refused_not_built_with_the_default_architecture(content, saved):
    """transformers reads a missing config.json as `{}`: ElmoModel then built the 4096-cell default over the tiny
    weights and failed with a size-mismatch report (or, with `ignore_mismatched_sizes`, loaded random weights)."""
    _, folder = saved
    (folder / "config.json").unlink()
    if content is not None:
        (folder / "config.json").write_text(content)
    for load in (ElmoConfig.from_pretrained, ElmoModel.from_pretrained, ElmoForTokenClassification.from_pretrained):
        with pytest.raises(OSError, match=rf"{folder} has no ELMo config: its config.json is missing"):
            load(folder)


def test_a_config_json_cut_short_is_transformers_invalid_json_error(saved):
    _, folder = saved
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text[: len(text) // 2])
    for load in (ElmoModel.from_pretrained, AutoModel.from_pretrained, AutoConfig.from_pretrained):
        with pytest.raises(OSError, match="config.json' is not a valid JSON file"):
            load(folder)


@pytest.mark.parametrize(
    "value, error, message",
    [
        ("16", StrictDataclassFieldValidationError, "Field 'lstm_dim' expected int, got str"),
        (16.0, StrictDataclassFieldValidationError, "Field 'lstm_dim' expected int, got float"),
        (-16, ValueError, "ElmoConfig.lstm_dim must be a positive integer, got -16"),
    ],
)
def test_a_config_json_value_of_the_wrong_type_or_range_is_refused_by_name(value, error, message, saved):
    _, folder = saved
    edited_config(folder, lstm_dim=value)
    for load in (ElmoModel.from_pretrained, AutoModel.from_pretrained, AutoConfig.from_pretrained):
        with pytest.raises(error, match=message):
            load(folder)


def test_an_older_config_without_the_newer_fields_loads_with_their_defaults(saved, inputs):
    model, folder = saved
    edited_config(folder, elmo_implementation=None, softmax_type=None, scalar_mix_layer_norm=None,
                  word_embedding_dim=None, word_embedding_vocab_size=None, boundary_input_ids=None, auto_map=None,
                  custom_pipelines=None)
    loaded = ElmoModel.from_pretrained(folder)
    assert (loaded.config.elmo_implementation, loaded.config.word_embedding_dim) == ("auto", 0)
    assert torch.equal(outputs(loaded, inputs), outputs(model, inputs))


def test_an_unknown_config_key_is_kept_as_transformers_keeps_it(saved, inputs):
    model, folder = saved
    edited_config(folder, note="from the lab")
    loaded = ElmoModel.from_pretrained(folder)
    assert loaded.config.note == "from the lab"
    assert torch.equal(outputs(loaded, inputs), outputs(model, inputs))


def test_weights_of_another_lstm_dim_are_refused_unless_ignore_mismatched_sizes(saved):
    _, folder = saved
    edited_config(folder, lstm_dim=32)
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        ElmoModel.from_pretrained(folder)
    loaded = ElmoModel.from_pretrained(folder, ignore_mismatched_sizes=True)
    assert loaded.bilm.layers[0].forward_cell.projection.weight.shape == (8, 32)


def test_a_keyword_override_that_changes_weight_shapes_is_refused_unless_ignore_mismatched_sizes(saved):
    _, folder = saved
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        ElmoModel.from_pretrained(folder, lstm_dim=32)
    assert ElmoModel.from_pretrained(folder, lstm_dim=32, ignore_mismatched_sizes=True).config.lstm_dim == 32


def test_a_biLM_folder_loaded_into_a_head_says_which_layers_are_new(saved):
    model, folder = saved
    logger = logging.get_logger("elmo_hf.modeling_elmo")
    for load in (ElmoForTokenClassification.from_pretrained, AutoModelForTokenClassification.from_pretrained):
        with CaptureLogger(logger) as captured:
            head = load(folder, num_labels=3)
        assert "new task layers (classifier, scalar_mix) start from random values; train them" in captured.out
        assert head.new_task_layers == ["classifier", "scalar_mix"]
        for name, value in model.state_dict().items():
            assert torch.equal(head.elmo.state_dict()[name], value), name


def test_a_heads_folder_loaded_into_the_biLM_gives_the_heads_biLM(inputs, tmp_path):
    torch.manual_seed(1)
    head = ElmoForTokenClassification(tiny_config(num_labels=3))
    head.save_pretrained(tmp_path)
    for load in (ElmoModel.from_pretrained, AutoModel.from_pretrained):
        assert torch.equal(outputs(load(tmp_path), inputs), outputs(head.elmo, inputs))


def test_keyword_overrides_are_applied_checked_and_a_misspelt_one_is_refused(saved, inputs):
    model, folder = saved
    loaded = ElmoModel.from_pretrained(folder, elmo_implementation="eager", elmo_dropout=0.1)
    assert (loaded.config.elmo_implementation, loaded.config.elmo_dropout) == ("eager", 0.1)
    torch.testing.assert_close(outputs(loaded, inputs), outputs(model, inputs))  # the modules, not the CPU kernels
    with pytest.raises(ValueError, match=r"ElmoConfig.elmo_dropout must be in \[0, 1\)"):
        ElmoModel.from_pretrained(folder, elmo_dropout=1.5)
    with pytest.raises(StrictDataclassFieldValidationError, match="elmo_dropout"):
        ElmoModel.from_pretrained(folder, elmo_dropout="0.1")
    with pytest.raises(StrictDataclassClassValidationError, match="scalar_mix_parameters needs num_layers \\+ 1 = 4"):
        ElmoModel.from_pretrained(folder, num_layers=3, scalar_mix_parameters=[0.0, 0.0])
    with pytest.raises(TypeError, match="unexpected keyword argument 'elmo_droput'"):
        AutoModel.from_pretrained(folder, elmo_droput=0.1)


def test_save_pretrained_into_a_file_raises_and_leaves_the_file(saved, tmp_path):
    """transformers logged an error and saved nothing for a model and a tokenizer, and raised a bare AssertionError
    for a config."""
    model, _ = saved
    path = tmp_path / "a-file"
    path.write_text("keep")
    for save in (model.save_pretrained, model.config.save_pretrained, ElmoTokenizer().save_pretrained):
        with pytest.raises(NotADirectoryError, match="save_pretrained writes a folder, but this is a file") as error:
            save(path)
        assert error.value.errno == errno.ENOTDIR and error.value.filename == os.fspath(path)
    assert path.read_text() == "keep"


def test_save_pretrained_into_a_read_only_folder_raises_permission_error(saved, read_only_folder):
    model, _ = saved
    for save in (model.save_pretrained, model.config.save_pretrained):
        with pytest.raises(PermissionError):
            save(read_only_folder / "model")
    assert list(read_only_folder.iterdir()) == []


def test_save_over_a_folder_with_other_files_keeps_them_and_loads_the_new_weights(saved, inputs, tmp_path):
    _, folder = saved
    target = tmp_path / "target"
    shutil.copytree(folder, target)
    (target / "notes.txt").write_text("keep")
    torch.manual_seed(5)
    other = ElmoModel(tiny_config())
    other.save_pretrained(target)
    assert (target / "notes.txt").read_text() == "keep"
    assert torch.equal(outputs(ElmoModel.from_pretrained(target), inputs), outputs(other, inputs))


@pytest.mark.parametrize("variant", [None, "v1"])
def test_saving_shards_over_one_file_and_back_loads_the_new_weights(variant, inputs, tmp_path):
    """transformers left the previous `model.safetensors` (`model.v1.safetensors` for a variant) beside new shards,
    and `from_pretrained` loaded it; a save of another variant leaves this one alone."""
    one_file, index = ("model.safetensors", "model.safetensors.index.json") if variant is None else (
        "model.v1.safetensors", "model.safetensors.index.v1.json"
    )
    ElmoModel(tiny_config()).save_pretrained(tmp_path, variant="other" if variant is None else None)
    kept = sorted(path.name for path in tmp_path.glob("model*"))
    for seed, shard_size in enumerate(["1KB", "5GB", "1KB"]):
        torch.manual_seed(seed)
        model = ElmoModel(tiny_config())
        model.save_pretrained(tmp_path, max_shard_size=shard_size, variant=variant)
        sharded = shard_size == "1KB"
        assert (tmp_path / one_file).exists() != sharded
        assert (tmp_path / index).exists() == sharded
        loaded = ElmoModel.from_pretrained(tmp_path, variant=variant)
        assert torch.equal(outputs(loaded, inputs), outputs(model, inputs))
    assert set(kept) <= {path.name for path in tmp_path.glob("model*")}


def test_config_json_string_round_trips():
    config = tiny_config(num_labels=3, scalar_mix_parameters=[0.1, 0.2, 0.3], task_lstm_dim=4)
    assert ElmoConfig.from_dict(json.loads(config.to_json_string())).to_dict() == config.to_dict()


@pytest.mark.parametrize(
    "clone", [copy.deepcopy, lambda value: pickle.loads(pickle.dumps(value))], ids=["deepcopy", "pickle"]
)
def test_copied_and_pickled_models_and_configs_are_equal_and_still_checked(clone, inputs):
    torch.manual_seed(0)
    for model in (ElmoModel(tiny_config()), ElmoForTokenClassification(tiny_config(num_labels=3))):
        assert torch.equal(outputs(clone(model), inputs), outputs(model, inputs))
        config = clone(model.config)
        assert config.to_dict() == model.config.to_dict()
        with pytest.raises(ValueError, match="ElmoConfig.lstm_dim must be a positive integer"):
            config.lstm_dim = -1
