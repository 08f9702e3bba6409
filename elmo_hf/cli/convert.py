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

from transformers.utils.logging import disable_progress_bar

from ..conversion.convert import convert_checkpoint
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
from ..errors import ElmoRunError
from . import add_threads_argument, run_subcommand


def add_output_arguments(parser: argparse.ArgumentParser, what: str = "folder to write") -> None:
    """`--output` and `--overwrite`, as every command that writes a folder takes them (see `staged_folder`)."""
    parser.add_argument("--output", required=True, help=f"{what} (must be empty or absent; it appears only when "
                        "complete)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a non-empty --output, once the new folder is complete")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `elmo-hf convert` options."""
    parser.add_argument("--options", required=True, help="the checkpoint's options.json")
    parser.add_argument("--weights", required=True, help="the checkpoint's weights .hdf5")
    add_output_arguments(parser)
    parser.add_argument(
        "--model-card", metavar="NAME",
        help=f"README.md is this released checkpoint's card: {', '.join(MODEL_CARDS)} (default: a generic card)",
    )
    parser.add_argument("--push-to-hub", metavar="REPO_ID",
                        help="then upload the folder to this Hub repository (default: no upload)")
    parser.add_argument("--private", action="store_true", default=None,
                        help="create the repository private (default: public)")
    parser.add_argument("--revision", help="push to this branch, created if needed (default: the main branch)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--token", help="Hugging Face token (default: HF_TOKEN or the `hf auth login` one)")
    parser.add_argument("--hub-timeout", type=float, default=HUB_TIMEOUT, metavar="SECONDS",
                        help="how long each Hub call may wait to connect or for the next part of an answer")
    parser.add_argument("--hub-retries", type=int, default=HUB_RETRIES, metavar="N",
                        help="how often a Hub call is retried on timeouts, network errors and 408/429/5xx answers")
    add_threads_argument(parser)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf convert`: convert, then push if asked (exit status 2 for a checkpoint or an --output that cannot be
    used, 1 if writing or pushing failed)."""
    push = dict(token=args.token, private=args.private, revision=args.revision, create_pr=args.create_pr)
    if problem := check_push_arguments(args.push_to_hub, **push, timeout=args.hub_timeout, retries=args.hub_retries):
        parser.error(problem)
    disable_progress_bar()
    folder = convert_checkpoint(args.options, args.weights, args.output, overwrite=args.overwrite,
                                model_card=args.model_card, repo_id=args.push_to_hub, report=print)
    print(f"converted {args.weights} -> {folder}")
    if args.push_to_hub is None:
        return 0
    try:
        commit = push_to_hub(folder, args.push_to_hub, **push, timeout=args.hub_timeout, retries=args.hub_retries)
    except PUSH_ERRORS as error:
        retry = upload_command(folder, args.push_to_hub, args.private, args.revision, args.create_pr)
        raise ElmoRunError(f"pushing to {args.push_to_hub} failed ({describe_push_error(error)}). The converted "
                           f"folder is complete at {folder}; push it later with: {retry}") from error
    print(f"pushed {folder} -> {commit.pr_url or commit.commit_url}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
