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
"""`elmo-hf perplexity`: each direction's perplexity of a pretraining folder's biLM on text files."""

import argparse

from ..corpus.data import DECODING_ERRORS
from ..corpus.perplexity import corpus_perplexity
from . import add_threads_argument, run_subcommand


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `elmo-hf perplexity` options."""
    parser.add_argument("--model", required=True, help="pretraining folder (written by `elmo-hf pretrain`)")
    parser.add_argument("--text", nargs="+", required=True, help="text files, one sentence per line")
    parser.add_argument("--vocab", help="vocab.txt of the model's softmax (default: the one in --model)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    parser.add_argument("--max-words", type=int, default=100, help="longer lines are split into pieces of this many")
    parser.add_argument("--errors", choices=DECODING_ERRORS, default="strict", help="non-UTF-8 bytes: error or U+FFFD")
    add_threads_argument(parser)
    parser.add_argument("--json", help="also write the result to this JSON file (default: none)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --json file (default: off)")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf perplexity`: 0 on success, 2 for unusable input or options, 1 where the result cannot be written."""
    result = corpus_perplexity(args.model, args.text, vocab=args.vocab, batch_size=args.batch_size,
                               max_words=args.max_words, errors=args.errors, threads=args.threads,
                               json_output=args.json, overwrite=args.overwrite)
    print(
        f"forward perplexity  {result['forward_perplexity']:.3f}\n"
        f"backward perplexity {result['backward_perplexity']:.3f}\n"
        f"mean loss           {result['loss']:.6f}  (nats per prediction, mean of the two directions)\n"
        f"predictions         {result['predictions']} per direction (every word and every sentence's end)\n"
        f"words               {result['words']}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
