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
"""The `elmo-hf` command line: `elmo-hf COMMAND [options]`.

This package is the command layer only: each command is a module of it that parses its options (`add_arguments`)
and calls a typed function of the library (`elmo_hf.corpus`, `elmo_hf.conversion`) in `run`. The list of commands,
`elmo-hf --help` and `elmo-hf --version` are the top-level module `elmo_hf_cli`'s, which imports no torch; `main` here
is its `main`. Every command follows one exit-status rule, stated in `elmo-hf --help`: 0 success; 2 input or options
unusable (one `error:` line, nothing written); 1 a failure while running (one `error:` line saying what was kept); 130
interrupted.
"""

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

from elmo_hf_cli import COMMANDS as SUMMARIES
from elmo_hf_cli import EXIT_STATUS, main  # noqa: F401 (`python -m elmo_hf.cli`, `elmo_hf.cli.main`)

from ..errors import ElmoInputError, ElmoRunError, check_threads


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default only where it has one (not for flags and options that default to None)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if any(action.default is value for value in (None, False, argparse.SUPPRESS)):  # 0 is a default
            return action.help
        return super()._get_help_string(action)


def add_threads_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--threads N`, which every command that computes takes; `run_subcommand` checks it and sets torch's threads
    before the command runs."""
    parser.add_argument("--threads", type=int, metavar="N",
                        help="CPU threads torch computes with, per process (default: torch's choice)")


def set_threads(threads: int | None) -> None:
    """Sets torch's CPU threads to `threads` (None: torch's choice is kept); raises ElmoInputError unless
    `check_threads` accepts it."""
    check_threads(threads)
    if threads is None:
        return
    import torch  # on use: parsing options and --help need no torch

    torch.set_num_threads(threads)


def build_parser(name: str) -> argparse.ArgumentParser:
    """The option parser of command `name`, as `elmo-hf NAME --help` shows it."""
    parser = argparse.ArgumentParser(
        prog=f"elmo-hf {name}", description=SUMMARIES[name], epilog=EXIT_STATUS, formatter_class=HelpFormatter
    )
    COMMANDS[name].add_arguments(parser)
    return parser


def interrupt(signum: int, frame) -> None:
    """A signal handler that interrupts the main thread as Ctrl-C does."""
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (`kill`, a batch scheduler ending a job, torchrun stopping the other processes) interrupts a command
    as Ctrl-C does, so that it cleans up and keeps what is complete (an embed run its open part, a conversion no
    staging folder) instead of dying on the spot; the previous handler is restored after the command."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)  # None: set outside Python


def run_subcommand(name: str, argv: list[str] | None = None) -> int:
    """Parse `argv` (default: the command line after the command) for command `name` and run it."""
    parser = build_parser(name)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:  # `run` raises ElmoInputError / ElmoRunError for the exit statuses 2 / 1
        set_threads(getattr(args, "threads", None))
        with sigterm_interrupts():
            return COMMANDS[name].run(args, parser)
    except ElmoInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ElmoRunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: nothing incomplete was moved into place.", file=sys.stderr)
        return 130


# The commands, imported after `run_subcommand` and `add_threads_argument`, which they import.
from . import convert, convert_manylangs, embed, export, export_onnx, merge_shards, perplexity, pretrain  # noqa: E402

# Each command of `elmo_hf_cli.COMMANDS` (its summary), by name: the module that parses its options and runs it.
COMMANDS = {name: globals()[name.replace("-", "_")] for name in SUMMARIES}
