"""Property-based tests over random Unicode text and random batches (issue 9): the tokenizer never crashes on a str,
its offsets slice the original text to each word, and every sentence's outputs are the same alone or in any batch,
with zeros at padding.

CI runs `DEFAULT_EXAMPLES` derandomized examples per property (the same ones every run); set
`ELMO_HYPOTHESIS_EXAMPLES=2000` for a longer, freshly random search."""

import os

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from elmo_hf import ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from elmo_hf.tokenization_elmo import word_to_char_ids

DEFAULT_EXAMPLES = 30
EXAMPLES = int(os.environ.get("ELMO_HYPOTHESIS_EXAMPLES", DEFAULT_EXAMPLES))
PROPERTY_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize="ELMO_HYPOTHESIS_EXAMPLES" not in os.environ,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
BATCH_INVARIANCE_ATOL = 1e-5

# Any code point, lone surrogates and control characters included, mixed with text dense in spaces, punctuation,
# multi-byte characters and surrogates (as `errors="surrogateescape"` decoding leaves) so that most examples have
# several words.
ANY_CHARACTER = st.characters(exclude_categories=())
TEXT = st.one_of(
    st.text(ANY_CHARACTER, max_size=40),
    st.text(st.sampled_from(list("ab Zé.,!'\n\t\u3000😀中\ufffd\x00\ud800\udcff-")) | ANY_CHARACTER, max_size=40),
)
BATCH = st.lists(TEXT, min_size=1, max_size=5)
# Inputs that once crashed or are easy to get wrong, always run besides the random ones.
HARD_TEXTS = ["", " \t\n\u3000", "a\ud800b c!", "\udcff", "Zoë moved to São Paulo, Brazil! 😀", "e\u0301\x00\ufeff 中!"]
HARD_BATCH = ["", "a\udcff b", "Zoë moved to São Paulo, Brazil! Ok 😀", " ", "x"]
TOKENIZERS = {split: ElmoTokenizer(split_punctuation=split) for split in (True, False)}


def check_offsets(text: str, split_punctuation: bool):
    """Offsets slice `text` to each word, rows are the words' character ids, and the words cover every non-space."""
    tokenizer = TOKENIZERS[split_punctuation]
    encoding = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    words = tokenizer.tokenize(text)
    offsets = encoding["offset_mapping"]
    assert [text[start:end] for start, end in offsets] == words
    assert encoding["input_ids"] == [word_to_char_ids(word) for word in words]
    assert encoding.word_ids() == list(range(len(words)))
    assert encoding["attention_mask"] == [1] * len(words) and encoding["special_tokens_mask"] == [0] * len(words)
    # Words are non-empty, in order, do not overlap, and together hold every character that is not a space.
    covered = set()
    previous_end = 0
    for start, end in offsets:
        assert previous_end <= start < end <= len(text)
        covered.update(range(start, end))
        previous_end = end
    assert all(character.isspace() for index, character in enumerate(text) if index not in covered)


@PROPERTY_SETTINGS
@given(text=TEXT, split_punctuation=st.booleans())
def test_offsets_slice_the_text_to_each_word(text, split_punctuation):
    check_offsets(text, split_punctuation)


@pytest.mark.parametrize("split_punctuation", [True, False])
@pytest.mark.parametrize("text", HARD_TEXTS)
def test_offsets_on_hard_texts(text, split_punctuation):
    check_offsets(text, split_punctuation)


@PROPERTY_SETTINGS
@given(texts=BATCH, padding_side=st.sampled_from(["right", "left"]))
@example(texts=HARD_BATCH, padding_side="right")
@example(texts=HARD_BATCH, padding_side="left")
def test_tokenizer_batches_any_text_to_tensors(tokenizer, texts, padding_side):
    encoding = tokenizer(texts, padding=True, padding_side=padding_side, return_tensors="pt")
    lengths = [len(tokenizer.tokenize(text)) for text in texts]
    assert encoding["input_ids"].shape == (len(texts), max(lengths), 50)
    assert encoding["attention_mask"].sum(1).tolist() == lengths
    padding = encoding["attention_mask"] == 0
    assert bool((encoding["input_ids"][padding] == 0).all())
    assert bool((encoding["input_ids"][~padding] != 0).any(-1).all())


@PROPERTY_SETTINGS
@given(words=st.lists(st.text(ANY_CHARACTER, min_size=1, max_size=12), max_size=8))
@example(words=["a\ud800", "b c", "😀", "\x00"])
def test_pre_split_offsets_slice_the_space_joined_words(tokenizer, words):
    encoding = tokenizer(words, is_split_into_words=True, return_offsets_mapping=True)
    joined = " ".join(words)
    assert [joined[start:end] for start, end in encoding["offset_mapping"]] == words
    assert encoding["input_ids"] == [word_to_char_ids(word) for word in words]


@pytest.fixture(scope="module")
def fixture_model(converted) -> ElmoModel:
    """The converted allennlp fixture checkpoint: trained weights, so the outputs are not near zero."""
    return ElmoModel.from_pretrained(converted["allennlp"]).eval()


@pytest.fixture(scope="module")
def token_head(converted) -> ElmoForTokenClassification:
    """A token head with a task biLSTM (its own packing of the words) on the fixture checkpoint."""
    torch.manual_seed(0)
    return ElmoForTokenClassification.from_pretrained(
        converted["allennlp"], id2label={0: "O", 1: "B-X", 2: "I-X"}, task_lstm_dim=6
    ).eval()


def assert_batch_invariant(batch_outputs, single_outputs, mask, word_counts):
    """Each sentence's rows equal its own single-sentence outputs; every padding row is exactly zero."""
    for row, (single, count) in enumerate(zip(single_outputs, word_counts)):
        words = batch_outputs[row][mask[row]]
        assert words.shape[0] == count
        torch.testing.assert_close(words, single[0], atol=BATCH_INVARIANCE_ATOL, rtol=0)
        assert bool((batch_outputs[row][~mask[row]] == 0).all())


@PROPERTY_SETTINGS
@given(texts=BATCH, padding_side=st.sampled_from(["right", "left"]))
@example(texts=HARD_BATCH, padding_side="right")
@example(texts=HARD_BATCH, padding_side="left")
def test_every_layer_is_batch_invariant_with_zero_padding(fixture_model, tokenizer, texts, padding_side):
    batch = tokenizer(texts, padding=True, padding_side=padding_side, return_tensors="pt")
    mask = batch["attention_mask"].bool()
    with torch.inference_mode():
        together = fixture_model(**batch, output_hidden_states=True).hidden_states
        alone = [fixture_model(**tokenizer(text, return_tensors="pt"), output_hidden_states=True) for text in texts]
    for layer, batch_layer in enumerate(together):
        single_layers = [outputs.hidden_states[layer] for outputs in alone]
        assert_batch_invariant(batch_layer, single_layers, mask, mask.sum(1).tolist())


@PROPERTY_SETTINGS
@given(texts=BATCH, padding_side=st.sampled_from(["right", "left"]))
@example(texts=HARD_BATCH, padding_side="right")
@example(texts=HARD_BATCH, padding_side="left")
def test_token_head_logits_are_batch_invariant(token_head, tokenizer, texts, padding_side):
    batch = tokenizer(texts, padding=True, padding_side=padding_side, return_tensors="pt")
    mask = batch["attention_mask"].bool()
    with torch.inference_mode():
        together = token_head(**batch).logits
        alone = [token_head(**tokenizer(text, return_tensors="pt")).logits for text in texts]
    # Padding rows hold the classifier's bias (a linear layer on zero features), not zeros: compare the words only.
    for row, single in enumerate(alone):
        torch.testing.assert_close(together[row][mask[row]], single[0], atol=BATCH_INVARIANCE_ATOL, rtol=0)
