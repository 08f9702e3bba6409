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
"""The export path's recurrence (`ElmoModel` with `elmo_implementation="export"`, or under `torch.export`).

It lives beside `modeling_elmo.py`, like `cpu_kernels.py`, because it needs torch's `scan` higher-order op, which
torch 2.13 offers only as a private prototype (`torch._higher_order_ops.scan`); the parity tests in
`tests/test_onnx_export.py` guard it.
"""

from collections.abc import Callable

import torch
from torch._higher_order_ops.scan import scan


def masked_recurrence(
    step: Callable[[torch.Tensor, tuple[torch.Tensor, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]],
    inputs: torch.Tensor,
    mask: torch.Tensor,
    initial_state: tuple[torch.Tensor, torch.Tensor],
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Runs one LSTM direction over a padded batch: every row runs to the longest length, a finished row keeps its
    state. The export path's recurrence: no host synchronisation and no shape taken from data, so it exports with
    dynamic batch and length; it spends work on padding, where `lstm_with_projection` does not.

    Under `torch.export` and `torch.compile` the loop is `torch._higher_order_ops.scan` (an ONNX `Scan`; a
    prototype in torch 2.13, guarded by the export parity tests), in plain eager mode a Python loop (faster there).

    Args:
        step: one time step, `(step_inputs, (h, c)) -> (h, c)` (`ElmoLstmCellWithProjection.step`, whose inputs are
            the input-to-gate products).
        inputs: `(steps, batch_size, features)` what `step` reads at each step, time-major, in this direction's order.
        mask: `(steps, batch_size, 1)` bool, true where the row has a token at that step.
        initial_state: `(h, c)` of shapes `(batch_size, projection_dim)` and `(batch_size, lstm_dim)`.

    Returns:
        The outputs `(steps, batch_size, projection_dim)`, zero where `mask` is false, and each row's final `(h, c)`
        (the state after its own last step).
    """

    def masked_step(state, step_inputs_and_mask):  # no annotations: torch.compile cannot evaluate subscripted ones
        """`((h, c), (step_inputs, running))` -> the next state (unchanged where not running) and the output."""
        step_inputs, running = step_inputs_and_mask
        hidden, cell = step(step_inputs, state)
        state = (torch.where(running, hidden, state[0]), torch.where(running, cell, state[1]))
        return state, hidden * running

    if torch.compiler.is_exporting() or torch.compiler.is_compiling():
        final_state, outputs = scan(masked_step, initial_state, (inputs, mask))
        return outputs, final_state
    state, outputs = initial_state, []
    for step_inputs_and_mask in zip(inputs, mask):
        state, output = masked_step(state, step_inputs_and_mask)
        outputs.append(output)
    return torch.stack(outputs), state
