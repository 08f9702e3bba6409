"""Tests for the ELMo character tokenizer: exact ids, batching, offsets, padding, collators, save/load, errors."""

import json
import pickle

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from test_properties import ANY_CHARACTER, PROPERTY_SETTINGS
from transformers import AutoTokenizer, DataCollatorForTokenClassification, DataCollatorWithPadding

import elmo_hf
from elmo_hf.tokenization_elmo import (
    BEGIN_SENTENCE_CHAR_ID,
    BEGIN_SENTENCE_TOKEN,
    BEGIN_WORD_CHAR_ID,
    CHAR_VOCAB_SIZE,
    END_SENTENCE_CHAR_ID,
    END_SENTENCE_TOKEN,
    END_WORD_CHAR_ID,
    PADDING_CHAR_ID,
    PADDING_WITHIN_WORD_CHAR_ID,
    ElmoTokenizer,
    word_to_char_ids,
)

PAD_ROW = [0] * 50


def padded(ids: list[int]) -> list[int]:
    """A row of 50 ids: `ids` then within-word padding."""
    return ids + [261] * (50 - len(ids))


# Exact ids, checked by hand against the original mapping (UTF-8 bytes + 1 between 259 and 260).
@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("hello", padded([259, 105, 102, 109, 109, 112, 260])),
        ("café", padded([259, 100, 98, 103, 0xC3 + 1, 0xA9 + 1, 260])),
        ("😀", padded([259, 0xF0 + 1, 0x9F + 1, 0x98 + 1, 0x80 + 1, 260])),
        ("", padded([259, 260])),
        ("<S>", padded([259, 257, 260])),
        ("</S>", padded([259, 258, 260])),
        ("<s>", padded([259, 61, 116, 63, 260])),
    ],
)
def test_word_to_char_ids(word, expected):
    assert word_to_char_ids(word) == expected


def test_constants_match_the_original_shifted_ids():
    assert (PADDING_CHAR_ID, BEGIN_SENTENCE_CHAR_ID, END_SENTENCE_CHAR_ID) == (0, 257, 258)
    assert (BEGIN_WORD_CHAR_ID, END_WORD_CHAR_ID, PADDING_WITHIN_WORD_CHAR_ID, CHAR_VOCAB_SIZE) == (259, 260, 261, 262)
    assert (BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN) == ("<S>", "</S>")


def test_long_word_keeps_48_bytes_and_may_cut_a_character(tokenizer):
    ascii_word = "a" * 60
    assert word_to_char_ids(ascii_word) == [259] + [98] * 48 + [260]
    # 1 + 2 * 30 = 61 bytes: the 48th byte is the first half of the 24th "é".
    cut_word = "x" + "é" * 30
    row = word_to_char_ids(cut_word)
    assert row == [259, 121] + [0xC3 + 1, 0xA9 + 1] * 23 + [0xC3 + 1, 260]
    assert tokenizer.decode(row) == "x" + "é" * 23 + "\ufffd"


def test_max_characters_per_token_sets_the_row_length():
    assert word_to_char_ids("hello", 5) == [259, 105, 102, 109, 260]
    assert word_to_char_ids("<S>", 3) == [259, 257, 260]
    tokenizer = ElmoTokenizer(max_characters_per_token=8)
    assert tokenizer(["hello", "world!"], padding=True, return_tensors="pt")["input_ids"].shape == (2, 2, 8)


def dictionary_tokenizer(folder, with_words: bool, max_characters_per_token: int = 8) -> ElmoTokenizer:
    """A dictionary-mode tokenizer (ELMoForManyLangs layout) over a few characters, with or without word ids."""
    characters = {"<bow>": 1, "<eow>": 2, "<char_pad>": 3, "<oov>": 4, "<bos>": 5, "<eos>": 6}
    characters.update({character: 7 + index for index, character in enumerate("abé中😀<\ud800")})
    vocab = {"characters": characters}
    if with_words:
        cut_word = "a" * (max_characters_per_token - 2)
        vocab["words"] = {"<oov>": 1, "<bos>": 2, "<eos>": 3, "ab": 4, "中中": 5, cut_word: 6}
    path = folder / f"vocab-{with_words}.json"
    path.write_text(json.dumps(vocab), encoding="utf-8")
    return ElmoTokenizer(
        str(path), bos_token="<bos>", eos_token="<eos>", max_characters_per_token=max_characters_per_token
    )


@pytest.fixture(scope="module")
def batch_tokenizers(tmp_path_factory) -> dict[str, ElmoTokenizer]:
    """Byte tokenizers (50 and 8 characters a word) and dictionary tokenizers with and without word ids."""
    folder = tmp_path_factory.mktemp("vocab")
    return {
        "bytes": ElmoTokenizer(),
        "bytes-8": ElmoTokenizer(max_characters_per_token=8),
        "dictionary": dictionary_tokenizer(folder, with_words=False),
        "dictionary-words": dictionary_tokenizer(folder, with_words=True),
    }


# Words of any code point (lone surrogates included), words of the vocabularies' characters, boundary words, empty
# words, and long words of multi-byte characters (over 48 UTF-8 bytes, so they are cut inside a character).
WORD = st.one_of(
    st.text(ANY_CHARACTER, max_size=12),
    st.text(st.sampled_from(list("abé中😀<\ud800S/")), max_size=70),
    st.sampled_from(["", "<S>", "</S>", "<bos>", "<eos>", "<bos>x", "<S", "ab", "中中", "aaaaaa", "é" * 30]),
)


@PROPERTY_SETTINGS
@given(sentences=st.lists(st.lists(WORD, max_size=6), min_size=1, max_size=4), left=st.booleans())
@example(sentences=[["x" + "é" * 30, "", "😀" * 13, "<S>"], [], ["\ud800", "a\udcff" * 30]], left=False)
def test_batch_encoding_gives_the_per_word_ids(batch_tokenizers, sentences, left):
    for tokenizer in batch_tokenizers.values():
        encoding = tokenizer(
            sentences, is_split_into_words=True, padding=True, padding_side="left" if left else "right",
            return_tensors="np",
        )
        input_ids = encoding["input_ids"]
        assert input_ids.shape == (len(sentences), max(map(len, sentences)), tokenizer.row_width)
        for index, words in enumerate(sentences):
            rows = input_ids[index, input_ids.shape[1] - len(words) :] if left else input_ids[index, : len(words)]
            assert rows.tolist() == [tokenizer.word_to_ids(word) for word in words]
            assert np.count_nonzero(input_ids[index].any(-1)) == len(words)


def test_batch_encoding_of_long_empty_and_boundary_words(batch_tokenizers):
    words = ["a" * 60, "x" + "é" * 30, "", "<S>", "</S>", "<bos>", "<S>x", "<", "中中"]
    for tokenizer in batch_tokenizers.values():
        rows = tokenizer([words, ["ab"]], is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"]
        assert rows[0].tolist() == [tokenizer.word_to_ids(word) for word in words]
        assert rows[1, 0].tolist() == tokenizer.word_to_ids("ab") and not rows[1, 1:].any()
    assert batch_tokenizers["bytes"](words, is_split_into_words=True)["input_ids"][3] == word_to_char_ids("<S>")
    dictionary = batch_tokenizers["dictionary-words"]
    assert dictionary(["<bos>", "中中", "aaaaaaa"], is_split_into_words=True)["input_ids"] == [
        [1, 5, 2, 3, 3, 3, 3, 3, 2],  # the boundary row, then the word id of <bos>
        [1, 10, 10, 2, 3, 3, 3, 3, 5],
        [1, 7, 7, 7, 7, 7, 7, 2, 6],  # cut to 6 characters, whose word id it gets
    ]


def test_padding_to_max_length_keeps_longer_examples_whole(tokenizer):
    encoding = tokenizer(["a b c", "d"], padding="max_length", max_length=2)
    assert [len(rows) for rows in encoding["input_ids"]] == [3, 2]
    assert encoding["attention_mask"] == [[1, 1, 1], [1, 0]]
    with pytest.raises(ValueError, match="Unable to create tensor"):
        tokenizer(["a b c", "d"], padding="max_length", max_length=2, return_tensors="pt")


def test_vocabulary(tokenizer):
    assert len(tokenizer) == tokenizer.vocab_size == 262
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 257, 258)
    vocab = tokenizer.get_vocab()
    assert sorted(vocab.values()) == list(range(262))
    assert tokenizer.convert_tokens_to_ids(["a", "<bow>", "<eow>", "<char_pad>"]) == [98, 259, 260, 261]
    assert tokenizer.convert_ids_to_tokens([[98, 99]]) == ["ab"]
    assert tokenizer.convert_ids_to_tokens(98) == "a"


def test_pre_split_words(tokenizer):
    encoding = tokenizer(["Hello", "café", "<S>", ""], is_split_into_words=True)
    assert encoding["input_ids"] == [word_to_char_ids(word) for word in ["Hello", "café", "<S>", ""]]
    assert encoding["attention_mask"] == [1, 1, 1, 1]
    assert encoding.word_ids() == [0, 1, 2, 3]


def test_empty_inputs_give_zero_rows(tokenizer):
    assert tokenizer("")["input_ids"] == []
    assert tokenizer("   \n")["input_ids"] == []
    assert tokenizer([], is_split_into_words=True)["input_ids"] == []
    for text, is_split in [("", False), ([], True)]:
        encoding = tokenizer(text, is_split_into_words=is_split, return_tensors="pt", return_offsets_mapping=True)
        assert encoding["input_ids"].shape == (1, 0, 50)
        assert encoding["attention_mask"].shape == (1, 0)
        assert encoding["offset_mapping"].shape == (1, 0, 2)
        assert encoding.word_ids() == []
    batch = tokenizer(["", "a b"], padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, 2, 50)
    assert batch["attention_mask"].tolist() == [[0, 0], [1, 1]]


def test_batch_shapes_and_padding_rows(tokenizer):
    words = [["The", "cat", "sat"], ["Hi"]]
    encoding = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
    assert encoding["input_ids"].dtype == torch.long
    assert encoding["input_ids"].shape == (2, 3, 50)
    assert encoding["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert encoding["input_ids"][1, 1:].eq(0).all()
    assert encoding["input_ids"][1, 0].tolist() == word_to_char_ids("Hi")
    assert encoding.word_ids(1) == [0, None, None]

    single = tokenizer(["The", "cat"], is_split_into_words=True)
    assert len(single["input_ids"]) == 2 and len(single["input_ids"][0]) == 50
    assert tokenizer(["The", "cat"], is_split_into_words=True, return_tensors="pt")["input_ids"].shape == (1, 2, 50)

    numpy_batch = tokenizer(
        ["a b c", "d"], padding="max_length", max_length=4, pad_to_multiple_of=3, return_tensors="np"
    )
    assert numpy_batch["input_ids"].shape == (2, 6, 50)
    assert tokenizer(["a b c", "d"], padding=True, return_length=True)["length"] == [3, 1]
    assert tokenizer.encode("a b", return_tensors="pt").shape == (1, 2, 50)


def test_raw_text_offsets_and_word_ids_with_punctuation_and_non_ascii(tokenizer):
    text = "Hello, wörld! 😀👍🏽 北京欢迎你 «naïve» don't"
    encoding = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    words = ["Hello", ",", "wörld", "!", "😀👍🏽", "北京欢迎你", "«", "naïve", "»", "don", "'", "t"]
    # Offsets count Python str characters (the emoji with a skin tone is 3 code points), not UTF-8 bytes.
    assert [text[start:end] for start, end in encoding["offset_mapping"]] == words
    assert encoding["offset_mapping"][4] == (14, 17)
    assert encoding["input_ids"] == [word_to_char_ids(word) for word in words]
    assert encoding.word_ids() == list(range(len(words)))
    assert encoding["special_tokens_mask"] == [0] * len(words)
    assert tokenizer.tokenize(text) == words


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a\u00a0b\u2003c\td\ne", ["a", "b", "c", "d", "e"]),  # Unicode whitespace splits
        ("a\u200bb", ["a\u200bb"]),  # a zero-width space is not whitespace
        ("€5 $5 a+b", ["€5", "$", "5", "a", "+", "b"]),  # every ASCII symbol is isolated, non-ASCII symbols are not
        ("e\u0301t\u00e9 — ok", ["e\u0301t\u00e9", "—", "ok"]),  # combining marks stay, Unicode dashes split
        ("<S> hi </S>", ["<", "S", ">", "hi", "<", "/", "S", ">"]),  # raw text has no special words
    ],
)
def test_default_splitting_of_unicode_and_symbols(tokenizer, text, words):
    assert tokenizer.tokenize(text) == words


def test_whitespace_only_splitting_is_persisted(tmp_path):
    tokenizer = ElmoTokenizer(split_punctuation=False, max_characters_per_token=20)
    assert tokenizer.tokenize("Hello, world! don't\tgo") == ["Hello,", "world!", "don't", "go"]
    tokenizer.save_pretrained(tmp_path)
    reloaded = ElmoTokenizer.from_pretrained(tmp_path)
    assert (reloaded.split_punctuation, reloaded.max_characters_per_token) == (False, 20)
    assert reloaded.tokenize("Hello, world!") == ["Hello,", "world!"]


PYTHON_WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())


@pytest.mark.parametrize("split_punctuation", [False, True])
def test_whitespace_is_what_str_split_splits_at(split_punctuation):
    """Both modes split at every character `str.split()` splits at (the original's and `embed --split whitespace`'s
    whitespace), U+001C-U+001F included, and nowhere else in text without punctuation; the offsets give the words."""
    assert set("\x1c\x1d\x1e\x1f\x85\u3000") <= set(PYTHON_WHITESPACE)
    tokenizer = ElmoTokenizer(split_punctuation=split_punctuation)
    text = "a".join(PYTHON_WHITESPACE) + "b\x1cc\x1fd" + "".join(PYTHON_WHITESPACE)
    encoding = tokenizer(text, return_offsets_mapping=True)
    assert tokenizer.tokenize(text) == text.split()
    assert [text[start:end] for start, end in encoding["offset_mapping"]] == text.split()


def test_pre_split_offsets_index_the_space_joined_words(tokenizer):
    encoding = tokenizer([["New", "York", "!"]], is_split_into_words=True, return_offsets_mapping=True)
    assert encoding["offset_mapping"] == [[(0, 3), (4, 8), (9, 10)]]


def test_left_padding_word_ids_and_special_tokens_mask(tokenizer):
    encoding = tokenizer(
        ["a b c", "d"], padding=True, padding_side="left", return_special_tokens_mask=True, return_offsets_mapping=True
    )
    assert encoding["attention_mask"] == [[1, 1, 1], [0, 0, 1]]
    assert encoding["special_tokens_mask"] == [[0, 0, 0], [1, 1, 0]]
    assert encoding["input_ids"][1][:2] == [PAD_ROW, PAD_ROW]
    assert encoding["offset_mapping"][1] == [(0, 0), (0, 0), (0, 1)]
    assert encoding.word_ids(0) == [0, 1, 2]
    assert encoding.word_ids(1) == [None, None, 0]


def test_add_bos_eos_rows(tmp_path):
    tokenizer = ElmoTokenizer(add_bos_eos=True)
    encoding = tokenizer(["a b", "c"], padding=True, return_special_tokens_mask=True)
    assert encoding["input_ids"][1] == [
        word_to_char_ids("<S>"),
        word_to_char_ids("c"),
        word_to_char_ids("</S>"),
        PAD_ROW,
    ]
    assert encoding.word_ids(1) == [None, 0, None, None]
    assert encoding["special_tokens_mask"][1] == [1, 0, 1, 1]
    assert tokenizer("a b", add_special_tokens=False)["input_ids"] == [word_to_char_ids("a"), word_to_char_ids("b")]
    assert tokenizer.decode(encoding["input_ids"]) == ["<S> a b </S>", "<S> c </S> <pad>"]
    tokenizer.save_pretrained(tmp_path)
    assert ElmoTokenizer.from_pretrained(tmp_path).add_bos_eos is True


def test_truncation_counts_words(tokenizer):
    encoding = tokenizer("a b c d", truncation=True, max_length=2)
    assert tokenizer.decode(encoding["input_ids"]) == "a b"
    left = ElmoTokenizer(truncation_side="left")("a b c d", truncation=True, max_length=3)
    assert left.word_ids() == [1, 2, 3]
    with_boundaries = ElmoTokenizer(add_bos_eos=True)("a b c d", truncation=True, max_length=4)
    assert with_boundaries.word_ids() == [None, 0, 1, None]


def test_decode_and_convert_ids_to_tokens(tokenizer):
    batch = tokenizer(["Hello, world", "café"], padding=True, return_tensors="pt")["input_ids"]
    assert tokenizer.convert_ids_to_tokens(batch[0, 0]) == "Hello"
    assert tokenizer.convert_ids_to_tokens(batch[1]) == ["café", "<pad>", "<pad>"]
    assert tokenizer.convert_ids_to_tokens(batch[1], skip_special_tokens=True) == ["café"]
    assert tokenizer.decode(batch[0, 2]) == "world"
    assert tokenizer.decode(batch[0]) == "Hello , world"
    assert tokenizer.decode(batch) == ["Hello , world", "café <pad> <pad>"]
    assert tokenizer.batch_decode(batch, skip_special_tokens=True) == ["Hello , world", "café"]
    assert tokenizer.decode([word_to_char_ids("<S>"), word_to_char_ids("x")]) == "<S> x"
    assert tokenizer.decode(tokenizer("", return_tensors="pt")["input_ids"]) == [""]


def test_pad_single_batch_and_tensors(tokenizer):
    single = tokenizer.pad(tokenizer("a b"), padding="max_length", max_length=4)
    assert single["input_ids"][2:] == [PAD_ROW, PAD_ROW]
    assert single["attention_mask"] == [1, 1, 0, 0]

    examples = [tokenizer("a b c"), tokenizer("d")]
    from_lists = tokenizer.pad(examples, return_tensors="pt")
    assert from_lists["input_ids"].shape == (2, 3, 50)
    assert from_lists["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]

    tensor_examples = [{key: value[0] for key, value in tokenizer(text, return_tensors="pt").items()} for text in "ab"]
    from_tensors = tokenizer.pad(tensor_examples, padding="max_length", max_length=2, padding_side="left")
    assert isinstance(from_tensors["input_ids"], torch.Tensor)
    assert from_tensors["input_ids"].shape == (2, 2, 50)
    assert from_tensors["input_ids"][:, 0].eq(0).all()
    assert tokenizer.pad(tensor_examples[0], padding="max_length", max_length=3)["input_ids"].shape == (3, 50)


def test_data_collators(tokenizer):
    features = [
        {**tokenizer(words, is_split_into_words=True), "labels": labels}
        for words, labels in [(["EU", "rejects", "German"], [3, 0, 7]), (["Peter"], [1])]
    ]
    batch = DataCollatorForTokenClassification(tokenizer)(features)
    assert batch["input_ids"].shape == (2, 3, 50)
    assert batch["input_ids"][1, 1:].eq(0).all()
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[3, 0, 7], [1, -100, -100]]

    features = [{**tokenizer(text), "label": label} for text, label in [("good film", 1), ("bad", 0)]]
    batch = DataCollatorWithPadding(tokenizer)(features)
    assert batch["input_ids"].shape == (2, 2, 50)
    assert batch["attention_mask"].tolist() == [[1, 1], [1, 0]]
    assert batch["labels"].tolist() == [1, 0]


def test_save_and_auto_tokenizer_round_trip(tmp_path):
    tokenizer = ElmoTokenizer(max_characters_per_token=30, padding_side="left")
    tokenizer.save_pretrained(tmp_path)
    assert elmo_hf.ElmoTokenizer is ElmoTokenizer
    for reloaded in (ElmoTokenizer.from_pretrained(tmp_path), AutoTokenizer.from_pretrained(tmp_path)):
        assert type(reloaded) is ElmoTokenizer
        assert (reloaded.max_characters_per_token, reloaded.padding_side) == (30, "left")
        assert (len(reloaded), reloaded.pad_token_id, reloaded.bos_token_id, reloaded.eos_token_id) == (
            262,
            0,
            257,
            258,
        )
        assert reloaded("Hi there")["input_ids"] == tokenizer("Hi there")["input_ids"]


def test_pickle_keeps_the_splitter_and_word_ids(tokenizer):
    reloaded = pickle.loads(pickle.dumps(tokenizer))
    assert reloaded.tokenize("a, b") == ["a", ",", "b"]
    encoding = pickle.loads(pickle.dumps(tokenizer(["a b", "c"], padding=True)))
    assert encoding.word_ids(1) == [0, None]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        pytest.param(
            lambda tok: tok([["a", 3]], is_split_into_words=True),
            TypeError,
            r"Word 1 of example 0 is int, expected str",
            id="word-not-str",
        ),
        pytest.param(
            lambda tok: tok(["a", None], is_split_into_words=True),
            TypeError,
            r"Word 1 of example 0 is NoneType",
            id="unbatched-word-not-str",
        ),
        pytest.param(
            lambda tok: tok([["a"], "b"], is_split_into_words=True),
            TypeError,
            r"example 1 must be a list of words",
            id="example-not-word-list",
        ),
        pytest.param(
            lambda tok: tok("a b", is_split_into_words=True),
            TypeError,
            r"pass a list of words.*got a str",
            id="split-str",
        ),
        pytest.param(lambda tok: tok(3), TypeError, r"expects a str, a list of str.*got int", id="int-input"),
        pytest.param(
            lambda tok: tok(["a", ["b"]]),
            TypeError,
            r"Example 1 is list, expected str.*is_split_into_words=True",
            id="word-list-without-split-flag",
        ),
        pytest.param(lambda tok: tok("a", "b"), ValueError, r"encodes single sentences", id="text-pair"),
        pytest.param(
            lambda tok: tok(["a"], text_pair=["b"]), ValueError, r"encodes single sentences", id="pair-batch"
        ),
        pytest.param(
            lambda tok: tok("a", return_overflowing_tokens=True),
            ValueError,
            r"return_overflowing_tokens is not supported",
            id="overflowing-tokens",
        ),
        pytest.param(
            lambda tok: tok("a", return_token_type_ids=True), ValueError, r"no token type ids", id="token-type-ids"
        ),
        pytest.param(lambda tok: tok.tokenize(["a"]), TypeError, r"tokenize expects a str, got list", id="tokenize"),
        pytest.param(
            lambda tok: tok.convert_tokens_to_ids("hello"),
            ValueError,
            r"'hello' is not in the ELMo character vocabulary.*word_to_char_ids",
            id="word-as-token",
        ),
        pytest.param(
            lambda tok: tok.convert_ids_to_tokens(262), ValueError, r"Character id 262 is outside", id="bad-id"
        ),
        pytest.param(
            lambda tok: ElmoTokenizer(max_characters_per_token=2),
            ValueError,
            r"max_characters_per_token must be an int >= 3 .*got 2",
            id="init-max-characters",
        ),
        pytest.param(
            lambda tok: word_to_char_ids("a", 0),
            ValueError,
            r"max_characters_per_token must be an int >= 3 .*got 0",
            id="function-max-characters",
        ),
    ],
)
def test_bad_inputs_raise_clear_errors(tokenizer, call, error, match):
    with pytest.raises(error, match=match):
        call(tokenizer)


def test_empty_batch_has_a_two_dimensional_mask(tokenizer):
    encoding = tokenizer([], return_tensors="pt", return_special_tokens_mask=True, return_offsets_mapping=True)
    assert encoding["input_ids"].shape == (0, 0, 50)
    assert encoding["attention_mask"].shape == (0, 0)
    assert encoding["special_tokens_mask"].shape == (0, 0)
    assert encoding["offset_mapping"].shape == (0, 0, 2)


@pytest.mark.parametrize("max_length", [0, 1])
def test_boundaries_that_cannot_fit_max_length_are_refused(max_length):
    tokenizer = ElmoTokenizer(add_bos_eos=True)
    with pytest.raises(ValueError, match=f"max_length={max_length} cannot hold the <S> and </S> rows"):
        tokenizer("a b c", truncation=True, max_length=max_length)
    assert len(tokenizer("a b c", truncation=True, max_length=2)["input_ids"]) == 2
    assert len(tokenizer("a b c", truncation=True, max_length=1, add_special_tokens=False)["input_ids"]) == 1


@pytest.mark.parametrize(
    "add",
    [
        pytest.param(lambda tok: tok.add_tokens(["<mask>"]), id="add-tokens"),
        pytest.param(lambda tok: tok.add_special_tokens({"pad_token": "[PAD]"}), id="pad-token"),
        pytest.param(lambda tok: tok.add_special_tokens({"additional_special_tokens": ["<x>"]}), id="additional"),
    ],
)
def test_tokens_outside_the_character_vocabulary_cannot_be_added(add):
    """A new token would get id 262, which no row ever holds and the model cannot embed, while the text it names is
    still split and encoded by its characters: refused, and the tokenizer is left as it was."""
    tokenizer = ElmoTokenizer()
    with pytest.raises(ValueError, match=r"cannot add the tokens .*is_split_into_words=True"):
        add(tokenizer)
    assert (len(tokenizer), tokenizer.pad_token, tokenizer.pad_token_id) == (CHAR_VOCAB_SIZE, "<pad>", 0)
    assert tokenizer.all_special_tokens == ["<S>", "</S>", "<pad>"]
    with pytest.raises(ValueError, match=r"cannot add the tokens \['<mask>'\]"):
        ElmoTokenizer(mask_token="<mask>")
    assert tokenizer.add_special_tokens({"pad_token": "<pad>"}) == tokenizer.add_tokens(["a", "<bow>"]) == 0


def test_special_tokens_of_rows_are_found_by_row():
    """`get_special_tokens_mask` reads rows (as data collators call it), and decoding skips padding and boundary rows,
    not words that merely spell a special token."""
    tokenizer = ElmoTokenizer(add_bos_eos=True)
    sentences = [["<pad>", "a", "</S>x"], ["b"]]
    encoding = tokenizer(sentences, is_split_into_words=True, padding=True, return_special_tokens_mask=True)
    for input_ids, expected in zip(encoding["input_ids"], encoding["special_tokens_mask"]):
        assert tokenizer.get_special_tokens_mask(input_ids, already_has_special_tokens=True) == expected
        assert tokenizer.get_special_tokens_mask(torch.tensor(input_ids), already_has_special_tokens=True) == expected
    assert tokenizer.batch_decode(encoding["input_ids"], skip_special_tokens=True) == ["<pad> a </S>x", "b"]
    assert tokenizer.convert_ids_to_tokens(encoding["input_ids"][1], skip_special_tokens=True) == ["b"]
