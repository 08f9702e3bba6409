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
"""The `elmo-hf` console command's entry point: the list of commands, `--help` and `--version`.

It lives outside the `elmo_hf` package because importing `elmo_hf` registers the model with transformers' Auto
classes, which imports torch and transformers' model code (seconds); `elmo-hf --help` and `elmo-hf --version` import
neither. A command runs from `elmo_hf.cli`, which parses its options (`elmo-hf COMMAND --help`) and calls the library.
"""

import sys

__version__ = "0.1.0"

# Every command, in the order `elmo-hf --help` lists them, with the summary it shows (also the command's own
# `--help` description); `elmo_hf.cli.COMMANDS` maps each name to its module.
COMMANDS = {
    "convert": "convert an original options.json + weights .hdf5 to a Hugging Face folder",
    "convert-manylangs": "convert an ELMoForManyLangs model folder (44 languages)",
    "export": "export an elmo-hf folder to the original options.json + weights.hdf5",
    "pretrain": "pretrain a biLM on text files, or adapt a model to new text",
    "perplexity": "each direction's perplexity of a pretraining folder's biLM on text files",
    "export-onnx": "export a model folder or packaged model (base model or head) to ONNX, checked in onnxruntime",
    "embed": "ELMo vectors of a text file, one sentence a line, into an allennlp-style HDF5 file",
    "merge-shards": "merge the shards of an `elmo-hf embed` run under torchrun",
}

EXIT_STATUS = """exit status: 0 success; 2 input or options unusable (nothing written); 1 a failure while running (what
was completed is kept, as the error says); 130 interrupted (Ctrl-C or SIGTERM)."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `elmo-hf` console command: `elmo-hf COMMAND [options]`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--version"]:
        print(f"elmo-hf {__version__}")
        return 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {summary}" for name, summary in COMMANDS.items()]
        usage = "usage: elmo-hf COMMAND [options]   (elmo-hf COMMAND --help for its options; elmo-hf --version)\n"
        print(usage, *lines, "", EXIT_STATUS, sep="\n")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nerror: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0 if argv else 2
    from elmo_hf.cli import run_subcommand  # the library, torch and transformers: only for a command that runs

    return run_subcommand(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
