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
"""`elmo-hf export`: an elmo-hf folder back to the original options.json + weights.hdf5."""

import argparse

from ..conversion.export import export_original
from . import add_threads_argument, run_subcommand
from .convert import add_output_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `elmo-hf export` options."""
    parser.add_argument("--model", required=True,
                        help="an elmo-hf model folder (base model, any head, pretraining model) or a packaged model's "
                             "name, e.g. elmo-en-mini")
    add_output_arguments(parser, "folder to write options.json and weights.hdf5 into")
    add_threads_argument(parser)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf export` (exit status 2 when the model cannot be exported or --output cannot be used, 1 if writing
    failed)."""
    left_out = export_original(args.model, args.output, overwrite=args.overwrite, report=print)
    if left_out:
        print(f"left out (the original format has no place for them): {', '.join(left_out)}")
    print(f"exported {args.model} -> {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
