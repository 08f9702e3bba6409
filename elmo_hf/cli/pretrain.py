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
"""`elmo-hf pretrain`: pretrain a biLM on text files, or adapt a model folder to new text."""

import argparse
import json
import os
import sys

from ..corpus.data import DECODING_ERRORS, CorpusError
from ..corpus.pretraining import PRESETS, PreTrainingError, pretrain
from ..packaged_elmo import resolve_model_name
from . import run_subcommand

SUMMARY = 'pretrain a biLM on text files, or adapt a model folder to new text'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `elmo-hf pretrain` options."""
    data = parser.add_argument_group("data")
    data.add_argument("--train", nargs="+", required=True, help="training text files, one sentence per line")
    data.add_argument("--validation", help="held-out text file for the evaluation perplexity")
    data.add_argument("--output", required=True, help="folder for checkpoints and the finished model")
    data.add_argument("--vocab", help="vocab.txt to use (default: built from --train, or the checkpoint's)")
    data.add_argument("--vocab-size", type=int, help="keep at most this many words (special words included)")
    data.add_argument("--min-count", type=int, default=1, help="keep words seen at least this often")
    data.add_argument("--max-words", type=int, default=100, help="longer lines are split into pieces of this many")
    data.add_argument("--errors", choices=DECODING_ERRORS, default="strict", help="non-UTF-8 bytes: error or U+FFFD")
    data.add_argument(
        "--streaming", action="store_true", help="stream --train (larger than memory; needs --max-steps)"
    )
    model = parser.add_argument_group("model")
    model.add_argument("--architecture", choices=sorted(PRESETS), help="architecture preset (default ptb)")
    model.add_argument(
        "--from-pretrained", help="continue from this model folder or packaged model (domain adaptation)"
    )
    model.add_argument("--new-softmax", action="store_true", help="with --from-pretrained: a new softmax")
    model.add_argument("--lstm-dim", type=int)
    model.add_argument("--projection-dim", type=int)
    model.add_argument("--num-layers", type=int)
    model.add_argument("--num-highway-layers", type=int)
    model.add_argument("--filters", help="char CNN banks as WIDTH:COUNT,... e.g. 1:32,2:32,3:64")
    model.add_argument("--softmax", choices=("full", "sampled"), default="full")
    model.add_argument("--num-samples", type=int, default=8192, help="words sampled per batch by --softmax sampled")
    model.add_argument("--dropout", type=float, default=0.1)
    train = parser.add_argument_group("training")
    train.add_argument("--batch-size", type=int, default=32, help="sentences per process and step")
    train.add_argument("--gradient-accumulation-steps", type=int, default=1)
    train.add_argument("--learning-rate", type=float, default=2e-3)
    train.add_argument(
        "--optimizer",
        default="adamw_torch",
        help="a Trainer optim name, or adagrad as the original (accumulators from 1)",
    )
    train.add_argument("--lr-scheduler", default="constant", help="a Trainer lr_scheduler_type")
    train.add_argument("--warmup-steps", type=int, default=0)
    train.add_argument("--max-grad-norm", type=float, default=1.0)
    train.add_argument("--epochs", type=float, default=10)
    train.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (overrides --epochs)")
    train.add_argument("--eval-steps", type=int, default=500, help="held-out perplexity every N steps (0: at the end)")
    train.add_argument("--save-steps", type=int, default=500)
    train.add_argument("--save-total-limit", type=int, default=2)
    train.add_argument("--logging-steps", type=int, default=50)
    train.add_argument("--seed", type=int, default=42)
    train.add_argument("--threads", type=int, help="CPU threads per process (default: torch's choice)")
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output")
    train.add_argument("--overwrite", action="store_true", help="train again into an --output that holds a model")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf pretrain`: 0 on success, 2 for bad input."""
    args.architecture_given = args.architecture is not None
    args.architecture = args.architecture or "ptb"
    args.from_pretrained = resolve_model_name(args.from_pretrained)  # a packaged model by its name, as every loader
    if args.streaming and args.max_steps <= 0:
        parser.error("--streaming reads the text as a stream of unknown length: give --max-steps.")
    try:
        _, metrics = pretrain(args)
    except (CorpusError, PreTrainingError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if metrics and int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(metrics, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
