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
"""The Triton kernels of `gpu_kernels.fused_recurrence`: one step's elementwise work of the LSTM with projection.

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
triton = tl = sigmoid = gate = None


class Kernels(NamedTuple):
    """The kernels as Triton made them (launched as `kernel[grid](...)`), and the compute dtypes they take."""

    cell: Any
    output: Any
    float32: Any
    float64: Any


@functools.cache
def compiled() -> Kernels:
    """The kernels as Triton kernels (or, under `TRITON_INTERPRET=1`, its interpreter's)."""
    global triton, tl, sigmoid, gate
    try:
        import triton
        import triton.language as tl
    except ImportError as error:
        raise ImportError("the fused GPU recurrence needs Triton: `pip install triton`") from error
    sigmoid, gate = triton.jit(sigmoid_of), triton.jit(gate_of)
    return Kernels(triton.jit(cell_kernel), triton.jit(output_kernel), tl.float32, tl.float64)


def sigmoid_of(x):
    """`tl.sigmoid`'s formula, here so that the interpreter runs it even where `triton.language` was imported before
    `TRITON_INTERPRET` was set (its own functions are then compiled-only)."""
    return 1 / (1 + tl.exp(-x))


def gate_of(gate_inputs, recurrent, offsets, inside, COMPUTE: tl.constexpr):
    """One gate's pre-activation, `gate_inputs + recurrent` at `offsets`, in the compute dtype."""
    gate_input = tl.load(gate_inputs + offsets, mask=inside).to(COMPUTE)
    return gate_input + tl.load(recurrent + offsets, mask=inside).to(COMPUTE)


def cell_kernel(
    gate_inputs, recurrent, cell, hidden, running, rows, lstm_dim, cell_clip,
    CLIP: tl.constexpr, MASKED: tl.constexpr, COMPUTE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """One step's gates and cell update for `rows` rows: gates `gate_inputs + recurrent` (`(rows, 4 * lstm_dim)`, in
    the order i, f, g, o), `cell` `(rows, lstm_dim)` updated in place (kept where `running` is 0 when `MASKED`),
    `hidden` `(rows, lstm_dim)` = `sigmoid(o) * tanh(cell)`, the projection's input. `tanh(x)` is computed as
    `2 * sigmoid(2 * x) - 1` (Triton has no portable `tanh`), to within a float's rounding of the value 1."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < rows * lstm_dim
    row = offsets // lstm_dim
    gate_offsets = offsets + row * 3 * lstm_dim  # element (row, j) of the first gate of a (rows, 4 * lstm_dim) row
    input_gate = gate(gate_inputs, recurrent, gate_offsets, inside, COMPUTE)
    forget_gate = gate(gate_inputs, recurrent, gate_offsets + lstm_dim, inside, COMPUTE)
    candidate = gate(gate_inputs, recurrent, gate_offsets + 2 * lstm_dim, inside, COMPUTE)
    output_gate = gate(gate_inputs, recurrent, gate_offsets + 3 * lstm_dim, inside, COMPUTE)
    old_cell = tl.load(cell + offsets, mask=inside).to(COMPUTE)
    new_cell = sigmoid(forget_gate) * old_cell + sigmoid(input_gate) * (2 * sigmoid(2 * candidate) - 1)
    if CLIP:
        new_cell = tl.minimum(tl.maximum(new_cell, -cell_clip), cell_clip)
    if MASKED:
        new_cell = tl.where(tl.load(running + row, mask=inside) != 0, new_cell, old_cell)
    tl.store(cell + offsets, new_cell.to(cell.dtype.element_ty), mask=inside)
    output = sigmoid(output_gate) * (2 * sigmoid(2 * new_cell) - 1)
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
        value = tl.minimum(tl.maximum(value, -projection_clip), projection_clip)
    if MASKED:
        active = tl.load(running + offsets // projection_dim, mask=inside) != 0
        tl.store(state + offsets, value.to(state.dtype.element_ty), mask=inside & active)
        value = tl.where(active, value, 0.0)
    else:
        tl.store(state + offsets, value.to(state.dtype.element_ty), mask=inside)
    tl.store(outputs + offsets, value.to(outputs.dtype.element_ty), mask=inside)


__all__ = ["Kernels", "compiled"]
