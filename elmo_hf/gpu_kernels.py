# Copyright 2026 The elmo-hf Authors. ELMo by Peters et al. (2018), Allen Institute for AI.
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
"""GPU implementations of `reference_elmo`'s recurrence and token layer (same signatures, same results), listed in
`kernels_elmo.py`'s tables.

- `fused_recurrence`: the LSTM-with-projection recurrence with each step's elementwise work fused into two Triton
  kernels. The reference launches about a dozen kernels per step (the gate sum, three sigmoids, two tanh, the
  products and sums of the cell update, the clips, the masking); here a step is the recurrent product, one kernel for
  the gates, the cell update and the cell clip, the projection, and one kernel for the projection clip and the
  state and output writes. The two products stay the layers' own matrix products, so the result is the reference's
  up to the order of float additions. Triton is optional: it is imported on first use, so the model imports and runs
  (the reference) where it is absent, remote code included.
- `fused_training_recurrence`: the training kernel (`training_kernels.LstmWithProjectionFunction`: one autograd node
  for the whole recurrence, the input-to-gate products and the weight gradients one matrix product each over all
  steps) with its steps in Triton (`TRITON_STEPS`). Forward, a step is the recurrent product, one kernel for the
  gates, the cell update and clip and every factor the backward needs, the projection, and the output kernel of
  `fused_recurrence`; in reverse, one kernel for the output's gradient through the projection clip, the product with
  the projection, one kernel for the cell's and the gates' gradients, and the product with the hidden-to-gate weight,
  written in place. Autograd through the reference records about a dozen kernels a step and, in its backward,
  fills, copies and adds a full-size gradient for each slice of every step; here four kernels a step each way.
- `token_layer_without_tf32`: the reference token layer with the character convolutions computed as matrix products
  over all windows. Why: on CUDA torch lets cuDNN convolutions use TF32 by default
  (`torch.backends.cudnn.allow_tf32` is `True`), which puts float32 ELMo about 2e-3 away from float64, while matrix
  products stay float32 by default (`torch.backends.cuda.matmul.allow_tf32` is `False`). Turning the cuDNN flag off
  around the convolutions (`torch.backends.cudnn.flags`) would change process-wide state for the duration: another
  thread's convolutions would see it, and two threads entering and leaving it interleaved can leave the flag off for
  good. Matrix products need no flag, and they follow the switch users already have for the rest of the model: to
  trade exactness for speed, `torch.set_float32_matmul_precision("high")` (or `torch.backends.cuda.matmul.allow_tf32
  = True`) lets every product of the model use TF32, and `model.to(torch.bfloat16)` runs it in bfloat16.

Both are taken only for stock layers without hooks (`kernels_elmo.choose_implementation`); elsewhere the reference
runs the model's own layers, whose convolutions follow torch's cuDNN flag.
"""

import functools
import importlib.util
import math

import torch
from torch.nn import functional

from .reference_elmo import KernelRequest, Layer, LstmLinears, LstmState, SequenceBatch, TokenLayers, token_layer
from .training_kernels import TRAINING_KERNEL_DTYPES, ForwardRecord, TrainingSteps, step_positions, training_recurrence

FUSED_RECURRENCE_DTYPES = (torch.float32, torch.bfloat16, torch.float64)
BLOCK = 1024  # elements of one program of the elementwise kernels


@functools.cache
def triton_available() -> bool:
    """Whether Triton is installed (the same answer in every process of this environment)."""
    return importlib.util.find_spec("triton") is not None


def compiled_kernels(dtype: torch.dtype) -> tuple:
    """The Triton kernels (`triton_kernels.Kernels`, Triton imported now if not yet) and the dtype they compute in
    for tensors of `dtype`: float64 for float64, float32 otherwise (bfloat16 loads are widened)."""
    from .triton_kernels import compiled

    kernels = compiled()
    return kernels, kernels.float64 if dtype == torch.float64 else kernels.float32


def supports_fused_recurrence(request: KernelRequest) -> bool:
    """The fused recurrence's capability: CUDA with Triton installed, inference (no autograd recording, not traced),
    float32, bfloat16 or float64, packed or padded."""
    return (
        request.device.type == "cuda"
        and triton_available()
        and not request.recording
        and not request.traced
        and request.dtype in FUSED_RECURRENCE_DTYPES
    )


def supports_fused_training(request: KernelRequest) -> bool:
    """The training kernel with Triton steps: CUDA with Triton installed, autograd recording (not traced), a packed
    batch, float32 or float64."""
    return (
        request.device.type == "cuda"
        and triton_available()
        and request.recording
        and request.packed
        and not request.traced
        and request.dtype in TRAINING_KERNEL_DTYPES
    )


def supports_token_layer_without_tf32(request: KernelRequest) -> bool:
    """CUDA float32 (where cuDNN's TF32 default would round), not traced; autograd records through it."""
    return request.device.type == "cuda" and request.dtype == torch.float32 and not request.traced


def fused_recurrence(
    inputs: torch.Tensor,
    batch: SequenceBatch,
    initial_state: LstmState,
    linears: LstmLinears,
    cell_clip: float | None,
    projection_clip: float | None,
) -> tuple[torch.Tensor, LstmState]:
    """`reference_elmo.lstm_recurrence` (same arguments and results), each step's elementwise work in two Triton
    kernels.

    The state lives in one `(batch_size, dim)` buffer per tensor, updated in place: in a packed batch (rows sorted
    longest first) step `t` updates the first `batch_sizes[t]` rows, so a finished row keeps its final state; in a
    padded one every row runs and the mask keeps a finished row's state.
    """
    kernels, compute = compiled_kernels(inputs.dtype)
    gate_inputs = linears.input_to_gates(inputs)
    hidden, cell = (tensor.contiguous().clone() for tensor in initial_state)
    lstm_dim, projection_dim = cell.shape[1], hidden.shape[1]
    if batch.packed:
        outputs = gate_inputs.new_empty(gate_inputs.shape[0], projection_dim)
        steps, position = [], 0
        for active in batch.batch_sizes:
            steps.append((active, gate_inputs[position : position + active], outputs[position : position + active]))
            position += active
        running = [None] * len(steps)
    else:
        outputs = gate_inputs.new_empty(*gate_inputs.shape[:2], projection_dim)
        steps = [(batch.batch_size, *step) for step in zip(gate_inputs, outputs)]
        running = batch.mask.squeeze(-1).to(torch.int8).contiguous()  # (steps, batch_size); the mask is a transpose
    for (rows, step_inputs, step_outputs), step_running in zip(steps, running):
        if rows == 0:
            continue
        masked = step_running is not None
        recurrent = linears.hidden_to_gates(hidden[:rows])
        cell_output = torch.empty_like(cell[:rows])
        kernels.cell[(math.ceil(rows * lstm_dim / BLOCK),)](
            step_inputs.contiguous(), recurrent.contiguous(), cell, cell_output, step_running, rows, lstm_dim,
            cell_clip or 0.0, CLIP=cell_clip is not None, MASKED=masked, COMPUTE=compute, BLOCK=BLOCK,
        )  # fmt: skip
        projected = cell_output if linears.projection is None else linears.projection(cell_output)
        kernels.output[(math.ceil(rows * projection_dim / BLOCK),)](
            projected.contiguous(), hidden, step_outputs, step_running, rows, projection_dim,
            projection_clip or 0.0, CLIP=projection_clip is not None, MASKED=masked, COMPUTE=compute, BLOCK=BLOCK,
        )  # fmt: skip
    return outputs, (hidden, cell)


def triton_forward(
    gate_inputs: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor, hidden_to_gates: torch.Tensor,
    bias: torch.Tensor, projection: torch.Tensor, batch_sizes: list[int], cell_clip: float | None,
    projection_clip: float | None,
) -> ForwardRecord:
    """`TrainingSteps.forward` in Triton: each step writes its outputs and its factors of the chain rule straight into
    the packed tensors of the record (rows sorted longest first, so step `t` is the first `batch_sizes[t]` rows of the
    state buffers, and a finished row keeps its final state there)."""
    kernels, compute = compiled_kernels(gate_inputs.dtype)
    num_positions, lstm_dim, projection_dim = gate_inputs.shape[0], cell.shape[1], hidden.shape[1]
    hidden, cell = (tensor.contiguous().clone() for tensor in (hidden, cell))
    outputs, unclipped = (gate_inputs.new_empty(num_positions, projection_dim) for _ in range(2))
    unprojected, output_factor, cell_from_output, forget_gate = (
        gate_inputs.new_empty(num_positions, lstm_dim) for _ in range(4)
    )
    cell_factors = gate_inputs.new_empty(num_positions, 3, lstm_dim)
    clipped_cells = None
    if cell_clip is not None:
        clipped_cells = torch.empty(num_positions, lstm_dim, dtype=torch.int8, device=gate_inputs.device)
    for start, active in zip(step_positions(batch_sizes), batch_sizes):
        rows = slice(start, start + active)
        recurrent = functional.linear(hidden[:active], hidden_to_gates, bias)
        kernels.training_cell[(math.ceil(active * lstm_dim / BLOCK),)](
            gate_inputs[rows], recurrent, cell, unprojected[rows], cell_factors[rows], output_factor[rows],
            cell_from_output[rows], forget_gate[rows], None if clipped_cells is None else clipped_cells[rows], active,
            lstm_dim, cell_clip or 0.0, CLIP=cell_clip is not None, COMPUTE=compute, BLOCK=BLOCK,
        )  # fmt: skip
        torch.mm(unprojected[rows], projection.t(), out=unclipped[rows])
        kernels.output[(math.ceil(active * projection_dim / BLOCK),)](
            unclipped[rows], hidden, outputs[rows], None, active, projection_dim, projection_clip or 0.0,
            CLIP=projection_clip is not None, MASKED=False, COMPUTE=compute, BLOCK=BLOCK,
        )  # fmt: skip
    return ForwardRecord(
        outputs, hidden, cell, unprojected, cell_factors, output_factor, cell_from_output, forget_gate,
        clipped_cells=None if clipped_cells is None else clipped_cells.view(torch.bool),
        clipped_outputs=unclipped != outputs if projection_clip is not None else None,
    )  # fmt: skip


def triton_backward(
    record: ForwardRecord, grad_outputs: torch.Tensor, grad_hidden: torch.Tensor, grad_cell: torch.Tensor,
    hidden_to_gates: torch.Tensor, projection: torch.Tensor, batch_sizes: list[int],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`TrainingSteps.backward` in Triton: each step's gradients written in place, into `grad_outputs` (becoming the
    projection's output's before clipping), the first rows of `grad_hidden` and `grad_cell`, and the step's rows of
    the gates' gradients."""
    kernels, compute = compiled_kernels(grad_outputs.dtype)
    num_positions, lstm_dim = record.forget_gate.shape
    projection_dim = grad_outputs.shape[1]
    cell_from_output, cell_factors, output_factor, forget_gate = (
        tensor.contiguous()
        for tensor in (record.cell_from_output, record.cell_factors, record.output_factor, record.forget_gate)
    )
    clipped_cells, clipped_outputs = (
        None if mask is None else mask.contiguous().view(torch.int8)
        for mask in (record.clipped_cells, record.clipped_outputs)
    )
    grad_gates = grad_outputs.new_empty(num_positions, 4 * lstm_dim)
    for start, active in zip(step_positions(batch_sizes)[::-1], batch_sizes[::-1]):
        rows = slice(start, start + active)
        kernels.backward_output[(math.ceil(active * projection_dim / BLOCK),)](
            grad_outputs[rows], grad_hidden, None if clipped_outputs is None else clipped_outputs[rows], active,
            projection_dim, CLIP=clipped_outputs is not None, COMPUTE=compute, BLOCK=BLOCK,
        )  # fmt: skip
        grad_unprojected = torch.mm(grad_outputs[rows], projection)
        kernels.backward_cell[(math.ceil(active * lstm_dim / BLOCK),)](
            grad_unprojected, grad_cell, grad_gates[rows], cell_from_output[rows], cell_factors[rows],
            output_factor[rows], forget_gate[rows], None if clipped_cells is None else clipped_cells[rows], active,
            lstm_dim, CLIP=clipped_cells is not None, COMPUTE=compute, BLOCK=BLOCK,
        )  # fmt: skip
        torch.mm(grad_gates[rows], hidden_to_gates, out=grad_hidden[:active])
    return grad_gates, grad_outputs, grad_hidden, grad_cell


TRITON_STEPS = TrainingSteps(triton_forward, triton_backward)
# The training kernel with Triton steps (the dispatcher's "triton training" entry).
fused_training_recurrence = training_recurrence(TRITON_STEPS)


def char_cnn_as_products(convolutions: tuple[torch.nn.Conv1d, ...], activation: str) -> Layer:
    """`ElmoCharCnn`'s computation with each convolution as one matrix product over every window of every word
    (window `k` holds characters `k .. k + width - 1`, flattened as the `Conv1d` weight
    `(num_filters, char_embedding_dim, width)` is): `(num_words, max_characters, char_embedding_dim)` ->
    `(num_words, num_filters)`."""

    def char_cnn(char_embeddings: torch.Tensor) -> torch.Tensor:
        pooled = []
        for conv in convolutions:
            # (num_words, max_characters - width + 1, char_embedding_dim * width)
            windows = char_embeddings.unfold(1, conv.kernel_size[0], 1).flatten(2)
            pooled.append(functional.linear(windows, conv.weight.flatten(1), conv.bias).amax(dim=1))
        features = torch.cat(pooled, dim=-1)
        return torch.relu(features) if activation == "relu" else torch.tanh(features)

    return char_cnn


def token_layer_without_tf32(word_ids: torch.Tensor, layers: TokenLayers, chunk_size: int | None) -> torch.Tensor:
    """`reference_elmo.token_layer` (same arguments and result) with the convolutions as matrix products
    (`char_cnn_as_products`), which use TF32 only where the user lets matrix products use it."""
    char_cnn = char_cnn_as_products(layers.convolutions, layers.activation)
    return token_layer(word_ids, layers._replace(char_cnn=char_cnn), chunk_size)


__all__ = [
    "TRITON_STEPS",
    "char_cnn_as_products",
    "fused_recurrence",
    "fused_training_recurrence",
    "supports_fused_recurrence",
    "supports_fused_training",
    "supports_token_layer_without_tf32",
    "token_layer_without_tf32",
    "triton_available",
]
