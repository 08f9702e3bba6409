"""Parity with the original implementation on both fixture checkpoints, with the originals' own criterion."""

import h5py
import numpy as np
import pytest
import torch
from conftest import FIXTURE_SETS, FIXTURES, expected_top_layer, fixture_sentences

from elmo_hf import ElmoModel


def assert_original_close(actual: torch.Tensor, expected: np.ndarray):
    """`numpy.allclose(actual, expected, atol=1e-6, rtol=1e-5)`, the test both original projects use."""
    actual = actual.numpy()
    assert actual.shape == expected.shape
    assert np.allclose(actual, expected, atol=1e-6, rtol=1e-5), f"max abs diff {np.abs(actual - expected).max():.3g}"


def load(converted, name: str, implementation: str = "auto") -> ElmoModel:
    """The converted checkpoint; `implementation="eager"` runs the reference modules, `"auto"` the CPU kernels."""
    return ElmoModel.from_pretrained(converted[name], elmo_implementation=implementation).eval()


def batch_rows(sentences, batch: int) -> list[list[str]]:
    """Batch i of the original run: sentence i of list 0, list 1 and list 2."""
    return [sentences[row][batch] for row in range(3)]


@pytest.mark.parametrize("implementation", ["auto", "eager"])
@pytest.mark.parametrize("name", FIXTURE_SETS)
def test_stateful_run_matches_original(converted, tokenizer, name, implementation):
    model, sentences = load(converted, name, implementation), fixture_sentences(name)
    state = None
    for batch in range(10):
        rows = batch_rows(sentences, batch)
        inputs = tokenizer(rows, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            outputs = model(**inputs, lstm_state=state, output_lstm_state=True)
        state = outputs.lstm_state
        for row, words in enumerate(rows):
            assert_original_close(outputs.last_hidden_state[row, : len(words)], expected_top_layer(name, row, batch))


@pytest.mark.parametrize("implementation", ["auto", "eager"])
@pytest.mark.parametrize("name", FIXTURE_SETS)
def test_stateless_first_batch_matches_original(converted, tokenizer, name, implementation):
    model, sentences = load(converted, name, implementation), fixture_sentences(name)
    rows = batch_rows(sentences, 0)
    inputs = tokenizer(rows, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        top = model(**inputs).last_hidden_state
    for row, words in enumerate(rows):
        assert_original_close(top[row, : len(words)], expected_top_layer(name, row, 0))
        assert torch.all(top[row, len(words) :] == 0)


def test_stateless_later_batches_differ_from_stateful_original(converted, tokenizer):
    """The fixtures were made statefully: without the carried state, batch 1 does not reproduce them."""
    model, sentences = load(converted, "allennlp"), fixture_sentences("allennlp")
    rows = batch_rows(sentences, 1)
    inputs = tokenizer(rows, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        top = model(**inputs).last_hidden_state
    assert not np.allclose(top[0, : len(rows[0])].numpy(), expected_top_layer("allennlp", 0, 1), atol=1e-3)


@pytest.mark.parametrize("implementation", ["auto", "eager"])
def test_token_layer_matches_original_embeddings(converted, tokenizer, implementation):
    model = load(converted, "allennlp", implementation)
    words = (FIXTURES / "allennlp" / "vocab_test.txt").read_text(encoding="utf-8").splitlines()
    with h5py.File(FIXTURES / "allennlp" / "elmo_token_embeddings.hdf5", "r") as file:
        expected = file["embedding"][...]
    assert len(words) == expected.shape[0]
    char_ids = tokenizer([[word] for word in words], is_split_into_words=True, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        actual = model.token_encoder(char_ids[:, 0])
    assert_original_close(actual, expected)


@pytest.mark.parametrize("name", FIXTURE_SETS)
def test_stateless_outputs_do_not_depend_on_the_batch(converted, tokenizer, name):
    """Each sentence alone, in a padded batch, in reversed order and after other batches: one output."""
    model = load(converted, name)
    sentences = [sentence for sentences in fixture_sentences(name) for sentence in sentences[:4]]

    def run(batch: list[list[str]]) -> list[tuple[torch.Tensor, ...]]:
        inputs = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            layers = model(**inputs, output_hidden_states=True).hidden_states
        return [tuple(layer[row, : len(words)] for layer in layers) for row, words in enumerate(batch)]

    alone = [run([sentence])[0] for sentence in sentences]
    batched = run(sentences)
    reversed_order = run(sentences[::-1])[::-1]
    run(sentences[:5])
    after_others = run(sentences)
    for variant in (batched, reversed_order, after_others):
        for expected, actual in zip(alone, variant):
            for expected_layer, actual_layer in zip(expected, actual):
                torch.testing.assert_close(actual_layer, expected_layer, atol=1e-5, rtol=0)
