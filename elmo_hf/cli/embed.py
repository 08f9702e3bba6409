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
"""`elmo-hf embed`: ELMo vectors of a text file, one sentence a line, into an AllenNLP-style HDF5 file."""

import argparse
import sys

from ..corpus.embed import (
    CORES_PER_WRITER,
    DECODING_ERRORS,
    LAYER_CHOICES,
    MODEL_DTYPES,
    MOST_WRITERS,
    OUTPUT_DTYPES,
    SPLIT_CHOICES,
    default_writers,
    embed_corpus,
)
from ..packaged_elmo import DEFAULT_MODEL
from . import add_threads_argument, run_subcommand


def mix_weights(text: str) -> list[float]:
    """`--mix-weights w0,w1,...` as numbers."""
    try:
        return [float(value) for value in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of numbers such as 0.2,0.3,0.5") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="text file, one sentence a line (UTF-8), or - for standard input")
    parser.add_argument("output", help="HDF5 file to write (allennlp elmo layout)")
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="a packaged model's name (loaded offline), a converted ELMo folder (elmo-hf convert) or Hub id; a head's "
        "folder works too",
    )
    layers = parser.add_mutually_exclusive_group()
    layers.add_argument(
        "--layers",
        choices=LAYER_CHOICES,
        default="all",
        help="all: (num_layers + 1, words, dim) per sentence; top: the top biLSTM layer; average: the mean of the "
        "layers; mix: gamma * sum_j w_j * layer_j with --mix-weights and --gamma (words, dim)",
    )
    for name in ("all", "top", "average"):
        layers.add_argument(f"--{name}", dest="layers", action="store_const", const=name, help=f"--layers {name}")
    parser.add_argument(
        "--mix-weights",
        type=mix_weights,
        help="w0,w1,...: one weight per layer (token layer first), non-negative, summing to 1 (default: none; "
        "needed by --layers mix)",
    )
    parser.add_argument("--gamma", type=float, default=1.0, help="scale of --layers mix")
    parser.add_argument(
        "--dtype", choices=sorted(OUTPUT_DTYPES), default="float32", help="dtype of the stored vectors"
    )
    parser.add_argument(
        "--split",
        choices=SPLIT_CHOICES,
        default="whitespace",
        help="whitespace: lines are tokenized already (as allennlp elmo reads them); default: the model tokenizer's "
        "word splitting (whitespace and punctuation)",
    )
    parser.add_argument(
        "--errors", choices=DECODING_ERRORS, default="strict", help="undecodable bytes: stop, or read as U+FFFD"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (at most)")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="also cap a batch at this many words, padding included "
        "(default: no cap)"
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if available, else cpu)")
    parser.add_argument(
        "--model-dtype", choices=sorted(MODEL_DTYPES), default="float32", help="dtype to run the model in"
    )
    add_threads_argument(parser)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep what an earlier run completed where the settings, the model and the line are the same; embed the "
        "rest (default: off)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUTPUT (default: off)")
    parser.add_argument(
        "--part-size", type=int, default=1000, help="sentences per part file: the most work an interruption loses"
    )
    parser.add_argument(
        "--writers", type=int, default=None,
        help="processes that write the part files (0: a thread of this process; default: one per "
        f"{CORES_PER_WRITER} cores beyond 2, at most {MOST_WRITERS}, the cores shared by torchrun's processes: "
        f"{default_writers()} here)",
    )
    parser.add_argument(
        "--no-merge", action="store_true", help="under torchrun, leave the shards for merge-shards (default: merge)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (default: a progress bar)")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf embed`: 0 on success; errors become exit statuses in `run_subcommand`."""
    try:
        summary = embed_corpus(
            args.input,
            args.output,
            model=args.model,
            layers=args.layers,
            mix_weights=args.mix_weights,
            gamma=args.gamma,
            dtype=args.dtype,
            split=args.split,
            errors=args.errors,
            batch_size=args.batch_size,
            max_tokens=args.max_tokens,
            device=args.device,
            model_dtype=args.model_dtype,
            resume=args.resume,
            overwrite=args.overwrite,
            part_size=args.part_size,
            writers=args.writers,
            merge=not args.no_merge,
            progress=not args.no_progress,
            threads=args.threads,
        )
    except KeyboardInterrupt:
        print("\ninterrupted: the completed parts are kept; rerun with --resume to continue.", file=sys.stderr)
        return 130
    words, sentences, seconds = summary.words, summary.sentences, summary.seconds
    print(
        f"{summary.target}: embedded {sentences:,} sentences, {words:,} words in {seconds:.1f} s "
        f"({words / max(seconds, 1e-9):,.0f} words/s, {sentences / max(seconds, 1e-9):,.1f} sentences/s)",
        file=sys.stderr,
    )
    if summary.world_size > 1 and summary.merged and summary.rank == 0:
        print(f"merged {summary.world_size} shards into {args.output}", file=sys.stderr)
    elif not summary.merged:
        print(f"wrote {summary.target}; when all are written: elmo-hf merge-shards {args.output}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
