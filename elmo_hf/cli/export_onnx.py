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
"""`elmo-hf export-onnx`: a model folder to `onnx/model.onnx` inside it (or `--output`), checked in onnxruntime."""

import argparse

from ..conversion.onnx import MODEL_CLASSES, ONNX_OPSET, export_onnx
from . import add_threads_argument, run_subcommand


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `elmo-hf export-onnx` options."""
    parser.add_argument("--model", help="a converted (elmo-hf convert) or saved (save_pretrained) model folder, or a "
                                        "packaged model's name, e.g. elmo-en-mini (required)")
    parser.add_argument("folder", nargs="?", help=argparse.SUPPRESS)  # the former positional form of --model
    parser.add_argument("--output", metavar="FOLDER",
                        help="folder to write model.onnx into (default: MODEL/onnx; a packaged model needs --output, "
                             "since its folder is inside the installed package)")
    parser.add_argument(
        "--task", choices=list(MODEL_CLASSES), help="what to export (default: the folder's own architecture)"
    )
    parser.add_argument(
        "--lstm-state", action="store_true", help="add lstm_state inputs and outputs (base model, stateful use)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing model.onnx")
    add_threads_argument(parser)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf export-onnx` (exit status 2 when the model cannot be exported or the check fails, 1 if writing
    failed)."""
    if (args.model is None) == (args.folder is None):
        parser.error("give the model once, as --model MODEL.")
    model = args.model or args.folder
    path, difference = export_onnx(model, args.output, task=args.task, lstm_state=args.lstm_state,
                                   overwrite=args.overwrite)
    print(f"exported {model} -> {path} (opset {ONNX_OPSET}; onnxruntime vs eager: max abs diff {difference:.2g})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
