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
"""`elmo-hf export-onnx`: a converted ELMo folder (the base model or a head) to `onnx/model.onnx` inside it.

The model is traced with `torch.export` (which takes the model's export path, see `use_export_path`) with dynamic
batch and word-count dimensions, converted by `torch.onnx.export(..., dynamo=True)` at opset `ONNX_OPSET`, and
checked in onnxruntime against the eager model before it is moved into place.

ONNX graph signature (all float outputs float32; `batch_size` and `sequence_length` dynamic):
- inputs: `input_ids` int64 `(batch_size, sequence_length, max_characters_per_token)`, `attention_mask` int64
  `(batch_size, sequence_length)`; with `lstm_state=True` also `lstm_state_h` `(2 * num_layers, batch_size,
  projection_dim)` and `lstm_state_c` `(2 * num_layers, batch_size, lstm_dim)`.
- outputs of the base model: `last_hidden_state`, `hidden_states_0` .. `hidden_states_{num_layers}`, with
  `lstm_state=True` also `final_lstm_state_h`, `final_lstm_state_c`; of a head: `logits`.
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..configuration_elmo import ElmoConfig
from ..modeling_elmo import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel, ElmoPreTrainedModel

# ONNX opset of the exported graph: 18 is the exporter's own default in torch 2.13, has every operator the graph uses
# (Scan, Conv, Gemm, ScatterElements, ...) and runs in onnxruntime 1.14 and later.
ONNX_OPSET = 18
ONNX_SUBFOLDER = "onnx"
ONNX_FILE_NAME = "model.onnx"
# Largest abs difference from the eager model, on any output, that the export check accepts (float32).
PARITY_TOLERANCE = 1e-5
MODEL_CLASSES: dict[str, type[ElmoPreTrainedModel]] = {
    "feature-extraction": ElmoModel,
    "token-classification": ElmoForTokenClassification,
    "text-classification": ElmoForSequenceClassification,
}


class ExportError(Exception):
    """The folder cannot be exported, or the exported graph disagrees with the eager model."""


class ElmoOnnxSignature(nn.Module):
    """Positional tensors in, a flat tuple of tensors out: the signature of the exported graph (see the module
    docstring), around an `ElmoModel` or a head."""

    def __init__(self, model: ElmoPreTrainedModel, lstm_state: bool = False):
        super().__init__()
        if lstm_state and not isinstance(model, ElmoModel):
            raise ExportError("lstm_state inputs and outputs exist for the base model (ElmoModel) only.")
        self.model = model
        self.lstm_state = lstm_state

    @property
    def input_names(self) -> list[str]:
        return ["input_ids", "attention_mask"] + (["lstm_state_h", "lstm_state_c"] if self.lstm_state else [])

    @property
    def output_names(self) -> list[str]:
        if not isinstance(self.model, ElmoModel):
            return ["logits"]
        layers = [f"hidden_states_{index}" for index in range(self.model.config.num_layers + 1)]
        state = ["final_lstm_state_h", "final_lstm_state_c"] if self.lstm_state else []
        return ["last_hidden_state", *layers, *state]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        lstm_state_h: torch.Tensor | None = None,
        lstm_state_c: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        if not isinstance(self.model, ElmoModel):
            return (self.model(input_ids, attention_mask=attention_mask, return_dict=True).logits,)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            lstm_state=(lstm_state_h, lstm_state_c) if self.lstm_state else None,
            output_hidden_states=True,
            output_lstm_state=self.lstm_state,
            return_dict=True,
        )
        return (outputs.last_hidden_state, *outputs.hidden_states, *(outputs.lstm_state or ()))

    def sample_inputs(self, batch_size: int = 2, sequence_length: int = 3, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Inputs to trace or check with: random character ids, the last row one word shorter (right padding), and a
        random `lstm_state` when the signature has one."""
        config = self.model.config
        generator = torch.Generator().manual_seed(seed)
        chars = config.max_characters_per_token
        input_ids = torch.randint(1, config.char_vocab_size, (batch_size, sequence_length, chars), generator=generator)
        attention_mask = torch.ones(batch_size, sequence_length, dtype=torch.long)
        attention_mask[-1, -1] = 0
        input_ids = input_ids * attention_mask.unsqueeze(-1)
        if not self.lstm_state:
            return input_ids, attention_mask
        rows = 2 * config.num_layers
        hidden = torch.randn(rows, batch_size, config.projection_dim, generator=generator)
        cell = torch.randn(rows, batch_size, config.lstm_dim, generator=generator)
        return input_ids, attention_mask, hidden, cell

    def dynamic_shapes(self) -> dict[str, dict[int, torch.export.Dim]]:
        """Dynamic batch and word-count dimensions of every input."""
        batch, words = torch.export.Dim("batch_size"), torch.export.Dim("sequence_length")
        shapes = {"input_ids": {0: batch, 1: words}, "attention_mask": {0: batch, 1: words}}
        return shapes | ({"lstm_state_h": {1: batch}, "lstm_state_c": {1: batch}} if self.lstm_state else {})


def export_program(model: ElmoPreTrainedModel, lstm_state: bool = False) -> torch.export.ExportedProgram:
    """`torch.export` of `model` (eval mode) with dynamic batch and word-count dimensions, in the signature of
    `ElmoOnnxSignature`."""
    signature = ElmoOnnxSignature(model.eval(), lstm_state)
    with torch.no_grad():
        return torch.export.export(signature, signature.sample_inputs(), dynamic_shapes=signature.dynamic_shapes())


def max_abs_difference(onnx_path: Path, signature: ElmoOnnxSignature, inputs: tuple[torch.Tensor, ...]) -> float:
    """Largest abs difference between onnxruntime's outputs for `inputs` and the eager model's (default path)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    actual = session.run(None, {name: tensor.numpy() for name, tensor in zip(signature.input_names, inputs)})
    with torch.no_grad():
        expected = signature(*inputs)
    return max(float(np.abs(a - e.numpy()).max(initial=0.0)) for a, e in zip(actual, expected))


def export_onnx(
    folder: str | Path,
    task: str | None = None,
    lstm_state: bool = False,
    overwrite: bool = False,
) -> tuple[Path, float]:
    """Exports the model in a converted or saved `folder` to `folder/onnx/model.onnx`; returns that path and the
    largest abs difference of onnxruntime's outputs from the eager model's in the check.

    Args:
        folder: a folder written by `elmo-hf convert` or `save_pretrained`.
        task: `"feature-extraction"` (the base model), `"token-classification"` or `"text-classification"`; by
            default the folder's own architecture.
        lstm_state: give the base model's graph `lstm_state` inputs and outputs (stateful use).
        overwrite: replace an existing `onnx/model.onnx`.

    The graph is checked in onnxruntime against the eager model on two input shapes (one left-padded) before it
    is moved into place; nothing is written if the check fails.
    """
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ExportError(f"{folder} has no config.json; pass a folder written by `elmo-hf convert` or save_pretrained.")
    destination = folder / ONNX_SUBFOLDER / ONNX_FILE_NAME
    if destination.exists() and not overwrite:
        raise ExportError(f"{destination} exists; pass --overwrite to replace it.")
    config = ElmoConfig.from_pretrained(folder)
    if task is None:
        architecture = (config.architectures or ["ElmoModel"])[0]
        task = next((name for name, cls in MODEL_CLASSES.items() if cls.__name__ == architecture), None)
        if task is None:
            raise ExportError(f"{folder} holds a {architecture}; pass --task, one of {', '.join(MODEL_CLASSES)}.")
    if task not in MODEL_CLASSES:
        raise ExportError(f"unknown task {task!r}; choose one of {', '.join(MODEL_CLASSES)}.")
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as error:
        raise ExportError(f"ONNX export needs onnx, onnxscript and onnxruntime: pip install 'elmo-hf[onnx]' ({error}).")
    model = MODEL_CLASSES[task].from_pretrained(folder).eval()
    program = export_program(model, lstm_state)
    signature = ElmoOnnxSignature(model, lstm_state)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".onnx-export-") as scratch:
        path = Path(scratch) / ONNX_FILE_NAME
        with torch.no_grad():
            onnx_program = torch.onnx.export(
                program,
                opset_version=ONNX_OPSET,
                dynamo=True,
                input_names=signature.input_names,
                output_names=signature.output_names,
                verbose=False,
            )
        onnx_program.save(str(path))
        left_padded = signature.sample_inputs(batch_size=3, sequence_length=7, seed=1)
        left_padded = (left_padded[0].flip(1), left_padded[1].flip(1), *left_padded[2:])
        largest = 0.0
        for inputs in (signature.sample_inputs(batch_size=2, sequence_length=4, seed=2), left_padded):
            difference = max_abs_difference(path, signature, inputs)
            largest = max(largest, difference)
            if not difference <= PARITY_TOLERANCE:
                raise ExportError(
                    f"the exported graph differs from the eager model by {difference:.3g} (more than "
                    f"{PARITY_TOLERANCE:g}) on inputs of shape {tuple(inputs[0].shape)}; nothing was written."
                )
        destination.parent.mkdir(exist_ok=True)
        shutil.move(str(path), str(destination))
    return destination, largest


