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
"""The export path's recurrence: `reference_elmo.lstm_recurrence` (same signature, same results) over a padded batch
as a `scan`, listed in `kernels_elmo.py`'s table and taken while `torch.export` or `torch.compile` traces.

It needs torch's `scan` higher-order op, which torch 2.13 offers only as a private prototype
(`torch._higher_order_ops.scan`); the parity tests in `tests/test_onnx_export.py` guard it. The loop is an ONNX `Scan`:
no host synchronisation and no shape taken from data, so the graph takes any batch size and length.
"""

import torch
from torch._higher_order_ops.scan import scan

from .reference_elmo import KernelRequest, LstmLinears, LstmState, SequenceBatch, lstm_step, masked_step


def supports(request: KernelRequest) -> bool:
    """A padded batch while `torch.export` or `torch.compile` traces (in eager mode the reference's loop is faster)."""
    return request.traced and not request.packed


def scan_recurrence(
    inputs: torch.Tensor, batch: SequenceBatch, initial_state: LstmState, linears: LstmLinears,
    cell_clip: float | None, projection_clip: float | None,
) -> tuple[torch.Tensor, LstmState]:
    """The reference's padded recurrence (`reference_elmo.masked_step` of `lstm_step`, calling the same layers) as one
    `scan` over the steps: every row runs to the longest length, a finished row keeps its state."""
    gate_inputs = linears.input_to_gates(inputs)
    # The clips as 0-dim tensors: `torch.compile(dynamic=True)` makes a float a symbolic one, which a scan cannot take
    # from outside its body.
    cell_clip, projection_clip = (
        None if clip is None else torch.tensor(clip, dtype=inputs.dtype, device=inputs.device)
        for clip in (cell_clip, projection_clip)
    )

    def step(step_inputs, state):  # no annotations: torch.compile cannot evaluate subscripted ones
        return lstm_step(step_inputs, state, linears, cell_clip, projection_clip)

    def scanned_step(state, step_inputs_and_mask):
        return masked_step(step, state, step_inputs_and_mask)

    final_state, outputs = scan(scanned_step, initial_state, (gate_inputs, batch.mask))
    return outputs, final_state


__all__ = ["scan_recurrence", "supports"]
