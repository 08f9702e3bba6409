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
"""`elmo-hf merge-shards OUTPUT`: one file from the shards `OUTPUT.shard-R-of-N` that `elmo-hf embed` wrote under
torchrun or accelerate without merging them itself (no process group, or `--no-merge`); the shards are then removed."""

import argparse
import sys

from ..corpus.embed import merge_shards
from . import run_subcommand


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", help="the OUTPUT given to elmo-hf embed; its shards are OUTPUT.shard-R-of-N")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUTPUT (default: off)")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf merge-shards`: 0 on success; errors become exit statuses in `run_subcommand`."""
    world_size = merge_shards(args.output, overwrite=args.overwrite)
    print(f"merged {world_size} shards into {args.output}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
