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
"""`elmo-hf export-onnx`: a model folder to `onnx/model.onnx` inside it, checked in onnxruntime."""

import argparse
import sys

from ..conversion.onnx import MODEL_CLASSES, ONNX_OPSET, ExportError, export_onnx
from . import run_subcommand

SUMMARY = 'export a converted folder (base model or head) to onnx/model.onnx inside it'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `elmo-hf export-onnx` options."""
    parser.add_argument("folder", help="a converted (elmo-hf convert) or saved (save_pretrained) model folder")
    parser.add_argument(
        "--task", choices=list(MODEL_CLASSES), help="what to export (default: the folder's own architecture)"
    )
    parser.add_argument(
        "--lstm-state", action="store_true", help="add lstm_state inputs and outputs (base model, stateful use)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing onnx/model.onnx")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf export-onnx`: 0 on success, 2 when the folder cannot be exported or the check fails."""
    try:
        path, difference = export_onnx(args.folder, args.task, args.lstm_state, args.overwrite)
    except ExportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"exported {args.folder} -> {path} (opset {ONNX_OPSET}; onnxruntime vs eager: max abs diff {difference:.2g})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs this command on `argv` (default: the command line)."""
    return run_subcommand(__name__.rsplit('.', 1)[-1].replace('_', '-'), argv)
