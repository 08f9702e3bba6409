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
"""CPU inference kernels for `modeling_elmo`: the same computation as its modules, with faster matrix products.

`modeling_elmo` is the reference: every module calls its own submodules. Where `kernels_apply` says the result cannot
differ (CPU, no autograd recording, float32 or bfloat16, the stock module types with no hooks), its dispatcher runs
these functions instead, which read the same weights and:
- run every matrix product through oneDNN, the library `torch.compile` uses for CPU linear layers, with the bias (and
  the addend of the recurrence) fused into the product; for the few-row products of the recurrence, on a copy of the
  weight reordered into oneDNN's blocked layout where timing on the CPU at hand says it pays (`ReorderTimings`);
- compute the character convolutions as matrix products over all windows of a chunk of words;
- compute the input-to-gate products of blocks of time steps at once, bias included, so that only the recurrence is
  sequential.

Reordered weights are built inside one call of `lstm_with_projection` and dropped when it returns, so they always
hold the weights of that call: no cache can go stale (`.data` edits, fused optimizers, `load_state_dict`, tensor
swapping do not bump a version counter reliably). They are built only where the timings say the reordering costs
less than it saves over the call's steps. Memory: at most one cell's recurrent weights at a time (hidden-to-gate
and projection: 40 MiB for the original architecture, 2.5 MiB for small).
"""

import math
import time

import torch
from torch import nn
from torch.nn.utils import parametrize

LstmState = tuple[torch.Tensor, torch.Tensor]

# Rows of input-to-gate products computed at once in `lstm_with_projection`: large enough for an efficient matrix
# product, small enough that memory stays bounded for any sequence length ((rows, 4 * lstm_dim) floats at a time).
# At 256 rows the original architecture's block is 16 MiB, below the 32 MiB up to which the C allocator reuses freed
# memory instead of mapping fresh pages for every block.
GATE_INPUT_BLOCK_ROWS = 256
KERNEL_DTYPES = (torch.float32, torch.bfloat16)
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks")
_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def kernels_apply(
    module: nn.Module,
    tensors: tuple[torch.Tensor, ...],
    module_types: tuple[type, ...],
    dtypes: tuple[torch.dtype, ...] = KERNEL_DTYPES,
    recording: bool = False,
) -> bool:
    """Whether the kernel of `module` computes exactly what its forward computes, for these input tensors.

    True only for CPU tensors and parameters of one dtype (one of `dtypes`), plain `torch.Tensor` or `nn.Parameter`
    (not a subclass such as a quantised weight), where autograd records (a tensor or parameter requires a gradient)
    if and only if `recording` (the inference kernels here: not recording; the training kernel of
    `training_kernels.py`: recording), outside `torch.compile`, `torch.export`, TorchScript tracing, `torch.func`
    transforms, CPU autocast and torch function or dispatch modes, where every submodule is exactly one of
    `module_types` (so nothing replaced or wrapped a layer), none is parametrized and no forward or backward hook (of
    the module or global) would be skipped. The inference kernels also need oneDNN.
    """
    if torch.compiler.is_compiling() or torch.compiler.is_exporting() or not (recording or onednn_available()):
        return False
    if torch.jit.is_tracing() or torch.jit.is_scripting() or torch._C._functorch.peek_interpreter_stack() is not None:
        return False
    if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
        return False
    if torch.is_autocast_enabled("cpu"):  # the modules' products would run in the autocast dtype
        return False
    if any(getattr(nn.modules.module, name) for name in _GLOBAL_HOOKS):
        return False
    for submodule in module.modules():
        if type(submodule) not in module_types or parametrize.is_parametrized(submodule):
            return False
        if any(getattr(submodule, name) for name in _MODULE_HOOKS):
            return False
    dtype = next(module.parameters()).dtype
    tensors = (*tensors, *module.parameters())
    records = torch.is_grad_enabled() and any(tensor.requires_grad for tensor in tensors)
    return dtype in dtypes and records == recording and all(
        type(tensor) in (torch.Tensor, nn.Parameter)
        and tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and (tensor.dtype == dtype or not tensor.is_floating_point())
        for tensor in tensors
    )


def row_bucket(rows: int) -> int:
    """Products are timed per bucket of row counts: 2, 4, 8, ... 256 (the next power of two, at most 256)."""
    return min(1 << (rows - 1).bit_length(), GATE_INPUT_BLOCK_ROWS)


class ReorderTimings:
    """Whether reordering a weight into oneDNN's blocked layout pays, measured on the CPU at hand.

    oneDNN reorders a plain weight internally at every product; from a copy reordered once, products of a few rows
    can be much faster (1.2-2.5x on recurrent weights), but the copy costs time to make (about 25-110 ms for the
    original architecture's 32 MiB hidden-to-gate weight, most of it mapping fresh memory). Per weight shape,
    dtype, thread count, row bucket and fused addend, the first product of a kind times oneDNN on the plain and on
    the reordered weight (a few milliseconds) and checks that they give identical bits; the timings are kept for the
    process. Results do not depend on them: a reordered weight is used only where its products are bitwise identical
    to the plain one's (as they are from 2 rows up; single rows take another oneDNN kernel on the plain weight, so
    they always use it), so the model stays deterministic across processes whatever the timings say.
    """

    # {(out_features, in_features, dtype, threads, bucket): (plain seconds, reordered seconds), or None when the two
    # differ in any bit}
    products: dict[tuple, tuple[float, float] | None] = {}
    # {(out_features, in_features, dtype, threads): seconds to reorder the weight}
    reorders: dict[tuple, float] = {}
    # {(out_features, in_features, dtype): [calls with a reordered copy, calls without]}
    decisions: dict[tuple, list[int]] = {}

    @classmethod
    def product(cls, weight: torch.Tensor, rows: int) -> tuple[float, float] | None:
        """Plain and reordered seconds for a product of `rows` >= 2 rows, measured now if it is new; `None` where
        the reordered weight would change the result (with or without a fused addend)."""
        key = (*weight.shape, weight.dtype, torch.get_num_threads(), row_bucket(rows))
        if key not in cls.products:
            cls.products[key] = cls._measure(weight, row_bucket(rows))
        return cls.products[key]

    @classmethod
    def reorder_seconds(cls, weight: torch.Tensor) -> float:
        key = (*weight.shape, weight.dtype, torch.get_num_threads())
        if key not in cls.reorders:
            reorder_weight(weight)  # the first reordering of a shape also pays for one-time setup
            start = time.perf_counter()
            reorder_weight(weight)
            cls.reorders[key] = time.perf_counter() - start
        return cls.reorders[key]

    @staticmethod
    def _measure(weight: torch.Tensor, rows: int) -> tuple[float, float] | None:
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(rows, weight.shape[1], generator=generator).to(weight.dtype)
        add = torch.randn(rows, weight.shape[0], generator=generator).to(weight.dtype)
        reordered = reorder_weight(weight)
        candidates = [lambda layout=layout: onednn_linear(inputs, layout, None, add) for layout in (weight, reordered)]
        if not all(
            torch.equal(onednn_linear(inputs, weight, None, addend), onednn_linear(inputs, reordered, None, addend))
            for addend in (None, add)
        ):
            return None
        start = time.perf_counter()
        candidates[0]()
        # Repeat small products so that each timing covers about a millisecond.
        repeats = max(1, min(50, math.ceil(1e-3 / max(time.perf_counter() - start, 1e-7))))
        seconds = [math.inf, math.inf]
        for _ in range(3):  # interleaved rounds, the best of each: robust to a busy machine
            for index, run in enumerate(candidates):
                start = time.perf_counter()
                for _ in range(repeats):
                    run()
                seconds[index] = min(seconds[index], (time.perf_counter() - start) / repeats)
        return seconds[0], seconds[1]

    @classmethod
    def summary(cls) -> list[str]:
        """What was measured and decided, one line per weight shape, for benchmark reports."""
        lines = []
        for (out, inp, dtype, threads), seconds in sorted(cls.reorders.items(), key=str):
            reordered, plain = cls.decisions.get((out, inp, dtype), [0, 0])
            products = [
                f"rows <= {bucket}: "
                + (
                    "results differ, plain only"
                    if timing is None
                    else f"plain {timing[0] * 1e6:.0f} us, reordered {timing[1] * 1e6:.0f} us"
                )
                for (o, i, d, t, bucket), timing in sorted(cls.products.items(), key=str)
                if (o, i, d, t) == (out, inp, dtype, threads)
            ]
            lines.append(
                f"{out}x{inp} {str(dtype).removeprefix('torch.')}, {threads} threads: reordering takes "
                f"{seconds * 1e3:.1f} ms; reordered in {reordered} of {reordered + plain} calls; "
                + "; ".join(sorted(products, key=lambda line: int(line.split()[2].rstrip(":"))))
            )
        return lines


def reorder_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` copied into oneDNN's blocked layout for its matrix product (an opaque oneDNN tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


def onednn_linear(
    inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, add: torch.Tensor | None
) -> torch.Tensor:
    """`inputs @ weight.T + bias + add` by oneDNN, bias and addend fused into the product; `weight` plain or
    reordered."""
    inputs = inputs.contiguous()
    if add is not None:
        return torch.ops.mkldnn._linear_pointwise.binary(inputs, add.contiguous(), weight, bias, "add")
    return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")


class CpuLinear:
    """The products of one weight within one call, by oneDNN: `(rows, in_features)` -> `(rows, out_features)`.

    With `row_counts` (the rows of every product this call will make: a recurrence's `batch_sizes`), the weight is
    also reordered into oneDNN's layout, for this call only, when `ReorderTimings` says that saves more time than the
    reordering costs; the copy is dropped with this object.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, row_counts: list[int] | None = None):
        self.weight, self.bias, self.reordered = weight, bias, None
        if row_counts:
            saved = 0.0
            for rows in row_counts:
                timing = ReorderTimings.product(weight, rows) if rows > 1 else None
                saved += 0.0 if timing is None else max(0.0, timing[0] - timing[1])
            if saved > ReorderTimings.reorder_seconds(weight):
                self.reordered = reorder_weight(weight)
            ReorderTimings.decisions.setdefault((*weight.shape, weight.dtype), [0, 0])[self.reordered is None] += 1

    def __call__(self, inputs: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
        weight = self.weight
        if self.reordered is not None and inputs.shape[0] > 1:
            timing = ReorderTimings.product(self.weight, inputs.shape[0])
            if timing is not None and timing[1] < timing[0]:
                weight = self.reordered
        return onednn_linear(inputs, weight, self.bias, add)


def encode_words(encoder: nn.Module, word_ids: torch.Tensor) -> torch.Tensor:
    """`ElmoCharacterEncoder`'s computation: `(num_words, row_width)` ids (characters, then the word id if any) ->
    `(num_words, projection_dim)`, on chunks of `encoder.chunk_size` words.

    Each convolution is one matrix product over all windows of all words of a chunk (faster on CPU than the direct
    convolution): window `k` of a word holds characters `k .. k + width - 1`, flattened as the `Conv1d` weight
    `(num_filters, char_embedding_dim, width)` is.
    """
    cnn = encoder.char_cnn
    convolutions = [CpuLinear(conv.weight.reshape(conv.out_channels, -1), conv.bias) for conv in cnn.convolutions]
    highway = [
        (CpuLinear(layer.gate.weight, layer.gate.bias), CpuLinear(layer.transform.weight, layer.transform.bias))
        for layer in encoder.highway.layers
    ]
    projection = CpuLinear(encoder.projection.weight, encoder.projection.bias)
    chunks = []
    for chunk in word_ids.split(encoder.chunk_size):
        embedded = encoder.char_embeddings(chunk[:, : encoder.config.max_characters_per_token])
        num_words, chars, dim = embedded.shape
        pooled = []
        for conv, product in zip(cnn.convolutions, convolutions):
            width = conv.kernel_size[0]
            # (num_words * (chars - width + 1), dim * width): every window of every word
            windows = embedded.unfold(1, width, 1).reshape(-1, dim * width)
            pooled.append(product(windows).view(num_words, chars - width + 1, -1).amax(dim=1))
        features = cnn.activation(torch.cat(pooled, dim=-1))
        for gate_product, transform_product in highway:
            gate = torch.sigmoid(gate_product(features))
            features = gate * torch.relu(transform_product(features)) + (1 - gate) * features
        chunks.append(projection(encoder.with_word_embeddings(features, chunk)))
    return torch.cat(chunks)


def lstm_with_projection(
    cell: nn.Module, inputs: torch.Tensor, batch_sizes: list[int], initial_state: LstmState
) -> tuple[torch.Tensor, LstmState]:
    """`ElmoLstmCellWithProjection`'s computation (same arguments and results as its forward) over a packed,
    length-sorted batch.

    The input-to-gate products of blocks of steps (about `GATE_INPUT_BLOCK_ROWS` rows) are one product each, with the
    gate bias added there; the recurrent products use weights reordered for this call where that pays (`CpuLinear`).
    """
    input_to_gates = CpuLinear(cell.input_to_gates.weight, cell.hidden_to_gates.bias)
    hidden_to_gates = CpuLinear(cell.hidden_to_gates.weight, row_counts=batch_sizes)
    projection = CpuLinear(cell.projection.weight, row_counts=batch_sizes)
    hidden, memory = initial_state
    outputs = inputs.new_empty(inputs.shape[0], cell.projection.weight.shape[0])
    finished_hidden, finished_memory = [], []
    block_start = block_end = 0
    position = 0
    for step, active in enumerate(batch_sizes):
        if position == block_end:
            # Input-to-gate products of the next steps, up to GATE_INPUT_BLOCK_ROWS rows (at least one step).
            block_start, block_end = position, position + active
            for next_active in batch_sizes[step + 1 :]:
                if block_end + next_active - block_start > GATE_INPUT_BLOCK_ROWS:
                    break
                block_end += next_active
            gate_inputs = input_to_gates(inputs[block_start:block_end])
        if active < hidden.shape[0]:
            finished_hidden.append(hidden[active:])
            finished_memory.append(memory[active:])
            hidden, memory = hidden[:active], memory[:active]
        step_gate_inputs = gate_inputs[position - block_start : position - block_start + active]
        hidden, memory = lstm_step(step_gate_inputs, (hidden, memory), hidden_to_gates, projection, cell)
        outputs[position : position + active] = hidden
        position += active
    finished_hidden.append(hidden)
    finished_memory.append(memory)
    # Rows finish from the back of the sorted batch: the pieces, reversed, are rows 0..batch_size-1.
    return outputs, (torch.cat(finished_hidden[::-1]), torch.cat(finished_memory[::-1]))


def lstm_step(
    gate_inputs: torch.Tensor, state: LstmState, hidden_to_gates: CpuLinear, projection: CpuLinear, cell: nn.Module
) -> LstmState:
    """`ElmoLstmCellWithProjection.step`: `(rows, 4 * lstm_dim)` input-to-gate products (bias included) and the state
    `(h, c)`, `(rows, projection_dim)` and `(rows, lstm_dim)` -> the new state; the products are the cell's."""
    hidden, memory = state
    memory, unprojected = lstm_cell_update(hidden_to_gates(hidden, add=gate_inputs), memory, cell.cell_clip)
    hidden = projection(unprojected)
    if cell.projection_clip is not None:
        hidden = hidden.clamp(-cell.projection_clip, cell.projection_clip)
    return hidden, memory


def lstm_cell_update(
    gates: torch.Tensor, cell: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The element-wise part of one LSTM step, with the input and forget gates' sigmoids in one call.

    Args:
        gates: `(rows, 4 * lstm_dim)` gate pre-activations, in the order i, f, g, o.
        cell: `(rows, lstm_dim)` cell state.
        cell_clip: clip bound of the new cell state, `None` for no clipping.

    Returns:
        The new cell state and the output before projection, `output_gate * tanh(cell)`, both `(rows, lstm_dim)`.
    """
    lstm_dim = cell.shape[1]
    input_and_forget = torch.sigmoid(gates[:, : 2 * lstm_dim])
    candidate = torch.tanh(gates[:, 2 * lstm_dim : 3 * lstm_dim])
    output_gate = torch.sigmoid(gates[:, 3 * lstm_dim :])
    cell = torch.addcmul(input_and_forget[:, lstm_dim:] * cell, input_and_forget[:, :lstm_dim], candidate)
    if cell_clip is not None:
        cell = cell.clamp(-cell_clip, cell_clip)
    return cell, output_gate * torch.tanh(cell)


__all__ = ["CpuLinear", "ReorderTimings", "encode_words", "kernels_apply", "lstm_with_projection"]
