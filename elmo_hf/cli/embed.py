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

from ..corpus.embed import MODEL_DTYPES, OUTPUT_DTYPES, EmbedError, check_arguments, embed
from ..packaged_elmo import DEFAULT_MODEL
from . import run_subcommand

SUMMARY = 'ELMo vectors of a text file, one sentence a line, into an allennlp-style HDF5 file'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="text file, one sentence a line (UTF-8), or - for standard input")
    parser.add_argument("output", help="HDF5 file to write (allennlp elmo layout)")
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="a packaged model's name, a converted ELMo folder (elmo-hf convert) or Hub id; a head's folder works too",
    )
    layers = parser.add_mutually_exclusive_group()
    layers.add_argument(
        "--layers",
        choices=("all", "top", "average", "mix"),
        default="all",
        help="all: (num_layers + 1, words, dim) per sentence; top: the top biLSTM layer; average: the mean of the "
        "layers; mix: gamma * sum_j w_j * layer_j with --mix-weights and --gamma (words, dim)",
    )
    for name in ("all", "top", "average"):
        layers.add_argument(f"--{name}", dest="layers", action="store_const", const=name, help=f"--layers {name}")
    parser.add_argument(
        "--mix-weights",
        type=lambda text: [float(value) for value in text.split(",")],
        help="w0,w1,...: one weight per layer (token layer first), non-negative, summing to 1",
    )
    parser.add_argument("--gamma", type=float, default=1.0, help="scale of --layers mix")
    parser.add_argument(
        "--dtype", choices=sorted(OUTPUT_DTYPES), default="float32", help="dtype of the stored vectors"
    )
    parser.add_argument(
        "--split",
        choices=("whitespace", "default"),
        default="whitespace",
        help="whitespace: lines are tokenized already (as allennlp elmo reads them); default: the model tokenizer's "
        "word splitting (whitespace and punctuation)",
    )
    parser.add_argument(
        "--errors", choices=("strict", "replace"), default="strict", help="undecodable bytes: stop, or read as U+FFFD"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (at most)")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="also cap a batch at this many words, padding included"
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument(
        "--model-dtype", choices=sorted(MODEL_DTYPES), default="float32", help="dtype to run the model in"
    )
    parser.add_argument("--resume", action="store_true", help="keep the sentences an earlier run completed")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUTPUT")
    parser.add_argument(
        "--part-size", type=int, default=1000, help="sentences per part file: the most work an interruption loses"
    )
    parser.add_argument("--no-merge", action="store_true", help="under torchrun, leave the shards for merge-shards")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check_arguments(args, parser)
    try:
        return embed(args)
    except EmbedError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: the completed parts are kept; rerun with --resume to continue.", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
