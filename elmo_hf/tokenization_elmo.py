# Copyright 2026 The elmo-hf Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Character-level tokenizer for ELMo: one row of character ids per word, from UTF-8 bytes or a dictionary."""

import json
import os
import re
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np
from tokenizers import AddedToken, Regex, pre_tokenizers
from transformers import BatchEncoding, PreTrainedTokenizer
from transformers.tokenization_utils_base import TruncationStrategy
from transformers.utils import PaddingStrategy, TensorType, is_torch_available, to_py_obj

from .errors import is_whole
from .packaged_elmo import check_save_directory, resolve_model_name


if is_torch_available():
    import torch

# Character ids as the model sees them: the original ids shifted by +1, so that 0 is free for padding words.
PADDING_CHAR_ID = 0
BEGIN_SENTENCE_CHAR_ID = 257
END_SENTENCE_CHAR_ID = 258
BEGIN_WORD_CHAR_ID = 259
END_WORD_CHAR_ID = 260
PADDING_WITHIN_WORD_CHAR_ID = 261
CHAR_VOCAB_SIZE = 262

BEGIN_SENTENCE_TOKEN = "<S>"
END_SENTENCE_TOKEN = "</S>"

# Code points that UTF-8 cannot encode; in a Python str they are always unpaired.
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
# The separators U+001C-U+001F: whitespace to Python's `str.split` (which the original, AllenNLP, `elmo-hf embed
# --split whitespace` and the pretraining corpus split lines with) but not to `tokenizers`' pre-tokenizers, which
# split at every other character `str.split` splits at.
_SEPARATORS = "[\x1c-\x1f]"

# Names of the word-structure characters in the character vocabulary (bytes are named by `chr(byte)`).
_NAMED_CHARS = {"<bow>": BEGIN_WORD_CHAR_ID, "<eow>": END_WORD_CHAR_ID, "<char_pad>": PADDING_WITHIN_WORD_CHAR_ID}
_NAMED_CHAR_IDS = {char_id: name for name, char_id in _NAMED_CHARS.items()}
# Dictionary mode: the entry of unknown characters (in "characters") and unknown words (in "words") of vocab.json.
UNKNOWN_ENTRY = "<oov>"
VOCAB_FILES_NAMES = {"vocab_file": "vocab.json"}

def _check_max_characters_per_token(max_characters_per_token: int) -> None:
    """Raise unless a row can hold the begin-word, one character and the end-word ids."""
    if not isinstance(max_characters_per_token, int) or max_characters_per_token < 3:
        raise ValueError(
            f"max_characters_per_token must be an int >= 3 (begin-word, one character, end-word), got "
            f"{max_characters_per_token!r}; the released ELMo models use 50."
        )


def _check_word_counts(max_length: Any, pad_to_multiple_of: Any) -> None:
    """Raise unless `max_length` is `None` or an int >= 0 and `pad_to_multiple_of` `None` or an int >= 1: other values
    fail deep inside the padding arithmetic (0, floats) or silently truncate or pad to a meaningless length (< 0)."""
    for name, value, least in (("max_length", max_length, 0), ("pad_to_multiple_of", pad_to_multiple_of, 1)):
        if value is not None and (not is_whole(value) or value < least):
            raise ValueError(f"{name} counts words, so it must be None or an int >= {least}; got {value!r}.")


def word_to_char_ids(word: str, max_characters_per_token: int = 50) -> list[int]:
    """
    Map one word to its `max_characters_per_token` character ids, exactly as the original ELMo does.

    The word's UTF-8 bytes are cut to `max_characters_per_token - 2` (possibly inside a multi-byte character), framed
    by the begin-word and end-word ids and padded with the within-word padding id. The literal tokens `"<S>"` and
    `"</S>"` become the sentence-boundary rows.
    """
    _check_max_characters_per_token(max_characters_per_token)
    if word == BEGIN_SENTENCE_TOKEN:
        chars = [BEGIN_SENTENCE_CHAR_ID]
    elif word == END_SENTENCE_TOKEN:
        chars = [END_SENTENCE_CHAR_ID]
    else:
        chars = [byte + 1 for byte in word.encode("utf-8", "ignore")[: max_characters_per_token - 2]]
    row = [BEGIN_WORD_CHAR_ID, *chars, END_WORD_CHAR_ID]
    return row + [PADDING_WITHIN_WORD_CHAR_ID] * (max_characters_per_token - len(row))


def _scalar_depth(value: Any) -> int | None:
    """Number of axes above the scalars of a nested list or tensor, or `None` if it holds no scalar at all."""
    depth = 0
    while isinstance(value, (list, tuple)):
        depth += 1
        value = next((item for item in value if not isinstance(item, (list, tuple)) or item), None)
        if value is None:
            return None
    return depth + getattr(value, "ndim", 0)


def _check_integer_ids(ids: Sequence[Any]) -> None:
    """Raises where an id is no integer (a float or a bool): `int()` would turn 104.5 into another character."""
    wrong = next((value for value in ids if not is_whole(value)), None)
    if wrong is not None:
        where = f" in the row {list(ids)}" if len(ids) > 1 else ""
        raise TypeError(
            f"Ids are integers, as the tokenizer's `input_ids` are; got {wrong!r} ({type(wrong).__name__}){where}."
        )


class ElmoBatchEncoding(BatchEncoding):
    """A [`BatchEncoding`] that remembers which input word each row holds, so `word_ids()` works."""

    def __init__(
        self,
        data: dict[str, Any],
        word_ids: list[list[int | None]],
        tensor_type: str | TensorType | None = None,
        prepend_batch_axis: bool = False,
    ):
        self._word_ids = word_ids
        super().__init__(data, tensor_type=tensor_type, prepend_batch_axis=prepend_batch_axis)

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """Index of the input word in each row of example `batch_index`; `None` for padding and `<S>`/`</S>` rows."""
        return list(self._word_ids[batch_index])

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "word_ids": self._word_ids}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._word_ids = state["word_ids"]


class ElmoTokenizer(PreTrainedTokenizer):
    """
    Construct an ELMo tokenizer: text is split into words, and each word becomes one row of
    `max_characters_per_token` character ids (its UTF-8 bytes + 1, framed by begin-word 259 and end-word 260, padded
    with 261), as in [Peters et al. (2018)](https://huggingface.co/papers/1802.05365). `input_ids` therefore have
    shape `(batch_size, sequence_length, max_characters_per_token)`, and `attention_mask` `(batch_size,
    sequence_length)`. A padding word is a row of zeros, so `pad_token_id == 0`. The integer ids form a character
    vocabulary of 262 entries: the 256 bytes (named `chr(byte)`), `<bow>`, `<eow>`, `<char_pad>` and the special
    tokens `pad_token` (0), `bos_token` (257) and `eos_token` (258).

    Raw text is split with a `tokenizers` pre-tokenizer. By default (`split_punctuation=True`) it is
    `BertPreTokenizer`: split on whitespace and isolate every punctuation character, because the 1B Word Benchmark
    text the released models were trained on has punctuation split off (`"world!"` is two words there). The cost is
    that contractions, decimals and abbreviations are split further than in that data (`"don't"` → `don ' t`,
    `"3.5"` → `3 . 5`); for exact fidelity pass words that were split the same way as the training data, with
    `is_split_into_words=True`. Non-ASCII text is kept intact: `café`, emoji and CJK runs stay single words, and
    offsets count Python `str` characters. `split_punctuation=False` splits on whitespace only. Whitespace is
    what Python's `str.split()` splits at (U+001C-U+001F included), in both modes.

    The model adds the sentence boundaries `<S>`/`</S>` itself, so by default there is one row per input word, and
    labels, `word_ids()` and `special_tokens_mask` line up with the words. Only the literal words `"<S>"` and `"</S>"`
    map to the boundary rows, as in the original (raw text split at punctuation never yields them).

    Dictionary mode (`vocab_file`, the ELMoForManyLangs models): characters are Unicode code points looked up in the
    vocabulary's `"characters"` (unknown ones get its `"<oov>"` id) instead of UTF-8 bytes. A word keeps its first
    `max_characters_per_token - 2` code points, framed by the `"<bow>"` and `"<eow>"` ids and padded with
    `"<char_pad>"`; the words equal to `bos_token` / `eos_token` become the sentence-boundary rows. If the vocabulary
    also has `"words"`, every row gets one more id at the end: the (cut) word's id, or `"<oov>"`'s, so `input_ids` are
    `(batch_size, sequence_length, max_characters_per_token + 1)`. Ids start at 1; 0 stays the padding word. Raw text
    is split as above, which never splits a run of Chinese or Japanese characters: those models expect words
    segmented as in their training data, so pass segmented words (`is_split_into_words=True`) or space-separated text.

    Calling the tokenizer is the one way words become ids in elmo-hf (the `embed` command and the pretraining collator
    call `tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")`): the words of a whole
    batch are encoded at once with numpy into the padded `input_ids`, the same ids that [`~ElmoTokenizer.word_to_ids`]
    gives word by word.

    Args:
        vocab_file (`str`, *optional*):
            `vocab.json` of dictionary mode: `{"characters": {entry: id}, "words": {entry: id}}` (`"words"` optional).
            `None` (default): UTF-8 byte ids.
        bos_token (`str`, *optional*, defaults to `"<S>"`):
            Name of the begin-sentence id 257.
        eos_token (`str`, *optional*, defaults to `"</S>"`):
            Name of the end-sentence id 258.
        pad_token (`str`, *optional*, defaults to `"<pad>"`):
            Name of the padding id 0 (a padding word is a row of zeros).
        max_characters_per_token (`int`, *optional*, defaults to 50):
            Length of a word's row; longer words keep their first `max_characters_per_token - 2` bytes.
        split_punctuation (`bool`, *optional*, defaults to `True`):
            Whether raw text is also split at punctuation (see above), or at whitespace only.
        add_bos_eos (`bool`, *optional*, defaults to `False`):
            Whether to add the `<S>` and `</S>` rows, for models that do not add them themselves (bilm-tf style).
            elmo-hf's models add them, so leave it off for them: with it, per-word labels must be aligned with
            `word_ids()` (the boundaries' rows take -100), or each label lands one row early.
    """

    model_input_names = ["input_ids", "attention_mask"]
    vocab_files_names = VOCAB_FILES_NAMES

    def __init__(
        self,
        vocab_file: str | None = None,
        bos_token: str | AddedToken = BEGIN_SENTENCE_TOKEN,
        eos_token: str | AddedToken = END_SENTENCE_TOKEN,
        pad_token: str | AddedToken = "<pad>",
        max_characters_per_token: int = 50,
        split_punctuation: bool = True,
        add_bos_eos: bool = False,
        **kwargs,
    ):
        _check_max_characters_per_token(max_characters_per_token)
        self.max_characters_per_token = max_characters_per_token
        self.char_vocab, self.word_vocab = (None, None) if vocab_file is None else _read_vocab(vocab_file)
        # Dictionary mode: character id -> vocabulary entry, to turn rows back into words.
        self._char_entries = {char_id: entry for entry, char_id in (self.char_vocab or {}).items()}
        self.split_punctuation = split_punctuation
        self.add_bos_eos = add_bos_eos
        self._pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_SEPARATORS), "removed"),
            pre_tokenizers.BertPreTokenizer() if split_punctuation else pre_tokenizers.WhitespaceSplit(),
        ])
        begin_sentence_id, end_sentence_id = BEGIN_SENTENCE_CHAR_ID, END_SENTENCE_CHAR_ID
        if self.char_vocab is not None:
            _check_dictionary(self.char_vocab, self.word_vocab, str(bos_token), str(eos_token), vocab_file)
            begin_sentence_id, end_sentence_id = self.char_vocab[str(bos_token)], self.char_vocab[str(eos_token)]
            # Dictionary mode: code point -> character id, to look up all characters of a batch at once.
            self._code_point_ids = _code_point_table(self.char_vocab)
        # Pin the special tokens to their character ids before the base class would append them after the vocabulary.
        self._added_tokens_decoder = {
            PADDING_CHAR_ID: _special_token(pad_token),
            begin_sentence_id: _special_token(bos_token),
            end_sentence_id: _special_token(eos_token),
        }
        super().__init__(
            bos_token=bos_token,
            eos_token=eos_token,
            pad_token=pad_token,
            max_characters_per_token=max_characters_per_token,
            split_punctuation=split_punctuation,
            add_bos_eos=add_bos_eos,
            **kwargs,
        )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args, **kwargs) -> "ElmoTokenizer":
        """Loads as usual; the name of a packaged model (`elmo_hf.packaged_models()`) loads its tokenizer offline."""
        return super().from_pretrained(resolve_model_name(pretrained_model_name_or_path), *args, **kwargs)

    @property
    def vocab_size(self) -> int:
        return CHAR_VOCAB_SIZE if self.char_vocab is None else max(self.char_vocab.values()) + 1

    @property
    def row_width(self) -> int:
        """Ids per word in `input_ids`: `max_characters_per_token`, plus the word id with a word vocabulary."""
        return self.max_characters_per_token + (0 if self.word_vocab is None else 1)

    @property
    def boundary_words(self) -> tuple[str, str]:
        """The words whose rows are the sentence boundaries (`<S>`/`</S>` for bytes, the special tokens otherwise)."""
        if self.char_vocab is None:
            return BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN
        return str(self.bos_token), str(self.eos_token)

    def get_vocab(self) -> dict[str, int]:
        if self.char_vocab is not None:
            return {**self.char_vocab, **self._added_tokens_encoder}
        vocab = {chr(byte): byte + 1 for byte in range(256)}
        vocab.update(_NAMED_CHARS)
        vocab.update(self._added_tokens_encoder)
        return vocab

    def word_to_ids(self, word: str) -> list[int]:
        """The `row_width` ids of one word, as they appear in `input_ids`: the reference mapping, which the batch
        encoding of `__call__` computes for all words of a batch at once."""
        if self.char_vocab is None:
            return word_to_char_ids(word, self.max_characters_per_token)
        # As ELMoForManyLangs: the word is cut to max_characters_per_token - 2 code points before any lookup.
        word = word[: self.max_characters_per_token - 2]
        chars = self.char_vocab
        if word in self.boundary_words:
            char_ids = [chars[word]]
        else:
            char_ids = [chars.get(char, chars[UNKNOWN_ENTRY]) for char in word]
        row = [chars["<bow>"], *char_ids, chars["<eow>"]]
        row += [chars["<char_pad>"]] * (self.max_characters_per_token - len(row))
        if self.word_vocab is not None:
            row.append(self.word_vocab.get(word, self.word_vocab[UNKNOWN_ENTRY]))
        return row

    def _convert_token_to_id(self, token: str) -> int:
        """Id of one entry of the character vocabulary (a byte as `chr(byte)`, or `<bow>`/`<eow>`/`<char_pad>`)."""
        if self.char_vocab is not None:
            if token in self.char_vocab:
                return self.char_vocab[token]
            raise ValueError(f"{token!r} is not in the character vocabulary; to encode words call the tokenizer.")
        if token in _NAMED_CHARS:
            return _NAMED_CHARS[token]
        if len(token) == 1 and ord(token) < 256:
            return ord(token) + 1
        raise ValueError(
            f"{token!r} is not in the ELMo character vocabulary (bytes as `chr(byte)`, <bow>, <eow>, <char_pad>); "
            "to encode words call the tokenizer or use `word_to_char_ids`."
        )

    def _convert_id_to_token(self, index: int) -> str:
        if self.char_vocab is not None:
            if index in self._char_entries:
                return self._char_entries[index]
            raise ValueError(f"Character id {index} is not in the character vocabulary [1, {self.vocab_size}).")
        if 1 <= index <= 256:
            return chr(index - 1)
        if index in _NAMED_CHAR_IDS:
            return _NAMED_CHAR_IDS[index]
        raise ValueError(f"Character id {index} is outside the ELMo character vocabulary [0, {CHAR_VOCAB_SIZE}).")

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> tuple[str, ...]:
        """As transformers', but a path that is a file raises (`check_save_directory`): transformers logged an error
        and saved nothing."""
        check_save_directory(save_directory)
        return super().save_pretrained(save_directory, *args, **kwargs)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        """Writes `vocab.json` in dictionary mode; the byte vocabulary is fixed, so there is no file to save."""
        if self.char_vocab is None:
            return ()
        path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "vocab.json")
        vocab = {"characters": self.char_vocab}
        if self.word_vocab is not None:
            vocab["words"] = self.word_vocab
        with open(path, "w", encoding="utf-8") as file:
            json.dump(vocab, file, ensure_ascii=False, indent=0)
        return (path,)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 2 if self.add_bos_eos else 0

    def get_special_tokens_mask(
        self, token_ids_0: Any, token_ids_1: Any = None, already_has_special_tokens: bool = False
    ) -> list[int]:
        """With `already_has_special_tokens`, 1 for each padding or `<S>`/`</S>` row of one sentence's rows (as data
        collators ask for it; the base class reads one integer id per token), else the base class's mask."""
        if not already_has_special_tokens:
            return super().get_special_tokens_mask(token_ids_0, token_ids_1)
        if token_ids_1 is not None:
            raise ValueError("ElmoTokenizer encodes single sentences, so there is no second sequence to mask.")
        boundary_rows = {tuple(self.word_to_ids(word)) for word in self.boundary_words}
        return [int(not any(row) or tuple(row) in boundary_rows) for row in to_py_obj(token_ids_0)]

    def add_special_tokens(
        self,
        special_tokens_dict: dict[str, str | AddedToken | Sequence[str | AddedToken]],
        replace_extra_special_tokens: bool = True,
    ) -> int:
        """As the base class, but tokens outside the character vocabulary are refused (`_refuse_new_tokens`) before
        the base class would set them as `pad_token` etc. and leave the tokenizer broken."""
        self._refuse_new_tokens(
            [
                token
                for value in (special_tokens_dict or {}).values()
                for token in (value if isinstance(value, (list, tuple)) else [value])
            ]
        )
        return super().add_special_tokens(special_tokens_dict, replace_extra_special_tokens)

    def _add_tokens(self, new_tokens: list[str] | list[AddedToken], special_tokens: bool = False) -> int:
        """As the base class (`add_tokens`, special tokens given to `__init__`), refusing new tokens."""
        self._refuse_new_tokens(new_tokens or [])
        return super()._add_tokens(new_tokens, special_tokens=special_tokens)

    def _refuse_new_tokens(self, tokens: Sequence[str | AddedToken]) -> None:
        """Raise for tokens outside the character vocabulary: a word is always encoded as its characters, so a new
        token would never be split off nor appear in `input_ids`, and its id would have no embedding in the model."""
        vocab = self.get_vocab()
        new = [str(token) for token in tokens if str(token) and str(token) not in vocab]
        if new:
            raise ValueError(
                f"ElmoTokenizer cannot add the tokens {new}: every word, {new[0]!r} included, is encoded as its "
                "characters already, and new ids would have no embedding in the model. To keep such a string one "
                "word, pass pre-split words (is_split_into_words=True) or use split_punctuation=False."
            )

    def _split_words(self, text: str) -> tuple[list[str], list[tuple[int, int]]]:
        """Split raw text into words, and their `(start, end)` character offsets in `text`.

        The splitter cannot read lone surrogates (from `errors="surrogateescape"` decoding or JSON `"\\ud800"`), so
        it sees U+FFFD in their place: one character as well, neither space nor punctuation, so the offsets hold for
        `text`, and each word is `text[start:end]` (its surrogates, like the original's, then give no bytes).
        """
        surrogates = _LONE_SURROGATE.search(text) is not None
        spans = self._pre_tokenizer.pre_tokenize_str(_LONE_SURROGATE.sub("\ufffd", text) if surrogates else text)
        if not spans:
            return [], []
        words, offsets = zip(*spans)
        if surrogates:
            words = [text[start:end] for start, end in offsets]
        return list(words), list(offsets)

    def tokenize(self, text: str, **kwargs) -> list[str]:
        """Split raw text into the words that become rows of `input_ids`."""
        if not isinstance(text, str):
            raise TypeError(f"tokenize expects a str, got {type(text).__name__}.")
        return self._split_words(text)[0]

    def _row_to_word(self, char_ids: Sequence[int]) -> str:
        """Recover the (cut) word of one row; bytes cut inside a character and unknown characters decode to U+FFFD."""
        _check_integer_ids(char_ids)
        char_ids = [int(char_id) for char_id in char_ids]
        if not any(char_ids):
            return str(self.pad_token)
        known = range(1, CHAR_VOCAB_SIZE) if self.char_vocab is None else self._char_entries
        unknown = [char_id for char_id in char_ids[: self.max_characters_per_token] if char_id not in known]
        if unknown:  # else they would be dropped or decoded as something they are not
            raise ValueError(
                f"The row {char_ids} holds {unknown[0]}, which is no character id of this tokenizer; decode rows of "
                "the `input_ids` it makes."
            )
        if self.char_vocab is not None:
            entries = self._char_entries
            chars = [entries.get(char_id) for char_id in char_ids[1 : self.max_characters_per_token]]
            if chars[0] in self.boundary_words:
                return chars[0]
            chars = chars[: chars.index("<eow>")] if "<eow>" in chars else chars
            return "".join("\ufffd" if char in (UNKNOWN_ENTRY, None) else char for char in chars)
        if BEGIN_SENTENCE_CHAR_ID in char_ids:
            return str(self.bos_token)
        if END_SENTENCE_CHAR_ID in char_ids:
            return str(self.eos_token)
        return bytes(char_id - 1 for char_id in char_ids if 1 <= char_id <= 256).decode("utf-8", errors="replace")

    def convert_ids_to_tokens(self, ids: Any, skip_special_tokens: bool = False) -> str | list:
        """
        Convert ids back to strings: a character id to its vocabulary entry, a row to its word, a
        `(sequence_length, max_characters_per_token)` matrix to its words (without padding and `<S>`/`</S>` if
        `skip_special_tokens`), and a batch of those to a list of word lists.
        """
        ids = to_py_obj(ids)
        depth = _scalar_depth(ids)
        if depth == 0:
            _check_integer_ids([ids])
            return super().convert_ids_to_tokens(int(ids), skip_special_tokens=skip_special_tokens)
        if depth is None:  # a sentence without words, or a batch of those
            return [[] for _ in ids]
        if depth == 1:
            return self._row_to_word(ids)
        if depth == 2:
            words = [self._row_to_word(row) for row in ids]
            if skip_special_tokens:  # by row, so that a word that spells a special token (e.g. "<pad>") stays
                special = self.get_special_tokens_mask(ids, already_has_special_tokens=True)
                words = [word for word, is_special in zip(words, special) if not is_special]
            return words
        return [self.convert_ids_to_tokens(sequence, skip_special_tokens=skip_special_tokens) for sequence in ids]

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs) -> str | list[str]:
        """Decode a row to its word, a sentence's rows to its space-joined words, and a batch to a list of those."""
        token_ids = to_py_obj(token_ids)
        depth = _scalar_depth(token_ids)
        if depth is not None and depth > 3:
            raise ValueError(
                f"decode takes a row of ids, a sentence's rows or a batch of those (at most 3 axes), got {depth} axes."
            )
        if depth == 3 or (depth is None and token_ids):  # rows are never empty: nested empty lists are a batch
            return [
                self._decode(sequence, skip_special_tokens=skip_special_tokens, **kwargs) for sequence in token_ids
            ]
        return self._decode(token_ids, skip_special_tokens=skip_special_tokens, **kwargs)

    def _split_example(
        self, example: Any, example_index: int, is_split_into_words: bool, with_offsets: bool
    ) -> tuple[list[str], list[tuple[int, int]]]:
        """Words of one example and, if `with_offsets`, their character offsets (in `" ".join(words)` for pre-split
        words; an empty list otherwise)."""
        if not is_split_into_words:
            words, offsets = self._split_words(example)
            return words, offsets if with_offsets else []
        if not isinstance(example, (list, tuple)):
            raise TypeError(
                f"With is_split_into_words=True, example {example_index} must be a list of words (str), got "
                f"{type(example).__name__}."
            )
        if not all(issubclass(word_type, str) for word_type in set(map(type, example))):
            word_index, word = next((index, word) for index, word in enumerate(example) if not isinstance(word, str))
            raise TypeError(
                f"Word {word_index} of example {example_index} is {type(word).__name__}, expected str; convert "
                "every word to a string before tokenizing."
            )
        offsets = []
        if with_offsets:
            start = 0
            for word in example:
                offsets.append((start, start + len(word)))
                start += len(word) + 1
        return list(example), offsets

    def _character_units(self, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The characters of all `words` concatenated, as UTF-8 bytes (lone surrogates give none, as in
        `word_to_char_ids`) or in dictionary mode as code points, and each word's number of them."""
        joined = "".join(words)
        if self.char_vocab is not None:
            code_points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), "<u4")
            return code_points, np.fromiter(map(len, words), np.int64, len(words))
        if joined.isascii():  # one byte per character: no encoding word by word
            return np.frombuffer(joined.encode("ascii"), np.uint8), np.fromiter(map(len, words), np.int64, len(words))
        encoded = [word.encode("utf-8", "ignore") for word in words]
        return np.frombuffer(b"".join(encoded), np.uint8), np.fromiter(map(len, encoded), np.int64, len(encoded))

    def _write_rows(self, words: list[str], out: np.ndarray, rows: np.ndarray) -> None:
        """
        Write the ids of `words[i]` into row `rows[i]` of `out` (`(num_rows, row_width)` int64, C-contiguous), the
        same ids as `word_to_ids(words[i])`, for all words at once: their characters are cut, looked up and scattered
        into place as whole arrays. Words that may be a sentence boundary (their first byte or code point is one of
        a boundary word's first character) are then rewritten with `word_to_ids` itself.
        """
        width = self.max_characters_per_token
        units, lengths = self._character_units(words)
        kept = np.minimum(lengths, width - 2)
        kept_starts = np.cumsum(kept) - kept
        positions = np.arange(int(kept.sum()))
        if (kept < lengths).any():  # long words keep their first width - 2 characters
            units = units[positions + np.repeat(np.cumsum(lengths) - lengths - kept_starts, kept)]
        if self.char_vocab is None:
            begin_word, end_word, char_pad = BEGIN_WORD_CHAR_ID, END_WORD_CHAR_ID, PADDING_WITHIN_WORD_CHAR_ID
            char_ids = units.astype(np.int64) + 1
        else:
            begin_word, end_word, char_pad = (self.char_vocab[name] for name in ("<bow>", "<eow>", "<char_pad>"))
            char_ids = self._code_point_ids[np.minimum(units, len(self._code_point_ids) - 1)]
        row_starts = rows * out.shape[1]
        out[rows, 0] = begin_word
        out[rows, 1:width] = char_pad
        flat = out.reshape(-1)
        flat[positions + np.repeat(row_starts + 1 - kept_starts, kept)] = char_ids
        flat[row_starts + kept + 1] = end_word
        if self.word_vocab is not None:
            word_id, unknown = self.word_vocab.get, self.word_vocab[UNKNOWN_ENTRY]
            flat[row_starts + width] = np.fromiter(
                (word_id(word[: width - 2], unknown) for word in words), np.int64, len(words)
            )
        boundary_words = self.boundary_words
        boundary_firsts = self._character_units([boundary[:1] for boundary in boundary_words])[0]
        non_empty = np.flatnonzero(kept)
        candidates = non_empty[np.equal.outer(units[kept_starts[non_empty]], boundary_firsts).any(1)].tolist()
        if "" in boundary_words:
            candidates += np.flatnonzero(kept == 0).tolist()
        for index in candidates:
            out[rows[index]] = self.word_to_ids(words[index])

    def _get_padding_truncation_strategies(
        self,
        padding: bool | str | PaddingStrategy = False,
        truncation: bool | str | TruncationStrategy | None = None,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        verbose: bool = True,
        **kwargs,
    ) -> tuple[PaddingStrategy, TruncationStrategy, int | None, dict[str, Any]]:
        """As the base class, after checking the word counts (`_check_word_counts`) and refusing
        `truncation="only_second"`, which would otherwise truncate the one sentence there is."""
        _check_word_counts(max_length, pad_to_multiple_of)
        if truncation == TruncationStrategy.ONLY_SECOND:
            raise ValueError(
                'truncation="only_second" truncates the second sentence of a pair, but ElmoTokenizer encodes single '
                "sentences; use truncation=True."
            )
        return super()._get_padding_truncation_strategies(
            padding=padding,
            truncation=truncation,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            verbose=verbose,
            **kwargs,
        )

    def _encode_plus(
        self,
        text: Any,
        text_pair: Any = None,
        add_special_tokens: bool = True,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | TensorType | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        **kwargs,
    ) -> ElmoBatchEncoding:
        """
        Encode one example or a batch into rows of character ids; called by `__call__` and `encode`.

        The words of the whole batch are written at once into one array of the examples' rows end to end, each
        example padded as asked (`_write_rows`); it becomes the `(batch_size, sequence_length, row_width)` tensors as
        it is, and lists are cut from it when no tensors are asked for, or when the examples keep different lengths
        (then no example is padded to the longest).
        """
        if text_pair is not None:
            raise ValueError(
                "ElmoTokenizer encodes single sentences, but text_pair was given; ELMo has no sentence-pair input, "
                "so encode each sentence separately."
            )
        if return_overflowing_tokens:
            raise ValueError("return_overflowing_tokens is not supported: ELMo reads sentences of any length.")
        if return_token_type_ids:
            raise ValueError("return_token_type_ids is not supported: ELMo has no token type ids.")
        is_batched = self._is_batched(text, is_split_into_words)
        add_boundaries = add_special_tokens and self.add_bos_eos
        sentences, offsets, first_words = self._split_batch(
            text if is_batched else [text],
            is_split_into_words,
            add_boundaries,
            truncation_strategy,
            max_length,
            return_offsets_mapping,
        )
        lengths = np.fromiter(map(len, sentences), np.int64, len(sentences))
        padded_lengths = _padded_lengths(lengths, padding_strategy, max_length, pad_to_multiple_of)
        side = padding_side or self.padding_side
        if side not in ("left", "right") and (padded_lengths > lengths).any():
            raise ValueError(f"padding_side must be 'left' or 'right', got {side!r}.")
        starts = padded_lengths - lengths if side == "left" else np.zeros_like(lengths)
        batch_size, sequence_length = len(sentences), int(padded_lengths.max(initial=0))
        # The examples' rows laid end to end, each example's padded_length of them: unpadded examples take only their
        # own rows, however long the longest one is. Row of each example's first word, and of every word:
        first_rows = np.cumsum(padded_lengths) - padded_lengths + starts
        word_rows = np.arange(int(lengths.sum())) + np.repeat(first_rows - (np.cumsum(lengths) - lengths), lengths)
        num_rows = int(padded_lengths.sum())
        input_ids = np.zeros((num_rows, self.row_width), np.int64)
        self._write_rows(list(chain.from_iterable(sentences)), input_ids, word_rows)
        data = {"input_ids": input_ids}
        attention_mask = np.zeros(num_rows, np.int64)
        attention_mask[word_rows] = 1
        if return_special_tokens_mask:
            special_tokens_mask = 1 - attention_mask
            if add_boundaries:
                special_tokens_mask[first_rows] = 1
                special_tokens_mask[first_rows + lengths - 1] = 1
            data["special_tokens_mask"] = special_tokens_mask
        if return_offsets_mapping:
            offset_mapping = np.zeros((num_rows, 2), np.int64)
            offset_mapping[word_rows] = np.fromiter(
                chain.from_iterable(chain.from_iterable(offsets)), np.int64
            ).reshape(-1, 2)
            data["offset_mapping"] = offset_mapping
        if return_length:
            data["length"] = lengths
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        if return_attention_mask:
            data["attention_mask"] = attention_mask

        word_ids = []
        for start, length, padded_length, first in zip(
            starts.tolist(), lengths.tolist(), padded_lengths.tolist(), first_words
        ):
            ids = list(range(first, first + length - 2 * add_boundaries))
            ids = [None, *ids, None] if add_boundaries else ids
            word_ids.append([None] * start + ids + [None] * (padded_length - start - length))

        tensor_type = None if return_tensors is None else TensorType(return_tensors)
        if tensor_type in (TensorType.PYTORCH, TensorType.NUMPY) and (padded_lengths == sequence_length).all():
            data = {
                key: value if key == "length" else value.reshape(batch_size, sequence_length, *value.shape[1:])
                for key, value in data.items()
            }
            if tensor_type == TensorType.PYTORCH:
                data = {key: torch.from_numpy(value) for key, value in data.items()}
            return ElmoBatchEncoding(data, word_ids=word_ids, tensor_type=tensor_type)
        data = {key: _example_lists(key, value, padded_lengths) for key, value in data.items()}
        if not is_batched:
            data = {key: value[0] for key, value in data.items()}
        encoding = ElmoBatchEncoding(
            data, word_ids=word_ids, tensor_type=return_tensors, prepend_batch_axis=not is_batched
        )
        if return_tensors is not None:
            _restore_empty_axes(encoding, self.row_width)
        return encoding

    def _split_batch(
        self,
        examples: Sequence[Any],
        is_split_into_words: bool,
        add_boundaries: bool,
        truncation_strategy: TruncationStrategy,
        max_length: int | None,
        with_offsets: bool,
    ) -> tuple[list[list[str]], list[list[tuple[int, int]]], list[int]]:
        """The words of each example as they become rows (truncated, with the boundary words if `add_boundaries`),
        their offsets (if `with_offsets`), and the index of each example's first kept word."""
        keep = None
        if truncation_strategy != TruncationStrategy.DO_NOT_TRUNCATE and max_length is not None:
            if add_boundaries and max_length < 2:
                raise ValueError(
                    f"max_length={max_length} cannot hold the <S> and </S> rows that add_bos_eos=True adds; use "
                    "max_length >= 2 (it counts them) or add_special_tokens=False."
                )
            keep = max(max_length - (2 if add_boundaries else 0), 0)
        begin, end = self.boundary_words if add_boundaries else (None, None)
        sentences, offsets, first_words = [], [], []
        for example_index, example in enumerate(examples):
            words, spans = self._split_example(example, example_index, is_split_into_words, with_offsets)
            first = 0
            if keep is not None and len(words) > keep:
                first = len(words) - keep if self.truncation_side == "left" else 0
                words, spans = words[first : first + keep], spans[first : first + keep]
            if add_boundaries:
                words, spans = [begin, *words, end], [(0, 0), *spans, (0, 0)] if with_offsets else []
            sentences.append(words)
            offsets.append(spans)
            first_words.append(first)
        return sentences, offsets, first_words

    @staticmethod
    def _is_batched(text: Any, is_split_into_words: bool) -> bool:
        """Whether `text` is a batch of examples, raising `TypeError` for inputs that are neither form."""
        if isinstance(text, str):
            if is_split_into_words:
                raise TypeError(
                    "With is_split_into_words=True, pass a list of words (or a batch of word lists), got a str; "
                    "drop is_split_into_words to split raw text."
                )
            return False
        if not isinstance(text, (list, tuple)):
            raise TypeError(
                "ElmoTokenizer expects a str, a list of str, or with is_split_into_words=True a list of words or a "
                f"list of word lists; got {type(text).__name__}. Convert arrays and other sequences with `.tolist()` "
                "or `list()`, and bytes to str with `.decode()`."
            )
        if is_split_into_words:
            return len(text) > 0 and isinstance(text[0], (list, tuple))
        for example_index, example in enumerate(text):
            if not isinstance(example, str):
                hint = (
                    "to pass words that are already split, use is_split_into_words=True"
                    if isinstance(example, (list, tuple))
                    else "convert every example to a str (bytes with `.decode()`) before tokenizing"
                )
                raise TypeError(f"Example {example_index} is {type(example).__name__}, expected str; {hint}.")
        return True

    def pad(
        self,
        encoded_inputs: BatchEncoding | Mapping | Sequence[Mapping],
        padding: bool | str | PaddingStrategy = True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | TensorType | None = None,
        verbose: bool = True,
    ) -> BatchEncoding:
        """
        Pad one example or a batch (dicts, a list of dicts, lists or tensors) with padding words; see
        [`~PreTrainedTokenizerBase.pad`]. `max_length` counts words. An empty list, like `input_ids` without rows,
        is an empty batch and stays one.
        """
        _check_word_counts(max_length, pad_to_multiple_of)
        if isinstance(encoded_inputs, (list, tuple)) and not encoded_inputs:
            encoded_inputs = {"input_ids": []}
        pad_kwargs = {
            "padding": padding,
            "max_length": max_length,
            "pad_to_multiple_of": pad_to_multiple_of,
            "padding_side": padding_side,
            "return_attention_mask": return_attention_mask,
            "return_tensors": return_tensors,
            "verbose": verbose,
        }
        # One example has 2-D `input_ids`, which the base class would take for a batch of 1-D sequences.
        if isinstance(encoded_inputs, Mapping) and _scalar_depth(encoded_inputs.get("input_ids")) == 2:
            padded = super().pad({key: [value] for key, value in encoded_inputs.items()}, **pad_kwargs)
            return BatchEncoding({key: value[0] for key, value in padded.items()})
        padded = super().pad(encoded_inputs, **pad_kwargs)
        if return_tensors is not None:  # a batch of examples without words (data collators) keeps its word axes
            padded = BatchEncoding(padded, tensor_type=return_tensors)  # the base class returns an empty one as given
            _restore_empty_axes(padded, self.row_width)
        return padded

    def _pad(
        self,
        encoded_inputs: dict[str, Any] | BatchEncoding,
        max_length: int | None = None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict:
        """Pad one example with whole padding words: a row of zeros in `input_ids`, 0 in `attention_mask`."""
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        rows = encoded_inputs["input_ids"]
        if return_attention_mask and "attention_mask" not in encoded_inputs:
            encoded_inputs["attention_mask"] = [1] * len(rows)
        if padding_strategy == PaddingStrategy.LONGEST:
            max_length = len(rows)
        if max_length is not None and pad_to_multiple_of is not None and max_length % pad_to_multiple_of:
            max_length = (max_length // pad_to_multiple_of + 1) * pad_to_multiple_of
        if padding_strategy == PaddingStrategy.DO_NOT_PAD or len(rows) >= max_length:
            return encoded_inputs

        padding_side = padding_side or self.padding_side
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}.")
        num_padding = max_length - len(rows)
        width = len(rows[0]) if rows else self.row_width
        fills = {
            "input_ids": [[PADDING_CHAR_ID] * width for _ in range(num_padding)],
            "attention_mask": [0] * num_padding,
            "special_tokens_mask": [1] * num_padding,
            "offset_mapping": [(0, 0)] * num_padding,
        }
        for key, fill in fills.items():
            if key in encoded_inputs:
                value = list(encoded_inputs[key])
                encoded_inputs[key] = value + fill if padding_side == "right" else fill + value
        return encoded_inputs


def _special_token(token: str | AddedToken) -> AddedToken:
    """A special token matched verbatim (no stripping or normalisation)."""
    if isinstance(token, AddedToken):
        return token
    return AddedToken(token, lstrip=False, rstrip=False, normalized=False, special=True)


def _read_vocab(path: str | os.PathLike) -> tuple[dict[str, int], dict[str, int] | None]:
    """The character and (optional) word vocabularies of a dictionary-mode `vocab.json`."""
    with open(path, encoding="utf-8") as file:
        vocab = json.load(file)
    if not isinstance(vocab, dict) or not isinstance(vocab.get("characters"), dict):
        raise ValueError(f"{path} has no \"characters\" vocabulary; an ELMo dictionary vocab.json has one.")
    return vocab["characters"], vocab.get("words")


def _check_dictionary(
    chars: dict[str, int], words: dict[str, int] | None, bos: str, eos: str, path: str | os.PathLike
) -> None:
    """Raise unless the vocabularies hold the entries rows are built from, with ids from 1 (0 is padding)."""
    for name, vocab, needed in (
        ("characters", chars, ("<bow>", "<eow>", "<char_pad>", UNKNOWN_ENTRY, bos, eos)),
        ("words", words or {}, (UNKNOWN_ENTRY, bos, eos) if words is not None else ()),
    ):
        missing = [entry for entry in needed if entry not in vocab]
        if missing:
            raise ValueError(
                f"The {name} of {path} lack the entries {missing}; convert ELMoForManyLangs folders with "
                "`elmo-hf convert-manylangs`, or pass the bos_token / eos_token the vocabulary names."
            )
        if any(not isinstance(index, int) or index < 1 for index in vocab.values()):
            raise ValueError(f"The {name} of {path} must map entries to ids >= 1 (0 pads whole words).")


def _padded_lengths(
    lengths: np.ndarray, padding_strategy: PaddingStrategy, max_length: int | None, pad_to_multiple_of: int | None
) -> np.ndarray:
    """Rows of each example after padding: the longest example's or `max_length`, rounded up to a multiple of
    `pad_to_multiple_of`; an example longer than that keeps its own length."""
    if padding_strategy == PaddingStrategy.LONGEST:
        target = int(lengths.max(initial=0))
    elif padding_strategy == PaddingStrategy.MAX_LENGTH:
        target = max_length
    else:
        return lengths
    if pad_to_multiple_of is not None and target % pad_to_multiple_of:
        target = (target // pad_to_multiple_of + 1) * pad_to_multiple_of
    return np.maximum(lengths, target)


def _example_lists(key: str, value: np.ndarray, lengths: np.ndarray) -> list:
    """The batch's rows laid end to end (`lengths[i]` rows for example i) as one nested list per example (offsets as
    tuples)."""
    if key == "length":
        return value.tolist()
    ends = np.cumsum(lengths).tolist()
    examples = [value[end - length : end].tolist() for end, length in zip(ends, lengths.tolist())]
    if key == "offset_mapping":
        return [list(map(tuple, example)) for example in examples]
    return examples


def _code_point_table(chars: dict[str, int]) -> np.ndarray:
    """The character id of each code point up to the largest in `chars`, then one entry more: the `<oov>` id, which
    every other code point gets (larger ones are clipped to that entry)."""
    singles = {ord(entry): char_id for entry, char_id in chars.items() if len(entry) == 1}
    table = np.full(max(singles, default=0) + 2, chars[UNKNOWN_ENTRY], np.int64)
    table[list(singles)] = list(singles.values())
    return table


def _restore_empty_axes(encoding: BatchEncoding, row_width: int) -> None:
    """Give tensors of examples without words (or of an empty batch) their full shape, e.g. `input_ids` `(1, 0)` ->
    `(1, 0, 50)` and `attention_mask` `(0,)` -> `(0, 0)`."""
    trailing_axes = {
        "input_ids": (row_width,),
        "offset_mapping": (2,),
        "attention_mask": (),
        "special_tokens_mask": (),
    }
    for key, axes in trailing_axes.items():
        value = encoding.get(key)
        if value is not None and value.ndim < 2 + len(axes) and 0 in value.shape:
            encoding[key] = value.reshape(value.shape[0], 0, *axes)


__all__ = ["ElmoTokenizer"]
