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
HARD_TEXTS = [
    "",
    " \t\n\u3000",
    "a\ud800b c!",
    "\udcff",
    "Zoë moved to São Paulo, Brazil! 😀",
    "e\u0301\x00\ufeff 中!",
]
HARD_BATCH = ["", "a\udcff b", "Zoë moved to São Paulo, Brazil! Ok 😀", " ", "x"]
TOKENIZERS = {split: ElmoTokenizer(split_punctuation=split) for split in (True, False)}


def random_batches(test):
    """Runs `test(texts=..., padding_side=...)` on random batches, and on `HARD_BATCH` padded on either side."""
    for side in ("right", "left"):
        test = example(texts=HARD_BATCH, padding_side=side)(test)
    return given(texts=BATCH, padding_side=st.sampled_from(["right", "left"]))(test)


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
@random_batches
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


def together_and_alone(run, tokenizer, texts: list[str], padding_side: str):
    """`run(inputs)` -> a tuple of `(batch, words, dim)` tensors, on the padded batch and on each text alone, with the
    batch's word mask."""
    batch = tokenizer(texts, padding=True, padding_side=padding_side, return_tensors="pt")
    with torch.inference_mode():
        together = run(batch)
        alone = [run(tokenizer(text, return_tensors="pt")) for text in texts]
    return together, alone, batch["attention_mask"].bool()


def assert_words_batch_invariant(together, alone, mask):
    """Each sentence's word rows, in every output, equal its own single-sentence outputs."""
    for row, single in enumerate(alone):
        for batch_output, single_output in zip(together, single):
            words = batch_output[row][mask[row]]
            torch.testing.assert_close(words, single_output[0], atol=BATCH_INVARIANCE_ATOL, rtol=0)


@PROPERTY_SETTINGS
@random_batches
def test_every_layer_is_batch_invariant_with_zero_padding(fixture_model, tokenizer, texts, padding_side):
    together, alone, mask = together_and_alone(
        lambda inputs: fixture_model(**inputs, output_hidden_states=True).hidden_states, tokenizer, texts, padding_side
    )
    assert_words_batch_invariant(together, alone, mask)
    assert all(bool((layer[~mask] == 0).all()) for layer in together)


@PROPERTY_SETTINGS
@random_batches
def test_token_head_logits_are_batch_invariant(token_head, tokenizer, texts, padding_side):
    # Padding rows hold the classifier's bias (a linear layer on zero features), not zeros: compare the words only.
    together, alone, mask = together_and_alone(
        lambda inputs: (token_head(**inputs).logits,), tokenizer, texts, padding_side
    )
    assert_words_batch_invariant(together, alone, mask)
