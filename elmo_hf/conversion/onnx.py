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
"""`elmo-hf export-onnx`: a converted ELMo folder (the base model or a head) to an ONNX graph, `onnx/model.onnx`
inside the folder (where the Hub and transformers.js look for it) unless another folder is given.

The model is traced with `torch.export` (which takes the model's padded-batch path, see
`kernels_elmo.uses_padded_batches`) with dynamic batch and word-count dimensions, converted by
`torch.onnx.export(..., dynamo=True)` at opset `ONNX_OPSET`, and checked in onnxruntime against the eager model before
it is moved into place.

ONNX graph signature (all float outputs float32; `batch_size` and `sequence_length` dynamic, 0 words included):
- inputs: `input_ids` int64 `(batch_size, sequence_length, row_width)` (`max_characters_per_token` character ids,
  plus the word id for a dictionary model with a word embedding), `attention_mask` int64
  `(batch_size, sequence_length)`; with `lstm_state=True` also `lstm_state_h` `(2 * num_layers, batch_size,
  projection_dim)` and `lstm_state_c` `(2 * num_layers, batch_size, lstm_dim)`.
- outputs of the base model: `last_hidden_state`, `hidden_states_0` .. `hidden_states_{num_layers}`, with
  `lstm_state=True` also `final_lstm_state_h`, `final_lstm_state_c`; of a head: `logits`.
"""

import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..errors import ElmoInputError
from ..modeling_elmo import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel, ElmoPreTrainedModel
from ..packaged_elmo import PACKAGED_MODELS_DIR
from .convert import (
    check_folder_path,
    created_folder,
    load_model_weights,
    model_folder,
    read_config,
    write_error,
)

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
# The task a folder exports without --task, by its config's architecture; a pretraining folder (the packaged model
# among them) exports its biLM's layers, since its word softmax serves training only.
ARCHITECTURE_TASKS = {cls.__name__: task for task, cls in MODEL_CLASSES.items()} | {
    "ElmoForPreTraining": "feature-extraction"
}


class OnnxExportError(ElmoInputError):
    """The model cannot be exported to ONNX (an unusable folder or option, or a graph that disagrees with the eager
    model); nothing was written."""


class ElmoOnnxSignature(nn.Module):
    """Positional tensors in, a flat tuple of tensors out: the signature of the exported graph (see the module
    docstring), around an `ElmoModel` or a head.

    The graph runs the model on the batch with one padding word appended, and drops that word's rows from the
    per-word outputs: a padding word changes no output (the model's rule for padding, which the export check and
    the tests verify against the eager model), and it keeps every loop of the graph at one step or more, since
    onnxruntime's Scan cannot run zero steps and the trace cannot see the eager model's zero-word branches.
    """

    def __init__(self, model: ElmoPreTrainedModel, lstm_state: bool = False):
        super().__init__()
        if lstm_state and not isinstance(model, ElmoModel):
            raise OnnxExportError("lstm_state inputs and outputs exist for the base model (ElmoModel) only.")
        self.model = model
        self.lstm_state = lstm_state

    @property
    def input_names(self) -> list[str]:
        return ["input_ids", "attention_mask"] + (["lstm_state_h", "lstm_state_c"] if self.lstm_state else [])

    @property
    def output_names(self) -> list[str]:
        if not isinstance(self.model, ElmoModel):
            return ["logits"]
        state = ["final_lstm_state_h", "final_lstm_state_c"] if self.lstm_state else []
        return [*self.per_word_output_names, *state]

    @property
    def per_word_output_names(self) -> list[str]:
        """The outputs with a row per word, `(batch_size, sequence_length, ...)`: they come first."""
        if isinstance(self.model, ElmoForSequenceClassification):
            return []
        if not isinstance(self.model, ElmoModel):
            return ["logits"]
        return ["last_hidden_state", *(f"hidden_states_{index}" for index in range(self.model.config.num_layers + 1))]

    def model_outputs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *lstm_state: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """The model's outputs for the inputs as they are (`lstm_state`: `h, c` when the signature has them), in the
        order of `output_names`."""
        if not isinstance(self.model, ElmoModel):
            return (self.model(input_ids, attention_mask=attention_mask, return_dict=True).logits,)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            lstm_state=lstm_state if self.lstm_state else None,
            output_hidden_states=True,
            output_lstm_state=self.lstm_state,
            return_dict=True,
        )
        return (outputs.last_hidden_state, *outputs.hidden_states, *(outputs.lstm_state or ()))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        lstm_state_h: torch.Tensor | None = None,
        lstm_state_c: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """`model_outputs` computed with one padding word appended (see the class docstring)."""
        num_words = input_ids.shape[1]
        input_ids = torch.cat([input_ids, input_ids.new_zeros(input_ids.shape[0], 1, input_ids.shape[2])], dim=1)
        attention_mask = torch.cat([attention_mask, attention_mask.new_zeros(attention_mask.shape[0], 1)], dim=1)
        state = (lstm_state_h, lstm_state_c) if self.lstm_state else ()
        outputs = self.model_outputs(input_ids, attention_mask, *state)
        per_word = len(self.per_word_output_names)
        return (*(output[:, :num_words] for output in outputs[:per_word]), *outputs[per_word:])

    def sample_inputs(self, batch_size: int = 2, sequence_length: int = 3, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Inputs to trace or check with: random ids (characters, and the word id of a dictionary model with a word
        embedding), the last row one word shorter (right padding), and a random `lstm_state` when the signature has
        one."""
        config = self.model.config
        generator = torch.Generator().manual_seed(seed)
        shape = (batch_size, sequence_length)
        input_ids = torch.randint(1, config.char_vocab_size, (*shape, config.row_width), generator=generator)
        if config.row_width > config.max_characters_per_token:
            words = torch.randint(1, config.word_embedding_vocab_size, shape, generator=generator)
            input_ids[..., config.max_characters_per_token] = words
        attention_mask = torch.ones(*shape, dtype=torch.long)
        attention_mask[-1, sequence_length - 1 :] = 0
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
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

    try:
        session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        actual = session.run(None, {name: tensor.numpy() for name, tensor in zip(signature.input_names, inputs)})
    except (Fail, InvalidArgument, RuntimeException) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise OnnxExportError(
            f"onnxruntime cannot run the exported graph on inputs of shape {tuple(inputs[0].shape)} ({first_line}); "
            "nothing was written. Please report this with the model's config.json."
        ) from error
    with torch.no_grad():
        expected = signature.model_outputs(*inputs)
    if any(a.shape != e.shape for a, e in zip(actual, expected)):
        return float("inf")
    return max(float(np.abs(a - e.numpy()).max(initial=0.0)) for a, e in zip(actual, expected))


def check_inputs(signature: ElmoOnnxSignature) -> list[tuple[torch.Tensor, ...]]:
    """The inputs of the export check: right-padded, left-padded, and a batch of texts without words."""
    left_padded = signature.sample_inputs(batch_size=3, sequence_length=7, seed=1)
    left_padded = (left_padded[0].flip(1), left_padded[1].flip(1), *left_padded[2:])
    no_words = signature.sample_inputs(batch_size=2, sequence_length=0, seed=3)
    return [signature.sample_inputs(batch_size=2, sequence_length=4, seed=2), left_padded, no_words]


def export_onnx(
    model: str | os.PathLike,
    output: str | os.PathLike | None = None,
    *,
    task: str | None = None,
    lstm_state: bool = False,
    overwrite: bool = False,
) -> tuple[Path, float]:
    """Exports a model to `output/model.onnx`; returns that path and the largest abs difference of onnxruntime's
    outputs from the eager model's in the check.

    Args:
        model: a folder written by `elmo-hf convert`, `convert-manylangs` or `save_pretrained`, or the name of a
            model packaged with elmo-hf.
        output: the folder to write `model.onnx` into (created if needed); by default the model folder's `onnx/`,
            which a packaged model needs instead (its folder is inside the installed package).
        task: `"feature-extraction"` (the base model), `"token-classification"` or `"text-classification"`; by
            default the folder's own architecture.
        lstm_state: give the base model's graph `lstm_state` inputs and outputs (stateful use).
        overwrite: replace an existing `model.onnx`.

    The graph is checked in onnxruntime against the eager model on three batches (right-padded, left-padded, texts
    without words) before it is moved into place. Raises `OnnxExportError` (an `ElmoInputError`) if the model or
    an option cannot be used or the check fails, `ElmoRunError` if writing fails; in every case nothing was written.
    """
    folder = model_folder(model, OnnxExportError)
    destination = Path(output if output is not None else folder / ONNX_SUBFOLDER).absolute() / ONNX_FILE_NAME
    if destination.resolve().is_relative_to(PACKAGED_MODELS_DIR.resolve()):
        raise OnnxExportError(
            f"{model} is a model packaged with elmo-hf, inside the installed package, which an export must not "
            "change; pass --output FOLDER to write model.onnx there."
        )
    if destination.exists() and not destination.is_file():  # the finished file is renamed over it
        raise OnnxExportError(
            f"{destination} is a folder (or not a regular file), which the export cannot replace; move it away or "
            "give another --output."
        )
    if destination.exists() and not overwrite:
        raise OnnxExportError(f"{destination} exists; pass --overwrite to replace it.")
    check_folder_path(destination.parent, OnnxExportError)
    if task is not None and task not in MODEL_CLASSES:
        raise OnnxExportError(f"unknown task {task!r}; choose one of {', '.join(MODEL_CLASSES)}.")
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as error:
        raise OnnxExportError(
            f"ONNX export needs onnx, onnxscript and onnxruntime: pip install 'elmo-hf[onnx]' ({error})."
        ) from error
    architecture = (read_config(folder, OnnxExportError).architectures or ["ElmoModel"])[0]
    task = task or ARCHITECTURE_TASKS.get(architecture)
    hint = "export a folder as elmo-hf wrote it, with the --task of its own head"
    eager = load_model_weights(MODEL_CLASSES[task], folder, OnnxExportError, hint).eval() if task else None
    if eager is None:
        raise OnnxExportError(f"{folder} holds a {architecture}; pass --task, one of {', '.join(MODEL_CLASSES)}.")
    signature = ElmoOnnxSignature(eager, lstm_state)
    program = export_program(eager, lstm_state)
    try:
        with created_folder(destination.parent), tempfile.TemporaryDirectory(
            dir=destination.parent, prefix=".onnx-export-"
        ) as scratch:
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
            largest = 0.0
            for inputs in check_inputs(signature):
                difference = max_abs_difference(path, signature, inputs)
                largest = max(largest, difference)
                if not difference <= PARITY_TOLERANCE:
                    raise OnnxExportError(
                        f"the exported graph differs from the eager model by {difference:.3g} (more than "
                        f"{PARITY_TOLERANCE:g}) on inputs of shape {tuple(inputs[0].shape)}; nothing was written."
                    )
            os.replace(path, destination)
    except OSError as error:
        raise write_error(destination, error, option="") from error
    return destination, largest
