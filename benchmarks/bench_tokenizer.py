"""Tokenizer speed: words/s from pre-split words or raw text to padded `input_ids` tensors, on one thread.

    python benchmarks/bench_tokenizer.py                          # batch 1, 64, 256 on the synthetic corpus
    python benchmarks/bench_tokenizer.py --before 11ca3fb         # adds that commit's tokenizer, measured alongside
    python benchmarks/bench_tokenizer.py --text ../shared/data/mobydick/*.txt --batch-sizes 1 256
    python benchmarks/bench_tokenizer.py --tokenizer /path/to/converted-manylangs-model   # a dictionary tokenizer

The corpus is `bench_inference.py`'s (gamma sentence lengths, mean 25 words, Zipf word frequencies) or text files.
Inputs (the "input" column):
- `words`: pre-split words, `tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")`.
- `text+offsets`: raw text (each sentence's words joined by spaces), split by the tokenizer, with
  `return_offsets_mapping=True`, `padding=True`, `return_tensors="pt"`.
Paths (the "path" column):
- `tokenizer`: `ElmoTokenizer.__call__` of this checkout: the byte tokenizer of the released models, or the one saved
  in the folder given with `--tokenizer` (for example a converted ELMoForManyLangs model's dictionary tokenizer).
- `per-word`: the per-word reference mapping (`ElmoTokenizer.word_to_ids` for every word, rows stacked into the
  padded tensor); pre-split words only. The speed of mapping words one at a time in Python.
- `before`: `ElmoTokenizer.__call__` of the commit given with `--before` (its `tokenization_elmo.py`, read with
  `git show` and loaded beside this checkout's package; that commit must have `packaged_elmo.py`).

Every path runs over the same batches in corpus order, interleaved in `--rounds` rounds (so a drift of the shared
machine's speed weighs on all alike); the table gives the median words/s (words: rows of real words, no padding)
and its ratio to `tokenizer`. "same ids" says whether the path's `input_ids` equal the tokenizer's on every batch.
One thread (`torch.set_num_threads(1)`); the script prints the CPU and the load average.
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_inference import cpu_description, synthetic_corpus, text_corpus

from elmo_hf import ElmoTokenizer

INPUTS = ("words", "text+offsets")


def per_word_input_ids(tokenizer: ElmoTokenizer, sentences: list[list[str]]) -> torch.Tensor:
    """`(batch_size, longest, row_width)` ids from `word_to_ids` word by word (the reference), zero rows as padding."""
    input_ids = torch.zeros(len(sentences), max(map(len, sentences)), tokenizer.row_width, dtype=torch.long)
    for index, words in enumerate(sentences):
        if words:
            input_ids[index, : len(words)] = torch.tensor([tokenizer.word_to_ids(word) for word in words])
    return input_ids


def encoder(tokenizer: Callable, kind: str) -> Callable[[list], torch.Tensor]:
    """The call that one path makes for one batch of `kind` input, returning `input_ids`."""
    if kind == "words":
        return lambda batch: tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"]
    return lambda batch: tokenizer(batch, padding=True, return_tensors="pt", return_offsets_mapping=True)["input_ids"]


def tokenizer_at(commit: str, folder: str | None) -> ElmoTokenizer:
    """`commit`'s `ElmoTokenizer` (its `tokenization_elmo.py` loaded as a module of this `elmo_hf`): the byte
    tokenizer, or the one saved in `folder`."""
    source = subprocess.run(
        ["git", "show", f"{commit}:elmo_hf/tokenization_elmo.py"], capture_output=True, text=True, cwd=ROOT
    )
    if source.returncode:
        raise SystemExit(f"error: cannot read elmo_hf/tokenization_elmo.py at {commit!r}: {source.stderr.strip()}")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(source.stdout)
    try:
        spec = importlib.util.spec_from_file_location("elmo_hf._tokenization_before", file.name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        os.unlink(file.name)
    return module.ElmoTokenizer() if folder is None else module.ElmoTokenizer.from_pretrained(folder)


def words_per_second(encode: Callable[[list], torch.Tensor], batches: list, words: int) -> float:
    start = time.perf_counter()
    for batch in batches:
        encode(batch)
    return words / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 64, 256])
    parser.add_argument("--sentences", type=int, default=1024, help="sentences of the corpus (each batch size)")
    parser.add_argument("--rounds", type=int, default=5, help="timed passes of every path over the corpus")
    parser.add_argument("--text", nargs="+", help="text files instead of the synthetic corpus")
    parser.add_argument("--before", help="a commit whose tokenizer is measured alongside")
    parser.add_argument("--tokenizer", help="a folder with a saved ElmoTokenizer (default: the byte tokenizer)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    corpus = text_corpus(args.text, args.sentences) if args.text else synthetic_corpus(args.sentences)
    tokenizer = ElmoTokenizer() if args.tokenizer is None else ElmoTokenizer.from_pretrained(args.tokenizer)
    texts = [" ".join(words) for words in corpus]
    inputs = {"words": corpus, "text+offsets": texts}
    words = {"words": sum(map(len, corpus)), "text+offsets": sum(len(tokenizer.tokenize(text)) for text in texts)}
    paths = {"tokenizer": {kind: encoder(tokenizer, kind) for kind in INPUTS}}
    paths["per-word"] = {"words": lambda batch: per_word_input_ids(tokenizer, batch)}
    if args.before:
        before = tokenizer_at(args.before, args.tokenizer)
        paths[f"before ({args.before})"] = {kind: encoder(before, kind) for kind in INPUTS}

    kind = "bytes" if tokenizer.char_vocab is None else f"dictionary of {len(tokenizer.char_vocab)} characters"
    print(f"{cpu_description()}\ntorch {torch.__version__}, 1 thread, {len(corpus)} sentences, {kind} tokenizer")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| input | batch | path | words/s | / tokenizer | same ids |")
    print("|---|---|---|---|---|---|")
    for kind in INPUTS:
        for batch_size in args.batch_sizes:
            batches = [inputs[kind][start : start + batch_size] for start in range(0, len(corpus), batch_size)]
            measured = {name: encoders[kind] for name, encoders in paths.items() if kind in encoders}
            same = {
                name: all(torch.equal(encode(batch), measured["tokenizer"](batch)) for batch in batches)
                for name, encode in measured.items()
            }
            runs = {name: [] for name in measured}
            for round_ in range(args.rounds):
                for name in measured if round_ % 2 == 0 else reversed(measured):
                    runs[name].append(words_per_second(measured[name], batches, words[kind]))
            speed = {name: statistics.median(values) for name, values in runs.items()}
            for name, value in speed.items():
                print(
                    f"| {kind} | {batch_size} | {name} | {value:,.0f} | {value / speed['tokenizer']:.3f} | "
                    f"{'yes' if same[name] else 'NO'} |",
                    flush=True,
                )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
