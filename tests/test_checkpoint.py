"""elmo_hf/conversion/checkpoint.py: the one table of the original datasets, both ways, and the float64 reference."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import FIXTURE_SETS, FIXTURES, fixture_sentences, tiny_config

from elmo_hf import ElmoModel
from elmo_hf.conversion.checkpoint import (
    convert_config,
    original_datasets,
    original_shapes,
    read_options,
    read_weights,
    to_original,
    to_state_dict,
)
from elmo_hf.conversion.convert import model_from_checkpoint
from elmo_hf.conversion.reference import reference_layers, words_to_char_ids

ROOT = Path(__file__).resolve().parents[1]


def fixture(name: str):
    config = convert_config(read_options(FIXTURES / name / "options.json"))
    return config, read_weights(FIXTURES / name / "lm_weights.hdf5", config)


@pytest.mark.parametrize("name", FIXTURE_SETS)
def test_every_parameter_comes_from_exactly_one_dataset(name):
    config, arrays = fixture(name)
    parameters = [key for dataset in original_datasets(config) for key in dataset.parameters]
    assert sorted(parameters) == sorted(ElmoModel(config).state_dict())
    assert set(arrays) == set(original_shapes(config))
    assert len(original_shapes(config)) == len(original_datasets(config))
    state = to_state_dict(arrays, config)
    for key, tensor in ElmoModel(config).state_dict().items():
        assert state[key].shape == tuple(tensor.shape), key


@pytest.mark.parametrize("name", FIXTURE_SETS)
def test_the_table_inverts_exactly(name):
    """Original -> ours -> original gives the datasets back, in float64 bit for bit (the forget bias +1 and -1 is
    exact there); an exporter writes `to_original(model.state_dict())`."""
    config, arrays = fixture(name)
    arrays = {key: value.astype(np.float64) for key, value in arrays.items()}
    back = to_original(to_state_dict(arrays, config), config)
    assert set(back) == set(arrays)
    for key, value in arrays.items():
        assert back[key].shape == value.shape and np.array_equal(back[key], value), key


def test_a_random_model_goes_to_the_original_layout_and_back():
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).eval()
    state = {key: value.double().numpy() for key, value in model.state_dict().items()}
    original = to_original(state, model.config)
    assert {key: value.shape for key, value in original.items()} == original_shapes(model.config)
    for key, value in to_state_dict(original, model.config).items():
        assert np.array_equal(value, state[key]), key


@pytest.mark.parametrize("name", FIXTURE_SETS)
def test_reference_matches_the_converted_model_on_the_fixture_sentences(name):
    """The float64 reference on the original datasets and the converted model agree at the originals' tolerance."""
    config, arrays = fixture(name)
    model = model_from_checkpoint(arrays, config)
    for sentence in [sentence for sentences in fixture_sentences(name) for sentence in sentences[:3]]:
        char_ids = words_to_char_ids(sentence, config)
        with torch.no_grad():
            actual = model(input_ids=torch.from_numpy(char_ids)[None], output_hidden_states=True).hidden_states
        expected = reference_layers(arrays, config, char_ids)
        assert len(expected) == config.num_layers + 1
        for ours, reference in zip(actual, expected):
            assert np.allclose(ours[0].numpy(), reference, atol=1e-6, rtol=1e-5)


def test_reference_refuses_padding_words():
    config, arrays = fixture("allennlp")
    char_ids = np.concatenate([words_to_char_ids(["a"], config), np.zeros((1, 50), dtype=np.int64)])
    with pytest.raises(ValueError, match="remove the padding words"):
        reference_layers(arrays, config, char_ids)


ORIGINAL_NAME = re.compile(r"char_embed\b|CNN_proj|CNN_high_|W_cnn_|b_cnn_|LSTMCell|MultiRNNCell|W_P_0")


def test_original_names_are_spelled_in_checkpoint_py_only():
    files = [path for folder in ("elmo_hf", "conversion", "benchmarks", "examples") for path in
             (ROOT / folder).rglob("*.py")]
    spelled = sorted(str(path.relative_to(ROOT)) for path in files if ORIGINAL_NAME.search(path.read_text()))
    assert spelled == ["elmo_hf/conversion/checkpoint.py"]
