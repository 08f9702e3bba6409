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
"""The Triton kernels of `gpu_kernels`: one step's elementwise work of the LSTM with projection, for inference
(`fused_recurrence`: `cell_kernel`, `output_kernel`) and for training (`TRITON_STEPS`: `training_cell_kernel` and
`output_kernel` forward, `backward_output_kernel` and `backward_cell_kernel` in reverse).

The clips (`cell_clip`, `projection_clip`) are one-element tensors of the compute dtype (`gpu_kernels.clip_limits`),
loaded by the kernels, not Python floats: Triton passes a float argument as a float32 scalar, so a float64 model's
clip of 0.6 would clip at 0.6000000238 where the reference clips at 0.6.

Triton is imported, and the kernels made, on the first call of `compiled` (the fused recurrence's `supports` asks for
Triton first), so the model imports and runs without Triton. Triton reads `TRITON_INTERPRET` then: with
`TRITON_INTERPRET=1` the kernels run on CPU tensors in its interpreter, which is how the tests check them against the
reference. The kernels' `tl.constexpr` annotations stay unevaluated until Triton reads them (hence the `__future__`
import).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

# Bound by `compiled` on first use; the kernels read them as globals.
triton = tl = sigmoid = tanh = clip = gate = put = None


class Kernels(NamedTuple):
    """The kernels as Triton made them (launched as `kernel[grid](...)`), and the compute dtypes they take."""

    cell: Any
    output: Any
    training_cell: Any
    backward_output: Any
    backward_cell: Any
    float32: Any
    float64: Any


@functools.cache
def compiled() -> Kernels:
    """The kernels as Triton kernels (or, under `TRITON_INTERPRET=1`, its interpreter's)."""
    global triton, tl, sigmoid, tanh, clip, gate, put
    try:
        import triton
        import triton.language as tl
    except ImportError as error:
        raise ImportError("the fused GPU recurrence needs Triton: `pip install triton`") from error
    sigmoid, tanh, clip, gate, put = map(triton.jit, (sigmoid_of, tanh_of, clip_of, gate_of, put_of))
    kernels = (cell_kernel, output_kernel, training_cell_kernel, backward_output_kernel, backward_cell_kernel)
    return Kernels(*map(triton.jit, kernels), tl.float32, tl.float64)


def sigmoid_of(x):
    """`tl.sigmoid`'s formula, here so that the interpreter runs it even where `triton.language` was imported before
    `TRITON_INTERPRET` was set (its own functions are then compiled-only)."""
    return 1 / (1 + tl.exp(-x))


def tanh_of(x):
    """`tanh(x)` to within a float's rounding of its own value. Triton has no portable `tanh`, and the shortcut
    `2 * sigmoid(2 * x) - 1` is off by a rounding of the value 1, all of a small value's digits (0 below x = 1e-8 in
    float32). Below |x| = 0.625: Lambert's continued fraction `x / (1 + x² / (3 + x² / (5 + ... / 17)))`, whose
    integers are exact in every float (0.2 ulp in float64, 1.4e-7 relative in float32 on a CPU); above it:
    `1 - 2 / (exp(2|x|) + 1)` with x's sign."""
    square = x * x
    fraction = 15 + square / 17
    for index in tl.static_range(7):
        fraction = (13 - 2 * index) + square / fraction
    magnitude = tl.abs(x)
    large = 1 - 2 / (tl.exp(2 * magnitude) + 1)
    return tl.where(magnitude < 0.625, x / fraction, tl.where(x < 0, -large, large))


def clip_of(x, limit):
    """`x` clipped to `[-limit, limit]`, NaN kept NaN as `torch.clamp` keeps it (Triton's `minimum` and `maximum`
    return the other operand on a GPU, which would turn a NaN into the limit)."""
    return tl.where(x != x, x, tl.minimum(tl.maximum(x, -limit), limit))


def gate_of(gate_inputs, recurrent, offsets, inside, COMPUTE: tl.constexpr):
    """One gate's pre-activation, `gate_inputs + recurrent` at `offsets`, in the compute dtype."""
    gate_input = tl.load(gate_inputs + offsets, mask=inside).to(COMPUTE)
    return gate_input + tl.load(recurrent + offsets, mask=inside).to(COMPUTE)


def put_of(pointer, offsets, value, inside):
    """Store `value` at `offsets` (where `inside`) in the pointed tensor's dtype."""
    tl.store(pointer + offsets, value.to(pointer.dtype.element_ty), mask=inside)


def cell_kernel(
    gate_inputs, recurrent, cell, hidden, running, rows, lstm_dim, cell_clip,
    CLIP: tl.constexpr, MASKED: tl.constexpr, COMPUTE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """One step's gates and cell update for `rows` rows: gates `gate_inputs + recurrent` (`(rows, 4 * lstm_dim)`, in
    the order i, f, g, o), `cell` `(rows, lstm_dim)` updated in place (kept where `running` is 0 when `MASKED`),
    `hidden` `(rows, lstm_dim)` = `sigmoid(o) * tanh(cell)`, the projection's input (`tanh_of`)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < rows * lstm_dim
    row = offsets // lstm_dim
    gate_offsets = offsets + row * 3 * lstm_dim  # element (row, j) of the first gate of a (rows, 4 * lstm_dim) row
    input_gate = gate(gate_inputs, recurrent, gate_offsets, inside, COMPUTE)
    forget_gate = gate(gate_inputs, recurrent, gate_offsets + lstm_dim, inside, COMPUTE)
    candidate = gate(gate_inputs, recurrent, gate_offsets + 2 * lstm_dim, inside, COMPUTE)
    output_gate = gate(gate_inputs, recurrent, gate_offsets + 3 * lstm_dim, inside, COMPUTE)
    old_cell = tl.load(cell + offsets, mask=inside).to(COMPUTE)
    new_cell = sigmoid(forget_gate) * old_cell + sigmoid(input_gate) * tanh(candidate)
    if CLIP:
        limit = tl.load(cell_clip)
        new_cell = clip(new_cell, limit)
    if MASKED:
        new_cell = tl.where(tl.load(running + row, mask=inside) != 0, new_cell, old_cell)
    tl.store(cell + offsets, new_cell.to(cell.dtype.element_ty), mask=inside)
    output = sigmoid(output_gate) * tanh(new_cell)
    tl.store(hidden + offsets, output.to(hidden.dtype.element_ty), mask=inside)


def output_kernel(
    projected, state, outputs, running, rows, projection_dim, projection_clip,
    CLIP: tl.constexpr, MASKED: tl.constexpr, COMPUTE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """One step's outputs for `rows` rows: `projected` `(rows, projection_dim)` clipped, written to the hidden
    `state` and to `outputs`; when `MASKED`, rows where `running` is 0 keep their state and output zero."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < rows * projection_dim
    value = tl.load(projected + offsets, mask=inside).to(COMPUTE)
    if CLIP:
        limit = tl.load(projection_clip)
        value = clip(value, limit)
    if MASKED:
        active = tl.load(running + offsets // projection_dim, mask=inside) != 0
        tl.store(state + offsets, value.to(state.dtype.element_ty), mask=inside & active)
        value = tl.where(active, value, 0.0)
    else:
        tl.store(state + offsets, value.to(state.dtype.element_ty), mask=inside)
    tl.store(outputs + offsets, value.to(outputs.dtype.element_ty), mask=inside)


def training_cell_kernel(
    gate_inputs, recurrent, cell, unprojected, cell_factors, output_factor, cell_from_output, forget_gate,
    clipped_cells, rows, lstm_dim, cell_clip, CLIP: tl.constexpr, COMPUTE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """`cell_kernel` for training, on `rows` rows: the same gates and cell update (`cell` `(rows, lstm_dim)` updated
    in place), the projection's input written to `unprojected`, and what the backward needs written beside it
    (`training_kernels.ForwardRecord`): `cell_factors` `(rows, 3, lstm_dim)`, `output_factor`, `cell_from_output`,
    `forget_gate` `(rows, lstm_dim)` and, when `CLIP`, 1 in `clipped_cells` (int8) where the clip changed the cell or
    it is NaN."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < rows * lstm_dim
    row = offsets // lstm_dim
    gate_offsets = offsets + row * 3 * lstm_dim
    input_gate = sigmoid(gate(gate_inputs, recurrent, gate_offsets, inside, COMPUTE))
    forget = sigmoid(gate(gate_inputs, recurrent, gate_offsets + lstm_dim, inside, COMPUTE))
    candidate = tanh(gate(gate_inputs, recurrent, gate_offsets + 2 * lstm_dim, inside, COMPUTE))
    output_gate = sigmoid(gate(gate_inputs, recurrent, gate_offsets + 3 * lstm_dim, inside, COMPUTE))
    old_cell = tl.load(cell + offsets, mask=inside).to(COMPUTE)
    new_cell = forget * old_cell + input_gate * candidate
    if CLIP:
        limit = tl.load(cell_clip)
        outside = (new_cell < -limit) | (new_cell > limit) | (new_cell != new_cell)
        put(clipped_cells, offsets, outside, inside)
        new_cell = clip(new_cell, limit)
    put(cell, offsets, new_cell, inside)
    tanh_cell = tanh(new_cell)
    put(unprojected, offsets, output_gate * tanh_cell, inside)
    factor_offsets = offsets + row * 2 * lstm_dim  # element (row, 0, j) of a (rows, 3, lstm_dim) tensor
    put(cell_factors, factor_offsets, candidate * input_gate * (1 - input_gate), inside)
    put(cell_factors, factor_offsets + lstm_dim, old_cell * forget * (1 - forget), inside)
    put(cell_factors, factor_offsets + 2 * lstm_dim, input_gate * (1 - candidate * candidate), inside)
    put(output_factor, offsets, tanh_cell * output_gate * (1 - output_gate), inside)
    put(cell_from_output, offsets, output_gate * (1 - tanh_cell * tanh_cell), inside)
    put(forget_gate, offsets, forget, inside)


def backward_output_kernel(
    grad_outputs, grad_hidden, clipped_outputs, rows, projection_dim,
    CLIP: tl.constexpr, COMPUTE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """The gradient reaching one step's output before clipping, for `rows` rows: `grad_outputs` (from above) plus
    `grad_hidden` (from the next step), both `(rows, projection_dim)`, zero where `clipped_outputs` (int8) is 1 when
    `CLIP`; written over `grad_outputs`."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < rows * projection_dim
    value = tl.load(grad_outputs + offsets, mask=inside).to(COMPUTE) + tl.load(grad_hidden + offsets, mask=inside)
    if CLIP:
        value = tl.where(tl.load(clipped_outputs + offsets, mask=inside) != 0, 0.0, value)
    put(grad_outputs, offsets, value, inside)


def backward_cell_kernel(
    grad_unprojected, grad_cell, grad_gates, cell_from_output, cell_factors, output_factor, forget_gate,
    clipped_cells, rows, lstm_dim, CLIP: tl.constexpr, COMPUTE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """One step of the cell in reverse, for `rows` rows: the cell's gradient, `grad_cell` (from the next step) plus
    `grad_unprojected * cell_from_output`, zero where `clipped_cells` (int8) is 1 when `CLIP`; from it the gate
    pre-activations' gradients written to `grad_gates` `(rows, 4 * lstm_dim)` (i, f, g by `cell_factors`, o from
    `grad_unprojected * output_factor`), and the previous cell's, `* forget_gate`, written over `grad_cell`."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < rows * lstm_dim
    row = offsets // lstm_dim
    grad_output = tl.load(grad_unprojected + offsets, mask=inside).to(COMPUTE)
    grad_step_cell = tl.load(grad_cell + offsets, mask=inside).to(COMPUTE)
    grad_step_cell += grad_output * tl.load(cell_from_output + offsets, mask=inside)
    if CLIP:
        grad_step_cell = tl.where(tl.load(clipped_cells + offsets, mask=inside) != 0, 0.0, grad_step_cell)
    gate_offsets = offsets + row * 3 * lstm_dim
    factor_offsets = offsets + row * 2 * lstm_dim
    for index in tl.static_range(3):  # i, f, g
        factor = tl.load(cell_factors + factor_offsets + index * lstm_dim, mask=inside)
        put(grad_gates, gate_offsets + index * lstm_dim, grad_step_cell * factor, inside)
    put(grad_gates, gate_offsets + 3 * lstm_dim, grad_output * tl.load(output_factor + offsets, mask=inside), inside)
    put(grad_cell, offsets, grad_step_cell * tl.load(forget_gate + offsets, mask=inside), inside)


__all__ = ["Kernels", "compiled"]
