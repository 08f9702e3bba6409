"""The default model's pretraining corpus: State of the Union addresses, Moby-Dick and Brown's train split as text.

Raw text (SOTU, Moby-Dick) is cut into sentences and tokenised the way the Brown corpus is (punctuation apart, words
with inner apostrophes, hyphens and periods kept whole, double quotes as `` and ''), so the biLM reads the same
tokens the Brown and WNUT-16 taggers give it. Brown contributes the words of its train files only (tags stripped;
files ending in 9 are dev, in 0 test, both kept out). A fixed, deterministic share of the addresses and chapters is
held out as validation (perplexity during training) and test (the perplexity in the model card).
"""

from __future__ import annotations

import re
from pathlib import Path

_REPLACEMENTS = {"\u201c": " `` ", "\u201d": " '' ", '"': " '' ", "\u2018": "'", "\u2019": "'", "\u2014": " -- "}
_TOKEN = re.compile(r"``|''|--|[^\W_]+(?:['\-.][^\W_]+)*'?|\S")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[`'(\[\w])")


def tokenize(text: str) -> list[list[str]]:
    """Sentences of tokens from raw running text (paragraphs separated by line breaks)."""
    for old, new in _REPLACEMENTS.items():
        text = text.replace(old, new)
    sentences = []
    for paragraph in text.splitlines():
        for sentence in _SENTENCE_END.split(paragraph.strip()):
            tokens = _TOKEN.findall(sentence)
            if tokens:
                sentences.append(tokens)
    return sentences


def brown_sentences(path: Path) -> list[list[str]]:
    """The words of one Brown file (`word/tag` tokens), tags stripped."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [[token.rsplit("/", 1)[0] for token in line.split()] for line in lines if line.strip()]


def brown_split(name: str) -> str:
    """The data README's split of a Brown file name: test (ends in 0), dev (ends in 9) or train."""
    return {"0": "test", "9": "dev"}.get(name[-1], "train")


def _held_out_part(index: int, period: int) -> str:
    """train, validation or test for the index-th raw document: one in `period` each is validation and test."""
    return {0: "validation", period // 2: "test"}.get(index % period, "train")


def build_corpus(data_dir: Path, output_dir: Path) -> dict[str, int]:
    """Write train.txt, validation.txt and test.txt (one tokenised sentence a line) and return their word counts."""
    parts: dict[str, list[list[str]]] = {"train": [], "validation": [], "test": []}
    sotu = sorted((data_dir / "sotu").glob("*.txt"))
    chapters = sorted((data_dir / "mobydick").glob("chapter_*.txt"), key=lambda p: int(p.stem.split("_")[1]))
    for period, documents in ((20, sotu), (14, chapters)):
        for index, path in enumerate(documents):
            parts[_held_out_part(index, period)].extend(tokenize(path.read_text(encoding="utf-8")))
    for path in sorted((data_dir / "brown").glob("c[a-r][0-9][0-9]")):
        if brown_split(path.name) == "train":
            parts["train"].extend(brown_sentences(path))
    output_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, sentences in parts.items():
        target = output_dir / f"{name}.txt"
        partial = target.with_suffix(".txt.partial")
        partial.write_text("".join(" ".join(tokens) + "\n" for tokens in sentences), encoding="utf-8")
        partial.replace(target)
        counts[name] = sum(len(tokens) for tokens in sentences)
    return counts
