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
"""`elmo-hf convert-manylangs`: an ELMoForManyLangs model folder to an elmo-hf folder."""

import argparse

from transformers.utils.logging import disable_progress_bar

from ..conversion.manylangs import convert_manylangs
from . import add_threads_argument, run_subcommand
from .convert import add_output_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `elmo-hf convert-manylangs` options."""
    parser.add_argument("--model", required=True, help="the unpacked ELMoForManyLangs model folder")
    parser.add_argument("--language", required=True, help="the model's language code for the model card, e.g. zh")
    add_output_arguments(parser)
    parser.add_argument("--repo-id", help="the Hub name the model card's example loads (default: a placeholder)")
    add_threads_argument(parser)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf convert-manylangs` (exit status 2 for a folder or an --output that cannot be used, 1 if writing
    failed)."""
    disable_progress_bar()
    folder = convert_manylangs(args.model, args.output, language=args.language, overwrite=args.overwrite,
                               repo_id=args.repo_id, report=print)
    print(f"converted {args.model} -> {folder}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
