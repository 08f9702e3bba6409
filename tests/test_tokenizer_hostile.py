"""Hostile inputs to `ElmoTokenizer`, driven as a `transformers` user would: each gives exact ids (checked against the
documented mapping written out below) or one clear error, never a deep traceback or a silently wrong result."""

import numpy as np
import pytest
import torch
from test_tokenization_elmo import dictionary_tokenizer
from transformers import AutoTokenizer

from elmo_hf.tokenization_elmo import ElmoTokenizer

PAD_ROW = [0] * 50
# Words that stress the byte mapping: 4-byte emoji (cut inside one), combining marks, NUL and control characters,
# lone surrogates, a word of exactly 48 bytes, the boundary words, and the empty word.
HOSTILE_WORDS = [
    "😀" * 13,
    "a" + "😀" * 12,
    "x" + "é" * 30,
    "b" * 48,
    "e\u0301\u0301",
    "a\x00b",
    "\x01\x1b\x7f",
    "a\ud800b",
    "\udfff",
    "\ud83d\ude00",
    "<S>",
    "</S>",
    "",
    "a b",
]


def reference_row(word: str, width: int = 50) -> list[int]:
    """The documented mapping, written out: the word's UTF-8 bytes (lone surrogates have none) cut to `width - 2`,
    each + 1, framed by 259 and 260 and padded with 261; the words `"<S>"` and `"</S>"` are the rows of 257 / 258."""
    if word in ("<S>", "</S>"):
        chars = [257 if word == "<S>" else 258]
    else:
        encodable = "".join(char for char in word if not 0xD800 <= ord(char) <= 0xDFFF)
        chars = [byte + 1 for byte in encodable.encode("utf-8")[: width - 2]]
    row = [259, *chars, 260]
    return row + [261] * (width - len(row))


@pytest.fixture(scope="module")
def tok() -> ElmoTokenizer:
    return ElmoTokenizer()


def test_reference_row_matches_hand_checked_ids():
    assert reference_row("a") == [259, 98, 260] + [261] * 47
    assert reference_row("😀" * 13) == [259, *[0xF0 + 1, 0x9F + 1, 0x98 + 1, 0x80 + 1] * 12, 260]
    assert reference_row("a" + "😀" * 12) == [259, 98, *[241, 160, 153, 129] * 11, 241, 160, 153, 260]


def test_hostile_pre_split_words_get_the_reference_rows(tok):
    encoding = tok(HOSTILE_WORDS, is_split_into_words=True)
    assert encoding["input_ids"] == [reference_row(word) for word in HOSTILE_WORDS]
    assert encoding["attention_mask"] == [1] * len(HOSTILE_WORDS)
    assert encoding.word_ids() == list(range(len(HOSTILE_WORDS)))


def test_words_longer_than_48_bytes_keep_their_first_48_bytes_even_inside_a_character(tok):
    rows = tok(["😀" * 13, "a" + "😀" * 12, "c" * 49], is_split_into_words=True)["input_ids"]
    assert rows[0][1:49] == [241, 160, 153, 129] * 12 and rows[0][49] == 260
    assert rows[1][-4:] == [241, 160, 153, 260]  # the last emoji keeps 3 of its 4 bytes
    assert rows[2] == [259] + [100] * 48 + [260]
    assert tok.decode(rows[1]) == "a" + "😀" * 11 + "\ufffd"


def test_empty_and_whitespace_only_text_give_zero_rows(tok):
    for text in ["", " ", " \t\n\r\u3000\u2028\u00a0"]:
        assert tok(text)["input_ids"] == [] and tok(text)["attention_mask"] == []
        encoding = tok(text, return_tensors="pt", return_offsets_mapping=True)
        assert encoding["input_ids"].shape == (1, 0, 50)
        assert encoding["attention_mask"].shape == encoding["offset_mapping"].shape[:2] == (1, 0)


def test_raw_text_words_are_their_offsets_and_get_the_reference_rows(tok):
    text = "e\u0301\u0301 a\x00b \ud800 x\ud800y, 😀😀! \x1b[0m\tok\u200b \ufeffz  " + "é" * 40
    encoding = tok(text, return_offsets_mapping=True)
    words = [text[start:end] for start, end in encoding["offset_mapping"]]
    expected = ["e\u0301\u0301", "a\x00b", "\ud800", "x\ud800y", ",", "😀😀", "!", "\x1b", "[", "0m", "ok\u200b"]
    assert words == [*expected, "\ufeffz", "é" * 40]
    assert encoding["input_ids"] == [reference_row(word) for word in words]
    assert tok.tokenize(text) == words


def test_pre_split_empty_word_and_word_with_a_space_each_get_one_row_and_offsets_into_the_joined_words(tok):
    words = ["", "a b", "c"]
    encoding = tok(words, is_split_into_words=True, return_offsets_mapping=True)
    assert encoding["input_ids"] == [reference_row(word) for word in words]
    joined = " ".join(words)
    assert [joined[start:end] for start, end in encoding["offset_mapping"]] == words


def test_zero_sentences_give_an_empty_batch(tok):
    assert tok([])["input_ids"] == [] and tok([], is_split_into_words=True)["input_ids"] == []
    for return_tensors in ("pt", "np"):
        encoding = tok([], padding=True, return_tensors=return_tensors)
        assert tuple(encoding["input_ids"].shape) == (0, 0, 50)
        assert tuple(encoding["attention_mask"].shape) == (0, 0)


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_batch_mixing_empty_and_non_empty_sentences_keeps_rows_masks_and_offsets_aligned(tok, padding_side):
    texts = ["", "héllo wörld", "   ", "😀" * 13, "a\x00b c d"]
    encoding = tok(texts, padding=True, padding_side=padding_side, return_offsets_mapping=True, return_tensors="pt")
    assert encoding["input_ids"].shape == (5, 3, 50)
    for index, text in enumerate(texts):
        mask = encoding["attention_mask"][index].bool()
        words = text.split()
        positions = mask.nonzero().flatten().tolist()
        assert positions == (list(range(len(words))) if padding_side == "right" else list(range(3 - len(words), 3)))
        assert encoding["input_ids"][index, mask].tolist() == [reference_row(word) for word in words]
        assert not encoding["input_ids"][index, ~mask].any()
        assert [text[start:end] for start, end in encoding["offset_mapping"][index, mask].tolist()] == words
        assert [word_id for word_id in encoding.word_ids(index) if word_id is not None] == list(range(len(words)))


@pytest.mark.parametrize(
    ("padding", "max_length", "lengths"),
    [
        (True, None, [4, 4, 4]),
        ("longest", None, [4, 4, 4]),
        ("max_length", 6, [6, 6, 6]),
        ("max_length", 2, [4, 2, 2]),  # longer examples are kept whole without truncation
        ("max_length", None, [4, 1, 0]),  # no max_length and no model_max_length: no padding
        (False, None, [4, 1, 0]),
        ("do_not_pad", None, [4, 1, 0]),
    ],
)
def test_padding_modes_pad_with_zero_rows_to_the_asked_length(tok, padding, max_length, lengths):
    texts = ["a b c d", "e", ""]
    encoding = tok(texts, padding=padding, max_length=max_length, truncation=False)
    assert [len(rows) for rows in encoding["input_ids"]] == lengths
    for text, rows, mask in zip(texts, encoding["input_ids"], encoding["attention_mask"]):
        words = text.split()
        assert rows == [reference_row(word) for word in words] + [PAD_ROW] * (len(rows) - len(words))
        assert mask == [1] * len(words) + [0] * (len(rows) - len(words))


def test_truncation_without_max_length_keeps_every_word_and_with_it_keeps_the_first_words(tok):
    texts = ["a b c d", "e"]
    assert tok(texts, truncation=True)["input_ids"] == tok(texts)["input_ids"]
    truncated = tok(texts, truncation=True, max_length=2, padding="max_length", return_tensors="pt")
    assert truncated["input_ids"].shape == (2, 2, 50)
    assert truncated["input_ids"][0].tolist() == [reference_row("a"), reference_row("b")]
    assert truncated.word_ids(0) == [0, 1] and truncated.word_ids(1) == [0, None]
    assert tok("a b c", truncation=True, max_length=0)["input_ids"] == []


def test_truncation_only_second_is_refused_as_there_is_no_second_sentence(tok):
    with pytest.raises(ValueError, match=r'truncation="only_second" .*single sentences; use truncation=True'):
        tok("a b c", truncation="only_second", max_length=1)
    with pytest.raises(ValueError, match=r'truncation="only_second"'):
        tok(["a b c"], truncation="only_second")


def test_pad_to_multiple_of_rounds_the_padded_length_up(tok):
    encoding = tok(["a b c d", "e"], padding=True, pad_to_multiple_of=3, return_tensors="np")
    assert encoding["input_ids"].shape == (2, 6, 50)
    assert encoding["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]]
    assert tok("a b c d", pad_to_multiple_of=3)["input_ids"] == tok("a b c d")["input_ids"]  # no padding asked


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"padding": True, "pad_to_multiple_of": 0}, r"pad_to_multiple_of .*int >= 1; got 0"),
        ({"padding": True, "pad_to_multiple_of": -2}, r"pad_to_multiple_of .*int >= 1; got -2"),
        ({"padding": True, "pad_to_multiple_of": 2.5}, r"pad_to_multiple_of .*got 2.5"),
        ({"padding": "max_length", "max_length": 4.5}, r"max_length counts words.*int >= 0; got 4.5"),
        ({"padding": "max_length", "max_length": -1}, r"max_length .*got -1"),
        ({"truncation": True, "max_length": -1}, r"max_length .*got -1"),
        ({"truncation": True, "max_length": 2.5}, r"max_length .*got 2.5"),
        ({"truncation": True, "max_length": "2"}, r"max_length .*got '2'"),
        ({"truncation": True, "max_length": True}, r"max_length .*got True"),
        ({"truncation": True, "padding": True, "max_length": 4, "pad_to_multiple_of": 0}, r"pad_to_multiple_of"),
    ],
)
def test_word_counts_that_are_not_counts_are_refused_by_call_encode_and_pad(tok, kwargs, match):
    with pytest.raises(ValueError, match=match):
        tok(["a b c", "d"], **kwargs)
    with pytest.raises(ValueError, match=match):
        tok.encode("a b c", **kwargs)
    pad_kwargs = {key: value for key, value in kwargs.items() if key != "truncation"}
    pad_kwargs.setdefault("padding", True)
    if "max_length" in pad_kwargs or "pad_to_multiple_of" in pad_kwargs:
        with pytest.raises(ValueError, match=match):
            tok.pad([tok("a b c"), tok("d")], **pad_kwargs)


def test_numpy_integer_word_counts_are_accepted(tok):
    encoding = tok(["a b c", "d"], padding="max_length", max_length=np.int64(4), pad_to_multiple_of=np.int32(4))
    assert encoding["attention_mask"] == [[1, 1, 1, 0], [1, 0, 0, 0]]


def test_return_tensors_pt_np_and_none_give_the_same_ids(tok):
    texts = ["héllo 😀" * 3, "", "a\x00b"]
    lists = tok(texts, padding=True)
    as_numpy = tok(texts, padding=True, return_tensors="np")
    as_torch = tok(texts, padding=True, return_tensors="pt")
    assert as_torch["input_ids"].dtype == torch.long and as_numpy["input_ids"].dtype == np.int64
    for key in ("input_ids", "attention_mask"):
        assert as_numpy[key].tolist() == as_torch[key].tolist() == lists[key]


def test_unknown_return_tensors_raise_the_transformers_error(tok):
    with pytest.raises(ValueError, match=r"tf is not a valid TensorType"):
        tok("a", return_tensors="tf")


def test_return_attention_mask_false_leaves_the_mask_out(tok):
    for return_tensors in (None, "pt"):
        encoding = tok(["a b", "c"], padding=True, return_attention_mask=False, return_tensors=return_tensors)
        assert set(encoding) == {"input_ids"}


def test_return_length_counts_the_words_before_padding(tok):
    assert tok(["a b c", "", "d"], padding=True, return_length=True)["length"] == [3, 0, 1]
    assert tok(["a b c", "d"], padding=True, return_length=True, return_tensors="pt")["length"].tolist() == [3, 1]
    assert tok("a b", return_length=True)["length"] == 2


def test_text_pair_is_refused(tok):
    with pytest.raises(ValueError, match=r"encodes single sentences, but text_pair was given"):
        tok("a", "b")
    with pytest.raises(ValueError, match=r"encodes single sentences"):
        tok(["a"], text_pair=["b"], is_split_into_words=True)


@pytest.mark.parametrize(
    ("text", "kwargs", "error", "match"),
    [
        (None, {}, ValueError, r"specify either `text` or `text_target`"),
        (5, {}, TypeError, r"got int\. Convert arrays"),
        (b"abc", {}, TypeError, r"got bytes\. .*bytes to str with `\.decode\(\)`"),
        ([b"abc"], {}, TypeError, r"Example 0 is bytes, expected str; convert every example to a str"),
        (["a", None], {}, TypeError, r"Example 1 is NoneType, expected str; convert every example"),
        (np.array(["a b", "c"]), {}, TypeError, r"got ndarray\. Convert arrays .*`\.tolist\(\)`"),
        (np.array([["a", "b"]]), {"is_split_into_words": True}, TypeError, r"got ndarray"),
        ((word for word in ["a"]), {}, TypeError, r"got generator\. .*`list\(\)`"),
        (["a", ["b"]], {}, TypeError, r"Example 1 is list, expected str; .*is_split_into_words=True"),
        (["a", b"b"], {"is_split_into_words": True}, TypeError, r"Word 1 of example 0 is bytes"),
    ],
)
def test_non_str_inputs_raise_one_clear_error(tok, text, kwargs, error, match):
    with pytest.raises(error, match=match):
        tok(text, **kwargs)


def test_numpy_str_scalars_are_str_and_encode_as_such(tok):
    assert tok([np.str_("a b")])["input_ids"] == tok(["a b"])["input_ids"]
    assert tok([np.str_("é")], is_split_into_words=True)["input_ids"] == [reference_row("é")]


def test_encode_and_decode_round_trip_words_that_are_not_cut(tok):
    words = ["héllo", "e\u0301", "a\x00b", "😀" * 12, "<S>", ""]
    ids = tok.encode(words, is_split_into_words=True)
    assert ids == [reference_row(word) for word in words]
    assert tok.convert_ids_to_tokens(ids) == words
    assert tok.decode(ids) == " ".join(words)
    assert tok.decode(tok.encode(words, is_split_into_words=True, return_tensors="pt")) == [" ".join(words)]


@pytest.mark.parametrize("bad_row", [[259, 300, 260], [259, -1, 260], [262] * 50])
def test_decoding_ids_outside_the_character_vocabulary_is_refused(tok, bad_row):
    match = rf"holds {bad_row[1]}, which is no character id"
    with pytest.raises(ValueError, match=match):
        tok.decode(bad_row)
    with pytest.raises(ValueError, match=match):
        tok.convert_ids_to_tokens([reference_row("a"), bad_row])
    with pytest.raises(ValueError, match=match):
        tok.batch_decode([[bad_row]])


def test_decoding_ids_that_are_no_integers_is_refused_not_rounded(tok):
    """`int()` turned 104.5 (and a float tensor's values) into characters and True into byte 0: a wrong word."""
    ids = tok("hi there", return_tensors="pt")["input_ids"]
    assert tok.decode(ids[0]) == "hi there" and tok.convert_ids_to_tokens(np.int64(104)) == "g"
    for floats in (ids.float(), ids[0, 0].double().numpy(), [104.5] * 3):
        with pytest.raises(TypeError, match=r"Ids are integers.*\(float\) in the row"):
            tok.decode(floats)
        with pytest.raises(TypeError, match=r"Ids are integers.*\(float\) in the row"):
            tok.convert_ids_to_tokens(floats)
    for scalar, kind in ((104.0, "float"), (True, "bool")):
        with pytest.raises(TypeError, match=rf"got {scalar} \({kind}\)\.$"):
            tok.convert_ids_to_tokens(scalar)


def test_dictionary_mode_refuses_ids_outside_its_vocabulary(tmp_path):
    tokenizer = dictionary_tokenizer(tmp_path, with_words=True)
    row = tokenizer.word_to_ids("ab")
    assert tokenizer.decode(row) == "ab"
    with pytest.raises(ValueError, match=r"holds 99, which is no character id"):
        tokenizer.decode([row[0], 99, *row[2:]])


def test_decoding_more_than_three_axes_is_refused(tok):
    with pytest.raises(ValueError, match=r"at most 3 axes\), got 4 axes"):
        tok.decode(np.zeros((1, 1, 1, 50), np.int64))


def test_save_pretrained_and_auto_tokenizer_round_trip_keep_settings_and_ids(tmp_path):
    tokenizer = ElmoTokenizer(
        max_characters_per_token=10,
        add_bos_eos=True,
        split_punctuation=False,
        padding_side="left",
        truncation_side="left",
        model_max_length=5,
    )
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert type(reloaded) is ElmoTokenizer
    settings = ("max_characters_per_token", "add_bos_eos", "split_punctuation", "padding_side", "truncation_side")
    assert [getattr(reloaded, name) for name in settings] == [10, True, False, "left", "left"]
    texts = ["x, 😀😀😀 a\x00b \ud800", "", "a b c d e f"]
    # model_max_length=5 counts the <S> and </S> rows; truncation_side="left" keeps the last 3 words.
    encoding = reloaded(texts, padding=True, truncation=True)
    assert encoding["input_ids"] == tokenizer(texts, padding=True, truncation=True)["input_ids"]
    kept = ["<S>", "😀😀😀", "a\x00b", "\ud800", "</S>"]
    assert encoding["input_ids"][0] == [reference_row(word, 10) for word in kept]
    assert encoding.word_ids(0) == [None, 1, 2, 3, None]
    assert encoding["input_ids"][1] == [[0] * 10] * 3 + [reference_row(word, 10) for word in ["<S>", "</S>"]]
    assert encoding.word_ids(2) == [None, 3, 4, 5, None]


def test_pad_gives_what_padding_in_the_call_gives(tok):
    texts = ["héllo wörld !", "", "😀"]
    for kwargs in ({}, {"padding_side": "left", "pad_to_multiple_of": 4}, {"padding": "max_length", "max_length": 5}):
        examples = [tok(text, return_offsets_mapping=True, return_special_tokens_mask=True) for text in texts]
        padded = tok.pad(examples, return_tensors="pt", **kwargs)
        called = tok(
            texts,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
            return_tensors="pt",
            **{"padding": True, **kwargs},
        )
        for key in ("input_ids", "attention_mask", "offset_mapping", "special_tokens_mask"):
            assert padded[key].tolist() == called[key].tolist(), key


def test_pad_of_an_empty_list_or_an_encoding_without_rows_gives_an_empty_batch(tok):
    assert tok.pad([])["input_ids"] == []
    assert tok.pad([], return_tensors="pt")["input_ids"].shape == (0, 0, 50)
    padded = tok.pad(tok(""), padding="max_length", max_length=2, return_tensors="pt")
    assert padded["input_ids"].shape == (0, 0, 50) and padded["attention_mask"].shape == (0, 0)


def test_large_batch_and_long_sentence_are_encoded_exactly(tok):
    batch = [HOSTILE_WORDS[index % len(HOSTILE_WORDS) :] for index in range(3000)]
    encoding = tok(batch, is_split_into_words=True, padding=True, return_tensors="np")
    assert encoding["input_ids"].shape == (3000, len(HOSTILE_WORDS), 50)
    for index in (0, 1, 13, 1500, 2999):
        words = batch[index]
        assert encoding["input_ids"][index, : len(words)].tolist() == [reference_row(word) for word in words]
        assert encoding["attention_mask"][index].sum() == len(words)
        assert not encoding["input_ids"][index, len(words) :].any()
    long_sentence = tok(" ".join(["w😀rd"] * 50_000), return_tensors="np")["input_ids"]
    assert long_sentence.shape == (1, 50_000, 50)
    assert (long_sentence[0] == reference_row("w😀rd")).all()
