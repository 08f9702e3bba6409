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
"""`elmo-hf convert`: an original options.json + weights .hdf5 to an elmo-hf folder, optionally pushed to the Hub."""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from transformers.utils.logging import disable_progress_bar

from ..conversion.checkpoint import ConversionError
from ..conversion.convert import convert
from ..conversion.hub import (
    HUB_RETRIES,
    HUB_TIMEOUT,
    MODEL_CARDS,
    PUSH_ERRORS,
    check_push_arguments,
    describe_push_error,
    push_to_hub,
    upload_command,
)
from . import run_subcommand

SUMMARY = 'convert an original options.json + weights .hdf5 to a Hugging Face folder'


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """`--output` and `--overwrite`, as every converter takes them (see `staged_folder`)."""
    parser.add_argument("--output", required=True, help="folder to write (must be empty or absent)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --output")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `elmo-hf convert` options."""
    parser.add_argument("--options", required=True, help="the checkpoint's options.json")
    parser.add_argument("--weights", required=True, help="the checkpoint's weights .hdf5")
    add_output_arguments(parser)
    parser.add_argument(
        "--model-card", metavar="NAME", help=f"README.md is this released checkpoint's card: {', '.join(MODEL_CARDS)}"
    )
    parser.add_argument("--push-to-hub", metavar="REPO_ID", help="then upload the folder to this Hub repository")
    parser.add_argument("--private", action="store_true", default=None, help="create the repository private")
    parser.add_argument("--revision", help="push to this branch (created if needed) instead of the default branch")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--token", help="Hugging Face token; if not given, HF_TOKEN or the `hf auth login` one")
    parser.add_argument("--hub-timeout", type=float, default=HUB_TIMEOUT, metavar="SECONDS",
                        help="how long each Hub call may wait to connect or for the next part of an answer")
    parser.add_argument("--hub-retries", type=int, default=HUB_RETRIES, metavar="N",
                        help="how often a Hub call is retried on timeouts, network errors and 408/429/5xx answers")


def run_conversion(conversion: Callable[[], Path], output: str) -> Path | int:
    """Runs a command's conversion: the folder it wrote, or the exit status after one error line (2 for an input or
    an --output that cannot be used, 1 if writing failed)."""
    disable_progress_bar()
    try:
        return conversion()
    except ConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        where = f" ({error.filename})" if error.filename else ""
        print(f"error: writing --output {output} failed: {error.strerror or error}{where}. Nothing was written "
              f"and {output} is as it was.", file=sys.stderr)
        return 1


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf convert`: convert, then push if asked.

    Exit status: 0 on success, 2 for a checkpoint or an --output that cannot be used, 1 if writing or pushing failed.
    """
    if problem := check_push_arguments(args):
        parser.error(problem)
    folder = run_conversion(lambda: convert(args.options, args.weights, args.output, overwrite=args.overwrite,
                                            model_card_name=args.model_card, repo_id=args.push_to_hub, report=print),
                            args.output)
    if isinstance(folder, int):
        return folder
    print(f"converted {args.weights} -> {folder}")
    if args.push_to_hub is None:
        return 0
    try:
        commit = push_to_hub(folder, args.push_to_hub, args.token, args.private, args.revision, args.create_pr,
                             timeout=args.hub_timeout, retries=args.hub_retries)
    except PUSH_ERRORS as error:
        print(f"error: pushing to {args.push_to_hub} failed ({describe_push_error(error)}). The converted folder is "
              f"complete at {folder}; push it later with: {upload_command(folder, args)}", file=sys.stderr)
        return 1
    print(f"pushed {folder} -> {commit.pr_url or commit.commit_url}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
