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
"""The `elmo-hf` command: `elmo-hf SUBCOMMAND [options]`, one subcommand per task.

Each subcommand lives in its own module, which defines `add_arguments(parser)` and `run(args, parser) -> int` (the
exit status); only the module of the subcommand that runs is imported.
"""

import argparse
import importlib
import sys

# subcommand -> (module implementing it, one-line summary for `elmo-hf --help`)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "convert": ("elmo_hf.conversion.convert", "convert an original options.json + weights .hdf5 to a Hugging Face folder"),
    "convert-manylangs": ("elmo_hf.conversion.manylangs", "convert an ELMoForManyLangs model folder (44 languages)"),
    "export": ("elmo_hf.conversion.export", "export an elmo-hf folder to the original options.json + weights.hdf5"),
    "pretrain": ("elmo_hf.pretraining", "pretrain a biLM on text files, or adapt a model folder to new text"),
    "perplexity": ("elmo_hf.perplexity", "each direction's perplexity of a pretraining folder's biLM on text files"),
    "export-onnx": ("elmo_hf.onnx_export", "export a converted folder (base model or head) to onnx/model.onnx inside it"),
    "embed": ("elmo_hf.embed", "ELMo vectors of a text file, one sentence a line, into an allennlp-style HDF5 file"),
    "merge-shards": ("elmo_hf.merge_shards", "merge the shards of an `elmo-hf embed` run under torchrun"),
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default only where it has one (not for flags and options that default to None)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


def run_subcommand(name: str, argv: list[str] | None = None) -> int:
    """Parse `argv` (default: the command line after the subcommand) for subcommand `name` and run it."""
    module_name, summary = SUBCOMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(
        prog=f"elmo-hf {name}", description=summary, formatter_class=HelpFormatter
    )
    module.add_arguments(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return module.run(args, parser)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `elmo-hf` console command."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        width = max(map(len, SUBCOMMANDS))
        lines = [f"  {name:<{width}}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()]
        print("usage: elmo-hf SUBCOMMAND [options]   (elmo-hf SUBCOMMAND --help for its options)\n", *lines, sep="\n")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nerror: unknown subcommand {argv[0]!r}", file=sys.stderr)
            return 2
        return 0 if argv else 2
    return run_subcommand(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
