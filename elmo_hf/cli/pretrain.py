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
"""`elmo-hf pretrain`: pretrain a biLM on text files, or adapt a model to new text."""

import argparse
import json
import os
import sys

from ..corpus.data import DECODING_ERRORS
from ..corpus.pretraining import DEFAULT_ARCHITECTURE, PRESETS, SCHEDULERS, SCHEDULERS_WITHOUT_WARMUP, pretrain
from . import add_threads_argument, run_subcommand


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `elmo-hf pretrain` options."""
    data = parser.add_argument_group("data")
    data.add_argument("--train", nargs="+", required=True, help="training text files, one sentence per line")
    data.add_argument("--validation", help="held-out text file for the evaluation perplexity (default: none)")
    data.add_argument("--output", required=True, help="folder for checkpoints and the finished model")
    data.add_argument("--vocab", help="vocab.txt to use (default: the --model's, else built from --train)")
    data.add_argument("--vocab-size", type=int, help="keep at most this many words, special words included (default: "
                      "every word seen --min-count times)")
    data.add_argument("--min-count", type=int, default=1, help="keep words seen at least this often")
    data.add_argument("--max-words", type=int, default=100, help="longer lines are split into pieces of this many")
    data.add_argument("--errors", choices=DECODING_ERRORS, default="strict", help="non-UTF-8 bytes: error or U+FFFD")
    data.add_argument("--streaming", action="store_true",
                      help="stream --train (larger than memory; needs --max-steps)")
    model = parser.add_argument_group("model")
    model.add_argument("--architecture", choices=sorted(PRESETS),
                       help=f"architecture of a new model (default: {DEFAULT_ARCHITECTURE}); not with --model")
    model.add_argument("--model", help="continue from this model folder or packaged model, e.g. elmo-en-mini "
                       "(domain adaptation; default: a new model)")
    model.add_argument("--from-pretrained", help=argparse.SUPPRESS)  # the former name of --model
    model.add_argument("--new-softmax", action="store_true", help="with --model: train a new softmax over --vocab")
    model.add_argument("--lstm-dim", type=int, help="LSTM cell size (default: the architecture's)")
    model.add_argument("--projection-dim", type=int, help="LSTM output and token size (default: the architecture's)")
    model.add_argument("--num-layers", type=int, help="biLSTM layers (default: the architecture's, 2)")
    model.add_argument("--num-highway-layers", type=int, help="highway layers (default: the architecture's)")
    model.add_argument("--filters", help="char CNN banks as WIDTH:COUNT,..., e.g. 1:32,2:32,3:64 (default: the "
                       "architecture's)")
    model.add_argument("--softmax", choices=("full", "sampled"), default="full", help="the word softmax")
    model.add_argument("--num-samples", type=int, default=8192, help="words sampled per batch by --softmax sampled")
    model.add_argument("--dropout", type=float, default=0.1, help="dropout of the pretraining model")
    train = parser.add_argument_group("training")
    train.add_argument("--batch-size", type=int, default=32, help="sentences per process and step")
    train.add_argument("--gradient-accumulation-steps", type=int, default=1, help="batches per optimizer step")
    train.add_argument("--learning-rate", type=float, default=2e-3, help="peak learning rate")
    train.add_argument("--optimizer", default="adamw_torch", metavar="NAME",
                       help="a Trainer optim (adamw_torch, sgd, adafactor, ...) or adagrad, the original's "
                       "(accumulators from 1)")
    train.add_argument("--lr-scheduler", default="constant", choices=SCHEDULERS, metavar="NAME",
                       help=f"learning-rate schedule: {', '.join(SCHEDULERS)}")
    train.add_argument("--warmup-steps", type=int, default=0,
                       help="steps of linear warm-up (refused with the schedules that have none: "
                       f"{', '.join(SCHEDULERS_WITHOUT_WARMUP)})")
    train.add_argument("--max-grad-norm", type=float, default=1.0, help="clip the gradients' norm to this")
    train.add_argument("--epochs", type=float, default=10, help="passes over --train (unless --max-steps)")
    train.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (overrides --epochs)")
    train.add_argument("--eval-steps", type=int, default=500, help="held-out perplexity every N steps (0: at the end)")
    train.add_argument("--save-steps", type=int, default=500, help="a checkpoint every N steps")
    train.add_argument("--save-total-limit", type=int, default=2, help="keep this many newest checkpoints")
    train.add_argument("--logging-steps", type=int, default=50, help="log loss and perplexity every N steps")
    train.add_argument("--seed", type=int, default=42, help="random seed (initial weights, data order, dropout)")
    add_threads_argument(train)
    train.add_argument("--resume", action="store_true",
                       help="continue from the newest complete checkpoint of the run in --output")
    train.add_argument("--overwrite", action="store_true",
                       help="train again into an --output that holds a run (moved to previous-run-ID there), or "
                       "into a non-empty folder (none of its files is replaced)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")


def pretrain_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """The keyword arguments of `elmo_hf.corpus.pretraining.pretrain` that the parsed options give."""
    if args.from_pretrained is not None:
        if args.model is not None:
            parser.error("--from-pretrained is the former name of --model: give one of them.")
        print("warning: --from-pretrained is now --model; the old name will go.", file=sys.stderr)
    options = {key: value for key, value in vars(args).items() if key not in ("from_pretrained", "no_progress")}
    options["model"] = args.model if args.model is not None else args.from_pretrained
    return {**options, "progress": not args.no_progress, "report": lambda line: print(line, file=sys.stderr)}


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf pretrain`: 0 on success, 2 for unusable input or options, 1 for a failure while training."""
    _, metrics = pretrain(**pretrain_options(args, parser))
    if metrics and int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(metrics, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
