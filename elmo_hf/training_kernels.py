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
"""The training kernel: `reference_elmo.lstm_recurrence` (same signature, same results) over a whole packed batch as
one autograd function, with a hand-written backward; listed in `kernels_elmo.py`'s table.

Autograd through the reference recurrence records every step's slices of the gate inputs and of the
state; its backward then fills, copies and adds a full-size gradient for each slice, and makes the weight gradients
as one small matrix product per step. `LstmWithProjectionFunction` runs the same forward (the same operations in the
same order on tensors of their own, so the outputs are bitwise the reference's) and then computes, for all steps at
once, the factors of the chain rule its backward needs; its backward runs the recurrence in reverse with a few
element-wise operations and two small products per step, and then the input gradient and every weight gradient as
one matrix product over all steps. Clipping is differentiated as autograd differentiates `clamp`: the gradient
passes where the clamped value equals its input (inside the range, bounds included) and is zero elsewhere.

The sequential part, forward and in reverse, is a device's `TrainingSteps`: `CPU_STEPS` here (the reference's
operations, each step with the thread count of `cpu_kernels.StepThreads`), `gpu_kernels.TRITON_STEPS` on a GPU (each
step's elementwise work in two Triton kernels each way). The dispatcher of `kernels_elmo.py` takes it only where it
computes the reference's gradients (stock layers without hooks or parametrizations, not traced) and `supports` says
so: autograd recording, a packed batch, float32 or float64, on CPU (where it was measured to pay) or, with Triton, on
CUDA (`gpu_kernels.supports_fused_training`). It supports one backward pass (`once_differentiable`);
`config.elmo_implementation = "eager"` runs the reference, for double backward.
"""

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from .cpu_kernels import StepThreads, step_kind
from .reference_elmo import FinishedRows, KernelRequest, LstmLinears, LstmState, SequenceBatch

TRAINING_KERNEL_DTYPES = (torch.float32, torch.float64)


def supports(request: KernelRequest) -> bool:
    """The training kernel's capability: autograd recording (not traced), a packed batch, float32 or float64, CPU."""
    return (
        request.recording
        and request.packed
        and not request.traced
        and request.dtype in TRAINING_KERNEL_DTYPES
        and request.device.type == "cpu"
    )


def step_positions(batch_sizes: list[int]) -> list[int]:
    """The packed position of each step's first row: `[0, b0, b0 + b1, ...]` (one entry per step)."""
    positions, position = [], 0
    for active in batch_sizes:
        positions.append(position)
        position += active
    return positions


def previous_rows(initial: torch.Tensor, sequence: torch.Tensor, batch_sizes: list[int]) -> torch.Tensor:
    """The state each packed position started from, packed as the positions: the initial state for step 0, and for
    step `t` the first `batch_sizes[t]` rows of step `t - 1` of `sequence` (rows are sorted, so they are a block)."""
    positions = step_positions(batch_sizes)
    blocks = [initial[: batch_sizes[0]]]
    blocks += [sequence[positions[t - 1] : positions[t - 1] + batch_sizes[t]] for t in range(1, len(batch_sizes))]
    return torch.cat(blocks)


class ForwardRecord(NamedTuple):
    """What the forward of the training recurrence returns and keeps for its backward, packed as the inputs
    (`num_positions` rows): the outputs `(num_positions, projection_dim)` and final states; the output before
    projection `(num_positions, lstm_dim)`; the factors of the chain rule: d cell (before clipping) -> d
    pre-activations of i, f, g `(num_positions, 3, lstm_dim)`, d unprojected -> d pre-activation of o, and -> d cell
    through tanh, and the forget gate (d cell -> d previous cell), each `(num_positions, lstm_dim)`; and where each
    clip changed a value (NaN included), whose gradient is zero as autograd of `clamp` gives (None without the
    clip)."""

    outputs: torch.Tensor
    final_hidden: torch.Tensor
    final_cell: torch.Tensor
    unprojected: torch.Tensor
    cell_factors: torch.Tensor
    output_factor: torch.Tensor
    cell_from_output: torch.Tensor
    forget_gate: torch.Tensor
    clipped_cells: torch.Tensor | None
    clipped_outputs: torch.Tensor | None


class TrainingSteps(NamedTuple):
    """How one kind of device runs the sequential part of `LstmWithProjectionFunction`.

    `forward(gate_inputs, hidden, cell, hidden_to_gates, bias, projection, batch_sizes, cell_clip, projection_clip)`
    runs the recurrence on the input-to-gate products `(num_positions, 4 * lstm_dim)` from the initial state and
    returns its `ForwardRecord`. `backward(record, grad_outputs, grad_hidden, grad_cell, hidden_to_gates, projection,
    batch_sizes)` runs it in reverse from the gradients of the outputs and of the final state (its own copies, which it
    may overwrite) and returns the gate pre-activations' gradients `(num_positions, 4 * lstm_dim)`, the projection's
    output's before clipping `(num_positions, projection_dim)`, and the initial state's."""

    forward: Callable[..., ForwardRecord]
    backward: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]


class LstmWithProjectionFunction(torch.autograd.Function):
    """`reference_elmo.lstm_recurrence` over a packed batch, as one autograd node.

    Inputs: `inputs` `(num_positions, projection_dim)`, the initial `hidden` `(batch_size, projection_dim)` and `cell`
    `(batch_size, lstm_dim)`, the weights `input_to_gates` `(4 * lstm_dim, projection_dim)`, `hidden_to_gates`
    `(4 * lstm_dim, projection_dim)` and its bias `(4 * lstm_dim,)`, `projection` `(projection_dim, lstm_dim)`, then
    `batch_sizes`, the two clip bounds (`None` for none) and the device's `TrainingSteps` (`CPU_STEPS` here, Triton's
    on a GPU). Outputs: the packed outputs `(num_positions, projection_dim)` and the final hidden and cell states of
    every row. The input-to-gate products before the recurrence, and every weight's gradient after it, are one matrix
    product over all steps.
    """

    @staticmethod
    def forward(
        ctx,
        inputs: torch.Tensor,
        hidden: torch.Tensor,
        cell: torch.Tensor,
        input_to_gates: torch.Tensor,
        hidden_to_gates: torch.Tensor,
        bias: torch.Tensor,
        projection: torch.Tensor,
        batch_sizes: list[int],
        cell_clip: float | None,
        projection_clip: float | None,
        steps: TrainingSteps,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        StepThreads.resume_torch_count()  # the product's bits must not depend on the steps of the cells before
        gate_inputs = nn.functional.linear(inputs, input_to_gates)
        record = steps.forward(
            gate_inputs, hidden, cell, hidden_to_gates, bias, projection, batch_sizes, cell_clip, projection_clip
        )
        # All through save_for_backward (intermediates too), so that saved-tensor hooks see every one.
        ctx.save_for_backward(inputs, hidden, input_to_gates, hidden_to_gates, projection, *record[3:], record.outputs)
        ctx.batch_sizes, ctx.steps = batch_sizes, steps
        return record.outputs, record.final_hidden, record.final_cell

    @staticmethod
    @once_differentiable
    def backward(
        ctx, grad_outputs: torch.Tensor, grad_final_hidden: torch.Tensor, grad_final_cell: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        """The gradients of the inputs, initial state and weights (`None` where not needed)."""
        inputs, initial_hidden, input_to_gates, hidden_to_gates, projection, *saved, outputs = ctx.saved_tensors
        record = ForwardRecord(outputs, None, None, *saved)
        batch_sizes = ctx.batch_sizes
        grads = (
            grad.clone(memory_format=torch.contiguous_format)
            for grad in (grad_outputs, grad_final_hidden, grad_final_cell)
        )
        grad_gates, grad_unclipped_outputs, grad_hidden, grad_cell = ctx.steps.backward(
            record, *grads, hidden_to_gates, projection, batch_sizes
        )
        # The weight and input gradients: one matrix product each over all steps.
        needs = ctx.needs_input_grad
        grad_inputs = grad_gates @ input_to_gates if needs[0] else None
        grad_input_to_gates = grad_gates.t() @ inputs if needs[3] else None
        grad_hidden_to_gates = None
        if needs[4]:
            grad_hidden_to_gates = grad_gates.t() @ previous_rows(initial_hidden, outputs, batch_sizes)
        grad_bias = grad_gates.sum(0) if needs[5] else None
        grad_projection = grad_unclipped_outputs.t() @ record.unprojected if needs[6] else None
        return (
            grad_inputs,
            grad_hidden if needs[1] else None,
            grad_cell if needs[2] else None,
            grad_input_to_gates,
            grad_hidden_to_gates,
            grad_bias,
            grad_projection,
            None,
            None,
            None,
            None,
        )


def cpu_forward(
    gate_inputs: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor, hidden_to_gates: torch.Tensor,
    bias: torch.Tensor, projection: torch.Tensor, batch_sizes: list[int], cell_clip: float | None,
    projection_clip: float | None,
) -> ForwardRecord:
    """`TrainingSteps.forward` on a CPU: the reference's operations on fresh tensors as the reference's (a matrix
    product can round differently on a view at another memory alignment), so the outputs are bitwise the
    reference's, each step's results kept; then the factors of the chain rule for all positions at once."""
    initial_cell = cell
    names = ("i", "f", "g", "o", "unclipped_cell", "cell", "tanh_cell", "unprojected", "unclipped_hidden", "hidden")
    steps = {name: [] for name in names}
    finished = FinishedRows()
    position = 0
    step_name = step_kind("training step", [hidden_to_gates, projection])
    with StepThreads() as threads:
        for active in batch_sizes:
            hidden, cell = finished.running((hidden, cell), active)
            values = threads.run(
                step_name, active, forward_step, gate_inputs[position : position + active], hidden, cell,
                hidden_to_gates, bias, projection, cell_clip, projection_clip, state=hidden,
            )
            for name, value in zip(names, values):
                steps[name].append(value)
            cell, hidden = values[5], values[9]
            position += active
    final_hidden, final_cell = finished.final((hidden, cell))
    outputs = torch.cat(steps["hidden"])
    input_gate, forget_gate, candidate, output_gate, cells, tanh_cells, unprojected = (
        torch.cat(steps[name]) for name in ("i", "f", "g", "o", "cell", "tanh_cell", "unprojected")
    )
    cell_factors = torch.stack(
        [
            candidate * input_gate * (1 - input_gate),
            previous_rows(initial_cell, cells, batch_sizes) * forget_gate * (1 - forget_gate),
            input_gate * (1 - candidate.square()),
        ],
        dim=1,
    )
    return ForwardRecord(
        outputs,
        final_hidden,
        final_cell,
        unprojected,
        cell_factors,
        output_factor=tanh_cells * output_gate * (1 - output_gate),
        cell_from_output=output_gate * (1 - tanh_cells.square()),
        forget_gate=forget_gate,
        clipped_cells=torch.cat(steps["unclipped_cell"]) != cells if cell_clip is not None else None,
        clipped_outputs=torch.cat(steps["unclipped_hidden"]) != outputs if projection_clip is not None else None,
    )


def cpu_backward(
    record: ForwardRecord, grad_outputs: torch.Tensor, grad_hidden: torch.Tensor, grad_cell: torch.Tensor,
    hidden_to_gates: torch.Tensor, projection: torch.Tensor, batch_sizes: list[int],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`TrainingSteps.backward` on a CPU, each step by `backward_step` with the thread count of `StepThreads`.

    `grad_hidden` / `grad_cell` hold, for every row, the gradient reaching its state after the step being processed:
    from the next step for rows still running, from the final state for rows that ended there; after step 0 they are
    the initial state's gradients. `grad_outputs` becomes, step by step, the gradient of the projection's output
    before clipping."""
    num_positions, lstm_dim = record.forget_gate.shape
    grad_gates = grad_outputs.new_empty(num_positions, 4 * lstm_dim)
    step_name = step_kind("training step backward", [hidden_to_gates, projection])
    with StepThreads() as threads:
        for start, active in zip(step_positions(batch_sizes)[::-1], batch_sizes[::-1]):
            rows = slice(start, start + active)
            grad_output, grad_step_hidden, grad_step_cell = threads.run(
                step_name, active, backward_step, grad_outputs[rows], grad_hidden[:active],
                grad_cell[:active], grad_gates[rows], projection, hidden_to_gates, record.cell_from_output[rows],
                record.cell_factors[rows], record.output_factor[rows], record.forget_gate[rows],
                None if record.clipped_outputs is None else record.clipped_outputs[rows],
                None if record.clipped_cells is None else record.clipped_cells[rows],
                state=grad_hidden[:active],
            )
            grad_outputs[rows] = grad_output
            grad_hidden[:active] = grad_step_hidden
            grad_cell[:active] = grad_step_cell
    return grad_gates, grad_outputs, grad_hidden, grad_cell


def forward_step(
    gate_inputs: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor, hidden_to_gates: torch.Tensor,
    bias: torch.Tensor, projection: torch.Tensor, cell_clip: float | None, projection_clip: float | None,
) -> tuple[torch.Tensor, ...]:
    """One step of the reference's cell on `(rows, 4 * lstm_dim)` input-to-gate products and the state `(rows,
    projection_dim)`, `(rows, lstm_dim)`: the gates i, f, g, o, the cell before and after clipping, its tanh, the
    output before projection, the projection before and after clipping (the new hidden state)."""
    gates = gate_inputs + nn.functional.linear(hidden, hidden_to_gates, bias)
    input_gate, forget_gate, candidate, output_gate = gates.chunk(4, -1)
    input_gate, forget_gate = torch.sigmoid(input_gate), torch.sigmoid(forget_gate)
    candidate, output_gate = torch.tanh(candidate), torch.sigmoid(output_gate)
    unclipped_cell = forget_gate * cell + input_gate * candidate
    cell = unclipped_cell if cell_clip is None else unclipped_cell.clamp(-cell_clip, cell_clip)
    tanh_cell = torch.tanh(cell)
    unprojected = output_gate * tanh_cell
    unclipped_hidden = nn.functional.linear(unprojected, projection)
    hidden = unclipped_hidden if projection_clip is None else unclipped_hidden.clamp(-projection_clip, projection_clip)
    return (input_gate, forget_gate, candidate, output_gate, unclipped_cell, cell, tanh_cell, unprojected,
            unclipped_hidden, hidden)


def backward_step(
    grad_outputs: torch.Tensor, grad_hidden: torch.Tensor, grad_cell: torch.Tensor, grad_gates: torch.Tensor,
    projection: torch.Tensor, hidden_to_gates: torch.Tensor, cell_from_output: torch.Tensor,
    cell_factors: torch.Tensor, output_factor: torch.Tensor, forget_gate: torch.Tensor,
    clipped_outputs: torch.Tensor | None, clipped_cells: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of the recurrence in reverse, for `rows` rows: from the gradients reaching the step's output
    `(rows, projection_dim)` from above and from the next step, and its cell `(rows, lstm_dim)`, writes the gate
    pre-activations' gradients into `grad_gates` `(rows, 4 * lstm_dim)` and returns the gradient of the projection's
    output before clipping and of the previous hidden state and cell. Reads nothing it writes, so it can run twice."""
    lstm_dim = cell_from_output.shape[1]
    grad_output = grad_outputs + grad_hidden
    if clipped_outputs is not None:
        grad_output.masked_fill_(clipped_outputs, 0)
    grad_unprojected = torch.mm(grad_output, projection)
    grad_step_cell = torch.addcmul(grad_cell, grad_unprojected, cell_from_output)
    if clipped_cells is not None:
        grad_step_cell.masked_fill_(clipped_cells, 0)
    input_forget_candidate = grad_gates[:, : 3 * lstm_dim].view(-1, 3, lstm_dim)
    torch.mul(grad_step_cell.unsqueeze(1), cell_factors, out=input_forget_candidate)
    torch.mul(grad_unprojected, output_factor, out=grad_gates[:, 3 * lstm_dim :])
    return grad_output, torch.mm(grad_gates, hidden_to_gates), grad_step_cell * forget_gate


CPU_STEPS = TrainingSteps(cpu_forward, cpu_backward)


def training_recurrence(steps: TrainingSteps) -> Callable[..., tuple[torch.Tensor, LstmState]]:
    """`reference_elmo.lstm_recurrence` (same arguments and results) as `LstmWithProjectionFunction` with a device's
    `steps`, on the weights of the stock `nn.Linear` layers in `linears`."""

    def recurrence(
        inputs: torch.Tensor, batch: SequenceBatch, initial_state: LstmState, linears: LstmLinears,
        cell_clip: float | None, projection_clip: float | None,
    ) -> tuple[torch.Tensor, LstmState]:
        outputs, final_hidden, final_cell = LstmWithProjectionFunction.apply(
            inputs,
            *initial_state,
            linears.input_to_gates.weight,
            linears.hidden_to_gates.weight,
            linears.hidden_to_gates.bias,
            linears.projection.weight,
            batch.batch_sizes,
            cell_clip,
            projection_clip,
            steps,
        )
        return outputs, (final_hidden, final_cell)

    return recurrence


# The training kernel on a CPU (the dispatcher's "training" entry).
fused_lstm_with_projection = training_recurrence(CPU_STEPS)


__all__ = [
    "CPU_STEPS",
    "TRAINING_KERNEL_DTYPES",
    "ForwardRecord",
    "LstmWithProjectionFunction",
    "TrainingSteps",
    "fused_lstm_with_projection",
    "supports",
    "training_recurrence",
]
