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
"""Pretraining data for [`ElmoForPreTraining`]: the softmax's word vocabulary, text corpora, and the collator.

Text is one sentence per line, words separated by whitespace (as the original's training data). Inputs stay
characters; only the softmax targets need the word vocabulary.
"""

import codecs
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from torch.utils.data import IterableDataset

from ..errors import ElmoInputError, is_whole
from ..tokenization_elmo import BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN, ElmoTokenizer

UNKNOWN_WORD = "<UNK>"
# The first lines of every vocabulary file, in the original's order: ids 0, 1, 2.
SPECIAL_WORDS = (END_SENTENCE_TOKEN, BEGIN_SENTENCE_TOKEN, UNKNOWN_WORD)
VOCABULARY_FILE = "vocab.txt"
DECODING_ERRORS = ("strict", "replace")


class CorpusError(ElmoInputError):
    """A corpus or vocabulary cannot be used; the message names the file (and line) and what to do."""


def decode_line(raw: bytes, number: int, name: str, errors: str, error: type[ElmoInputError]) -> str:
    """Line `number` (from 1) of file `name` as text: UTF-8, without the byte-order mark some editors write at the
    start of a file (it would stick to the first word). A byte that is not UTF-8 raises `error` naming the file, the
    line and the byte, unless `errors="replace"` reads it as U+FFFD."""
    if number == 1:
        raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        return raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as failure:
        raise error(
            f"{name}, line {number}: byte {raw[failure.start]:#04x} at byte {failure.start} of the line is not UTF-8; "
            "convert the file to UTF-8 or pass --errors replace to read it as U+FFFD."
        ) from None


def through_link(path: Path) -> Path:
    """The file that writing output `path` replaces: `path`, or the file it leads to where it is a symbolic link
    (dangling or not). The commands write a temporary file and rename it over this one, so the result goes where the
    user's link points, as a shell redirection writes it, and the link stays a link instead of becoming a file."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def read_sentences(path: str | os.PathLike, errors: str = "strict") -> Iterator[list[str]]:
    """Streams the non-empty lines of a UTF-8 text file as lists of words (whitespace-split), one line in memory.

    `errors="strict"` raises a `CorpusError` naming the file and line of the first byte sequence that is not UTF-8;
    `"replace"` decodes it as U+FFFD instead.
    """
    if errors not in DECODING_ERRORS:
        raise ValueError(f"errors must be one of {DECODING_ERRORS}, got {errors!r}.")
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            words = decode_line(raw, number, str(path), errors, CorpusError).split()
            if words:
                yield words


def check_corpus(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> list[Path]:
    """The corpus files as paths (one path alone is one file, not a sequence of one-letter names); raises a
    `CorpusError` for none given, a missing file or an empty one."""
    paths = [Path(paths)] if isinstance(paths, (str, os.PathLike)) else [Path(path) for path in paths]
    if not paths:
        raise CorpusError("no corpus files given.")
    for path in paths:
        if not path.exists():
            raise CorpusError(f"corpus file not found: {path}")
        if not path.is_file():  # read more than once (the vocabulary, then every epoch), which a pipe cannot be
            kind = "a folder" if path.is_dir() else "not a regular file (a pipe or a device)"
            raise CorpusError(f"corpus file {path} is {kind}; give a text file, one sentence per line.")
        if path.stat().st_size == 0:
            raise CorpusError(f"corpus file {path} is empty; give text files with one sentence per line.")
    return paths


def split_long(words: list[str], max_words: int) -> Iterator[list[str]]:
    """A sentence longer than `max_words` as consecutive pieces of at most `max_words` words (nothing is dropped)."""
    for start in range(0, len(words), max_words):
        yield words[start : start + max_words]


class ElmoWordVocabulary:
    """The pretraining softmax's words: `</S>`, `<S>`, `<UNK>` (ids 0, 1, 2), then corpus words by falling count.

    The order by frequency is what the sampled softmax's log-uniform sampler assumes. Saved as `vocab.txt`, one word
    per line, the original's vocabulary file format.
    """

    def __init__(self, words: list[str]):
        if tuple(words[: len(SPECIAL_WORDS)]) != SPECIAL_WORDS:
            raise CorpusError(
                f"a vocabulary must start with {', '.join(SPECIAL_WORDS)}; got {words[:3]}: put them first, in this "
                "order."
            )
        if len(set(words)) != len(words):
            duplicate = next(word for word, count in Counter(words).items() if count > 1)
            raise CorpusError(f"the vocabulary lists {duplicate!r} twice; keep one line per word.")
        self.words = list(words)
        self.ids = {word: index for index, word in enumerate(self.words)}
        self.eos_id, self.bos_id, self.unk_id = range(len(SPECIAL_WORDS))

    def __len__(self) -> int:
        return len(self.words)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ElmoWordVocabulary) and self.words == other.words

    def word_id(self, word: str) -> int:
        return self.ids.get(word, self.unk_id)

    @classmethod
    def build(
        cls,
        paths: Iterable[str | os.PathLike] | str | os.PathLike,
        max_size: int | None = None,
        min_count: int = 1,
        errors: str = "strict",
    ) -> "ElmoWordVocabulary":
        """Counts the words of the corpus files (streamed) and keeps those seen `min_count` times or more, at most
        `max_size` words in all (special words included); ties in count are broken alphabetically."""
        counts = Counter()
        for path in check_corpus(paths):
            for words in read_sentences(path, errors):
                counts.update(words)
        if not counts:
            raise CorpusError("the corpus files hold no words (only empty lines).")
        kept = sorted((word for word, count in counts.items() if count >= min_count and word not in SPECIAL_WORDS),
                      key=lambda word: (-counts[word], word))
        if not kept and min_count > 1:
            most = max((count for word, count in counts.items() if word not in SPECIAL_WORDS), default=0)
            raise CorpusError(
                f"minimum count {min_count} keeps no word of the corpus (the most frequent is seen {most} times); "
                "give a smaller --min-count."
            )
        if max_size is not None:
            if max_size <= len(SPECIAL_WORDS):
                raise CorpusError(f"vocabulary size {max_size} leaves no room for words beside {SPECIAL_WORDS}.")
            kept = kept[: max_size - len(SPECIAL_WORDS)]
        return cls([*SPECIAL_WORDS, *kept])

    def save(self, folder: str | os.PathLike) -> Path:
        path = Path(folder) / VOCABULARY_FILE
        path.write_text("".join(f"{word}\n" for word in self.words), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ElmoWordVocabulary":
        """Reads `vocab.txt` (or the one inside a folder); a `CorpusError` for a file that cannot be used names it."""
        path = Path(path)
        if path.is_dir():
            path = path / VOCABULARY_FILE
        if not path.is_file():
            raise CorpusError(f"vocabulary file not found: {path}; give a vocab.txt or the folder that holds one.")
        form = f"a vocab.txt is UTF-8, one word a line, {', '.join(SPECIAL_WORDS)} first"
        try:
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as error:
            raise CorpusError(f"vocabulary file {path}: bytes at {error.start} are not UTF-8; {form}.") from None
        except OSError as error:
            reason = error.strerror or error
            raise CorpusError(f"vocabulary file {path} cannot be read ({reason}); make it readable.") from None
        if not text:
            raise CorpusError(f"vocabulary file {path} is empty; {form}.")
        try:
            # One word a line (the last one with or without its newline), after any byte-order mark an editor wrote.
            return cls(text.removesuffix("\n").split("\n"))
        except CorpusError as error:
            raise CorpusError(f"vocabulary file {path}: {error}") from None


class ElmoTextDataset(IterableDataset):
    """Sentences streamed from text files, never all in memory, as `{"words": [...]}`; for corpora larger than
    memory. Iterates the files in order; each pass reads them again."""

    def __init__(self, paths: Iterable[str | os.PathLike] | str | os.PathLike, errors: str = "strict"):
        self.paths = check_corpus(paths)
        self.errors = errors

    def __iter__(self) -> Iterator[dict[str, list[str]]]:
        for path in self.paths:
            for words in read_sentences(path, self.errors):
                yield {"words": words}


def load_sentences(
    paths: Iterable[str | os.PathLike] | str | os.PathLike, errors: str = "strict"
) -> list[dict[str, list[str]]]:
    """All sentences of the text files in memory as `{"words": [...]}` (a map-style dataset Trainer shuffles)."""
    sentences = [{"words": words} for path in check_corpus(paths) for words in read_sentences(path, errors)]
    if not sentences:
        raise CorpusError("the corpus files hold no sentences (only empty lines).")
    return sentences


class DataCollatorForElmoPreTraining:
    """Sentences -> the inputs of [`ElmoForPreTraining`]: character ids and both directions' targets.

    A feature is `{"words": [...]}` or `{"text": "..."}` (whitespace-split; the column of a `datasets` text
    dataset). Sentences longer than `max_words` become several rows; empty ones are skipped. For a sentence of `n`
    words the forward targets are words `1..n` then `</S>`, the backward targets `<S>` then words `1..n`, both -100
    beyond.

    The words become `input_ids` through `tokenizer`, the model's own [`ElmoTokenizer`] (default: the byte tokenizer
    of the released models), so dictionary models get their dictionary ids.

    Returns `input_ids` `(batch_size, sequence_length, tokenizer.row_width)`, `attention_mask` `(batch_size,
    sequence_length)`, `labels` and `backward_labels` `(batch_size, sequence_length + 1)`.
    """

    def __init__(self, vocabulary: ElmoWordVocabulary, tokenizer: ElmoTokenizer | None = None, max_words: int = 100):
        if not isinstance(vocabulary, ElmoWordVocabulary):
            raise TypeError(
                "vocabulary must be an ElmoWordVocabulary (ElmoWordVocabulary(words), ElmoWordVocabulary.build(paths) "
                f"or ElmoWordVocabulary.load(folder)), got {type(vocabulary).__name__}."
            )
        if not is_whole(max_words) or max_words < 1:
            raise ValueError(f"max_words must be a positive integer, got {max_words!r}.")
        if tokenizer is not None and not isinstance(tokenizer, ElmoTokenizer):
            raise TypeError(
                f"tokenizer must be the model's ElmoTokenizer (ElmoTokenizer.from_pretrained(folder)), got "
                f"{type(tokenizer).__name__}."
            )
        self.vocabulary = vocabulary
        self.tokenizer = ElmoTokenizer() if tokenizer is None else tokenizer
        self.max_words = max_words

    @staticmethod
    def words_of(feature: dict, index: int) -> list[str]:
        """The words of example `index` of a batch: its `"words"`, or its `"text"` split at whitespace. Anything else
        is refused, a string as `"words"` above all: it would be read as one-letter words."""
        try:
            has_words = "words" in feature
            words = feature["words"] if has_words else feature["text"]
        except (KeyError, TypeError):
            found = f"keys {list(feature)}" if isinstance(feature, dict) else f"a {type(feature).__name__}"
            raise ValueError(
                f"pretraining example {index} has neither 'words' (a list of words) nor 'text' (a str), got {found}; "
                "with Trainer and a datasets.Dataset, pass TrainingArguments(remove_unused_columns=False), since "
                "Trainer drops the columns that the model's forward does not name."
            ) from None
        if not has_words:
            if not isinstance(words, str):
                raise TypeError(
                    f"'text' of pretraining example {index} must be a str, got {type(words).__name__}; give a list "
                    "of words as 'words'."
                )
            return words.split()
        if isinstance(words, (str, bytes)) or not isinstance(words, Iterable):
            raise TypeError(
                f"'words' of pretraining example {index} must be a list of words, got {type(words).__name__}; give "
                "a sentence as one string as 'text', which is split at whitespace."
            )
        return list(words)

    def sentences(self, features: list[dict]) -> list[list[str]]:
        """The batch's rows: every feature's words, split into pieces of at most `max_words`."""
        rows = []
        for index, feature in enumerate(features):
            rows.extend(split_long(self.words_of(feature, index), self.max_words))
        return rows

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        rows = self.sentences(features)
        if not rows:
            raise CorpusError("a batch holds only empty sentences; drop empty lines from the dataset.")
        inputs = self.tokenizer(
            rows, is_split_into_words=True, add_special_tokens=False, padding=True, padding_side="right",
            return_tensors="pt",
        )
        length = inputs["input_ids"].shape[1]
        labels = torch.full((len(rows), length + 1), -100, dtype=torch.long)
        backward_labels = torch.full((len(rows), length + 1), -100, dtype=torch.long)
        vocabulary = self.vocabulary
        for row, words in enumerate(rows):
            ids = [vocabulary.word_id(word) for word in words]
            labels[row, : len(words) + 1] = torch.tensor([*ids, vocabulary.eos_id])
            backward_labels[row, : len(words) + 1] = torch.tensor([vocabulary.bos_id, *ids])
        return {
            "input_ids": inputs["input_ids"],
            "attention_mask": inputs["attention_mask"],
            "labels": labels,
            "backward_labels": backward_labels,
        }


# Where the kernel shows this process's control groups (`PROC_CGROUP`) and their limits (`CGROUP_ROOT`).
PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_memory_limit() -> int | None:
    """The smallest memory limit set on this process's control groups or their parents, cgroup v2 (`memory.max`) or
    v1 (`memory.limit_in_bytes`); None where none is set or readable. A container's limit is what its processes
    get, whatever the machine has."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        controllers, _, path = line.partition(":")[2].partition(":")
        if controllers == "":
            folder, name = CGROUP_ROOT, "memory.max"
        elif "memory" in controllers.split(","):
            folder, name = CGROUP_ROOT / "memory", "memory.limit_in_bytes"
        else:
            continue
        parts = [part for part in path.strip().split("/") if part not in ("", ".", "..")]
        for depth in range(len(parts) + 1):
            try:
                text = (folder.joinpath(*parts[:depth]) / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit():
                limits.append(int(text))
    return min(limits, default=None)


def physical_memory() -> int | None:
    """Bytes of memory this process can have: the machine's, or its control group's limit where that is smaller
    (None where the system says neither)."""
    try:
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        machine = None
    limits = [limit for limit in (machine, cgroup_memory_limit()) if limit is not None]
    return min(limits, default=None)


def device_memory(device: torch.device) -> int | None:
    """Bytes of memory a device has: the GPU's own for CUDA, else what this process can have (`physical_memory`)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return physical_memory()


__all__ = [
    "CorpusError",
    "DataCollatorForElmoPreTraining",
    "ElmoTextDataset",
    "ElmoWordVocabulary",
    "load_sentences",
    "read_sentences",
]
