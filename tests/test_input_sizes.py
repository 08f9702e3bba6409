"""Pathological input sizes: very long words, one long sentence among many short ones, text without words. Scaling is
checked by what is allocated or computed, never by timing."""

import tracemalloc

import torch
from conftest import tiny_config

from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.tokenization_elmo import word_to_char_ids

LONG = [f"w{index % 97}" for index in range(1000)]
SHORT = [["the", "cat"], [], ["a"], ["Über", "naïve", "😀"]] * 50


def test_long_word_keeps_its_first_bytes():
    """A 10,000-character word is one row: its first 48 UTF-8 bytes (cut inside a character where it falls)."""
    tokenizer = ElmoTokenizer()
    for word in ("x" * 10_000, "é" * 10_000, "a" + "\u0301" * 10_000):
        ids = tokenizer(word, return_tensors="pt")["input_ids"]
        assert ids.shape == (1, 1, 50)
        assert ids[0, 0].tolist() == word_to_char_ids(word)


def test_unpadded_batch_is_not_padded_to_its_longest_sentence():
    """Without padding, a 1,000-word sentence among 200 short ones costs its own rows: the batch used to be laid out
    padded to the longest sentence first (200 x 1,000 rows of 50 ids, 80 MB here; 19 GiB for 50,000 words among
    1,000 sentences, a MemoryError), then cut into lists."""
    tokenizer = ElmoTokenizer()
    batch = [LONG, *SHORT]
    tracemalloc.start()
    try:
        encoding = tokenizer(batch, is_split_into_words=True, return_special_tokens_mask=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    padded_bytes = len(batch) * len(LONG) * tokenizer.row_width * 8
    assert peak < padded_bytes / 8, (peak, padded_bytes)
    for index, words in enumerate(batch):
        alone = tokenizer(words, is_split_into_words=True, return_special_tokens_mask=True)
        assert {key: encoding[key][index] for key in alone} == dict(alone)
        assert encoding.word_ids(index) == alone.word_ids()


def test_long_sentence_batched_with_short_ones_matches_alone(tokenizer):
    """A 1,000-word sentence padded together with short (and empty) ones gets bitwise the vectors it gets alone, and
    the short ones theirs; rows beyond a sentence's words are zero."""
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).eval()
    batch = [SHORT[0], LONG, *SHORT[1:8]]
    inputs = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        together = model(**inputs, output_hidden_states=True).hidden_states
        for index, words in enumerate(batch):
            alone = tokenizer([words], is_split_into_words=True, return_tensors="pt")
            for layer, layer_alone in zip(together, model(**alone, output_hidden_states=True).hidden_states):
                assert torch.equal(layer[index, : len(words)], layer_alone[0])
                assert not layer[index, len(words) :].any()


def test_text_without_words_gives_no_rows(tokenizer):
    """Whitespace and separators only give no rows; zero-width and combining characters and lone surrogates are
    words (not whitespace), each one row."""
    empty = " \t\n\r\u2028\u3000" * 1000
    assert tokenizer(empty, return_tensors="pt")["input_ids"].shape == (1, 0, 50)
    for text, words in (("\u200b" * 1000, 1), ("\u0301" * 1000, 1), ("\ud800 x \udfff", 3)):
        encoding = tokenizer(text, return_tensors="pt", return_offsets_mapping=True)
        assert encoding["input_ids"].shape == (1, words, 50)
        assert encoding["offset_mapping"][0, -1, 1] == len(text)
