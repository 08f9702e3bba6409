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
- `graphed_recurrence`: the fused recurrence replayed from CUDA graphs. A call of the fused recurrence launches four
  kernels a step from Python, which at small batches costs more than the kernels themselves; here the batch runs in
  blocks of `GATE_BLOCK_STEPS` steps, each on the rows running at its first step (rounded up by `graph_rows`; the mask
  keeps a finished row's state, as in the padded layout), and each run of blocks on the same rows (weights, rows,
  place, clips) is captured once into a graph, then replayed: a few graph launches (and a few copies in and out) a
  call, and about the work of a packed batch, not of every row at every step. Graphs share one set of static buffers
  and one memory pool per device (`RecurrenceGraphs`), so their memory is that of the largest call, not of every
  kind. A call made while the user captures a graph of their own takes the fused recurrence.
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
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.nn import functional

from .cpu_kernels import window_products_max
from .reference_elmo import (
    KernelRequest, Layer, LstmLinears, LstmState, SequenceBatch, TokenLayers, to_device, token_layer
)
from .training_kernels import TRAINING_KERNEL_DTYPES, ForwardRecord, TrainingSteps, step_positions, training_recurrence

FUSED_RECURRENCE_DTYPES = (torch.float32, torch.bfloat16, torch.float64)
BLOCK = 1024  # elements of one program of the elementwise kernels
# Steps of a padded batch whose input-to-gate products are one product (`fused_padded_steps`); `graphed_recurrence`
# runs a batch in blocks of as many steps, each on the rows still running at its first step.
GATE_BLOCK_STEPS = 8
# `graphed_recurrence` keeps at most this many graphs (the least recently replayed dropped first).
GRAPH_CACHE_SIZE = 1024


class ClipLimits(NamedTuple):
    """The cell and projection clips as the Triton kernels read them (`clip_limits`)."""

    cell: torch.Tensor | None
    projection: torch.Tensor | None


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


def supports_graphed_recurrence(request: KernelRequest) -> bool:
    """The graphed recurrence's capability: the fused recurrence's, while no CUDA graph is being captured on the
    current stream (a user capturing the model into a graph of their own gets the fused recurrence)."""
    return supports_fused_recurrence(request) and not (
        torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
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
    hidden, cell = (tensor.contiguous().clone() for tensor in initial_state)
    projection_dim = hidden.shape[1]
    limits = clip_limits(cell_clip, projection_clip, inputs.dtype, inputs.device)
    if not batch.packed:
        outputs = inputs.new_empty(*inputs.shape[:2], projection_dim)
        running = batch.mask.squeeze(-1).to(torch.int8).contiguous()  # (steps, batch_size); the mask is a transpose
        fused_padded_steps(inputs, running, hidden, cell, outputs, linears, limits)
        return outputs, (hidden, cell)
    gate_inputs = linears.input_to_gates(inputs)
    outputs = gate_inputs.new_empty(gate_inputs.shape[0], projection_dim)
    position = 0
    for active in batch.batch_sizes:
        rows = slice(position, position + active)
        fused_step(gate_inputs[rows], outputs[rows], None, hidden, cell, linears, limits)
        position += active
    return outputs, (hidden, cell)


def clip_limits(
    cell_clip: float | None, projection_clip: float | None, dtype: torch.dtype, device: torch.device
) -> ClipLimits:
    """The clips as the kernels read them: one-element tensors of their compute dtype (float64 for float64 tensors,
    float32 otherwise, as torch's clamp converts a Python bound), or `None` for no clip. Tensors, because Triton
    passes a Python float as a float32 scalar, which would round a float64 model's clip; filled on the device, so
    that a graph's capture records them."""
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    return ClipLimits(
        *(None if clip is None else torch.full((1,), clip, dtype=compute, device=device)
          for clip in (cell_clip, projection_clip))
    )  # fmt: skip


def fused_padded_steps(
    inputs: torch.Tensor, running: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor, outputs: torch.Tensor,
    linears: LstmLinears, limits: ClipLimits,
) -> None:
    """The fused recurrence over a padded batch, in place: `inputs` `(steps, batch_size, in_features)`, `running`
    `(steps, batch_size)` int8 (0 where a row has no token), the state `hidden` `(batch_size, projection_dim)` and
    `cell` `(batch_size, lstm_dim)` updated to the final state, `outputs` `(steps, batch_size, projection_dim)`
    written (zero where a row has no token). The input-to-gate products run on blocks of `GATE_BLOCK_STEPS` steps
    (memory bounded by the block, not the batch's length). No host synchronisation and no allocation outside
    torch's allocator: what `graphed_recurrence` captures."""
    for start in range(0, inputs.shape[0], GATE_BLOCK_STEPS):
        block = slice(start, start + GATE_BLOCK_STEPS)
        gate_inputs = linears.input_to_gates(inputs[block])
        for step_gate_inputs, step_outputs, step_running in zip(gate_inputs, outputs[block], running[block]):
            fused_step(step_gate_inputs, step_outputs, step_running, hidden, cell, linears, limits)


def fused_step(
    gate_inputs: torch.Tensor, outputs: torch.Tensor, running: torch.Tensor | None, hidden: torch.Tensor,
    cell: torch.Tensor, linears: LstmLinears, limits: ClipLimits,
) -> None:
    """One step of the fused recurrence for the first `rows = gate_inputs.shape[0]` rows of the state: the recurrent
    product, one kernel for the gates, the cell update and clip (the first `rows` rows of `cell` updated in place),
    the projection, and one kernel for the projection clip, the hidden state's rows and `outputs` `(rows,
    projection_dim)`. With `running` (`(rows,)` int8), a row where it is 0 keeps its state and outputs zero. `limits`:
    `clip_limits`."""
    kernels, compute = compiled_kernels(gate_inputs.dtype)
    rows, (lstm_dim, projection_dim) = gate_inputs.shape[0], (cell.shape[1], hidden.shape[1])
    if rows == 0:
        return
    masked = running is not None
    recurrent = linears.hidden_to_gates(hidden[:rows])
    cell_output = torch.empty_like(cell[:rows])
    kernels.cell[(math.ceil(rows * lstm_dim / BLOCK),)](
        gate_inputs.contiguous(), recurrent.contiguous(), cell, cell_output, running, rows, lstm_dim,
        limits.cell, CLIP=limits.cell is not None, MASKED=masked, COMPUTE=compute, BLOCK=BLOCK,
    )  # fmt: skip
    projected = cell_output if linears.projection is None else linears.projection(cell_output)
    kernels.output[(math.ceil(rows * projection_dim / BLOCK),)](
        projected.contiguous(), hidden, outputs, running, rows, projection_dim,
        limits.projection, CLIP=limits.projection is not None, MASKED=masked, COMPUTE=compute, BLOCK=BLOCK,
    )  # fmt: skip


class CudaGraphs:
    """What `graphed_recurrence` asks of CUDA: capture a body into a graph, and order its calls across streams."""

    streams: dict[torch.device, torch.cuda.Stream] = {}

    @classmethod
    def capture(cls, body: Callable[[], None], device: torch.device, pool: tuple) -> Callable[[], None]:
        """`body` (no host synchronisation) captured into a CUDA graph whose temporaries come from `pool`, after one
        run on the device's side stream (which compiles Triton's kernels and readies cuBLAS); returns the graph's
        replay. One side stream per device for every capture: cuBLAS keeps a workspace per stream (32 MiB on a
        Hopper GPU), so a new stream per capture took up to 1 GiB more for a process's first graphs.

        Captured with `CUDAGraph.capture_begin` and `capture_end`, as `torch.cuda.graph` does, but without what that
        context adds before each capture: a synchronisation of the whole device and the release of torch's cached
        device and pinned host memory (`torch.cuda.empty_cache`), which would stall every stream and send the
        process's next allocations (the user's included) back to the driver, at each of the several captures a
        batch of new lengths can bring."""
        with torch.cuda.device(device):
            if device not in cls.streams:
                cls.streams[device] = torch.cuda.Stream(device)
            stream, current = cls.streams[device], torch.cuda.current_stream(device)
            stream.wait_stream(current)
            with torch.cuda.stream(stream):
                body()
            current.wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            # On the device's own side stream (torch's default capture stream is made on whichever device is current
            # at its first use); "thread_local": another thread's CUDA calls (a data loader's) do not break it.
            with torch.cuda.stream(stream):
                graph.capture_begin(pool=pool, capture_error_mode="thread_local")
                try:
                    body()
                finally:
                    graph.capture_end()

        def replay() -> None:
            with torch.cuda.device(device):
                graph.replay()

        return replay

    @staticmethod
    def pool(device: torch.device) -> tuple:
        """A new memory pool for graphs (`torch.cuda.graph_pool_handle`)."""
        with torch.cuda.device(device):
            return torch.cuda.graph_pool_handle()

    @staticmethod
    def after(event: object | None, device: torch.device) -> object:
        """Makes the current stream wait for `event` (the previous call's end, if any); returns a new event for this
        call's end, to be recorded with `end`."""
        if event is not None:
            torch.cuda.current_stream(device).wait_event(event)
        return torch.cuda.Event()

    @staticmethod
    def end(event: object, device: torch.device) -> None:
        """Records `event` on the current stream: this call's end, which the next call waits for."""
        event.record(torch.cuda.current_stream(device))


class RecurrenceGraphs:
    """The CUDA graphs of `graphed_recurrence`, one per kind of call (`graph_key`), and the memory they share.

    Every graph of a device and dtype reads and writes one set of static buffers (inputs, running mask, state,
    outputs: views of flat tensors sized for the largest call so far) and takes its temporaries from one memory pool
    per device (a new one whenever none of the device's graphs is left). A call copies its inputs in, replays, and
    copies its results out before any other call starts (`lock`; across streams, each call's stream waits for the
    previous call's end), so graphs sharing memory never see each other's data. Growing the buffers drops the graphs
    captured on the smaller ones. They stay allocated for the process (a model deleted or moved to another dtype
    leaves its device's buffers, sized for its largest call): `RecurrenceGraphs.clear()` frees them.
    `device_graphs` is what talks to CUDA (tests put an eager stand-in there to run the rest on a CPU).
    """

    device_graphs = CudaGraphs
    lock = threading.Lock()
    graphs: OrderedDict[tuple, Callable[[], None]] = OrderedDict()
    buffers: dict[tuple, dict[str, torch.Tensor]] = {}
    pools: dict[torch.device, tuple] = {}
    last_call: dict[torch.device, object] = {}

    @classmethod
    def static(cls, device: torch.device, dtype: torch.dtype, shapes: dict[str, tuple]) -> dict[str, torch.Tensor]:
        """Views of the device's and dtype's static buffers in `shapes` ("running" int8, the rest `dtype`), the
        buffers grown (zeroed, and the graphs captured on them dropped) where one is too small: at least twofold, so
        that batches of rising lengths drop the graphs a few times, not at each new longest batch (a graph dropped
        is captured again on its next call)."""
        buffers = cls.buffers.setdefault((device, dtype), {})
        if any(name not in buffers or buffers[name].numel() < math.prod(shape) for name, shape in shapes.items()):
            for key in [key for key in cls.graphs if key[:2] == (device, dtype)]:
                del cls.graphs[key]
            for name, shape in shapes.items():
                size = buffers[name].numel() if name in buffers else 0
                size = max(math.prod(shape), 2 * size if size < math.prod(shape) else size)
                with torch.inference_mode(False):  # writable by later calls made outside inference mode
                    buffers[name] = torch.zeros(size, dtype=torch.int8 if name == "running" else dtype, device=device)
        return {name: buffers[name][: math.prod(shape)].view(shape) for name, shape in shapes.items()}

    @classmethod
    def graph(cls, key: tuple, body: Callable[[], None], device: torch.device) -> Callable[[], None]:
        """The replay of the graph of `key`, captured from `body` now if there is none (the capture's warm-up run
        writes the static buffers: fill them after)."""
        if key not in cls.graphs:
            if not any(kept[0] == device for kept in cls.graphs):
                # torch frees a pool with the last graph captured into it: its handle takes no more captures (an
                # internal assertion of torch's allocator, seen on an H100 after a growth dropped every graph)
                cls.pools[device] = cls.device_graphs.pool(device)
            cls.graphs[key] = cls.device_graphs.capture(body, device, cls.pools[device])
            while len(cls.graphs) > GRAPH_CACHE_SIZE:
                cls.graphs.popitem(last=False)
        cls.graphs.move_to_end(key)
        return cls.graphs[key]

    @classmethod
    def clear(cls) -> None:
        """Drops every graph, buffer, pool and kept layout (their memory returns to torch's allocator)."""
        block_layout.cache_clear()
        with cls.lock:
            cls.graphs.clear()
            cls.buffers.clear()
            cls.pools.clear()
            cls.last_call.clear()


def graph_rows(rows: int) -> int:
    """The rows a graph of `graphed_recurrence` computes for a block whose first step runs `rows` rows: all of them up
    to 8, else rounded up to a multiple of 8 (up to 64) or of 32, so that blocks of other batches take the same graph
    while the rows computed beyond the running ones stay under 8 or 32."""
    if rows <= 8:
        return rows
    multiple = 8 if rows <= 64 else 32
    return math.ceil(rows / multiple) * multiple


def graph_key(
    inputs: torch.Tensor, capacity: int, linears: LstmLinears, cell_clip: float | None, projection_clip: float | None
) -> tuple:
    """What every graph of a `graphed_recurrence` call depends on, before its run of blocks (`block_runs`: the first
    block, how many, the rows it computes) is appended: device and dtype first (`RecurrenceGraphs.static`), the row
    capacity of the static buffers' blocks and the input width, the clips, and where and how each weight lies in
    memory (a graph reads the weights at the addresses it was captured with, so it computes with their current
    values; a weight replaced or moved is another key)."""
    weights = tuple(
        None if linear is None else tuple((p.data_ptr(), p.shape, p.stride()) for p in linear.parameters())
        for linear in linears
    )
    return inputs.device, inputs.dtype, capacity, inputs.shape[-1], cell_clip, projection_clip, weights


def block_runs(block_rows: list[int]) -> list[tuple[int, int, int]]:
    """Consecutive blocks computing the same rows, as `(first_block, blocks, rows)`: one graph each."""
    runs: list[tuple[int, int, int]] = []
    for block, rows in enumerate(block_rows):
        if runs and runs[-1][2] == rows:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1, rows)
        else:
            runs.append((block, 1, rows))
    return runs


@functools.lru_cache(maxsize=256)
def block_layout(
    running_rows: tuple[int, ...], batch_size: int, device: torch.device
) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """Where `graphed_recurrence` puts the tokens of a batch whose step `t` runs its first `running_rows[t]` rows:
    the rows each block computes (`graph_rows` of the rows running at its first step), each token's row in the static
    buffers (`(tokens,)` long, on `device`, in the order of the recurrence's inputs: step by step), and a running
    flag of 1 for each. Kept for the last batches' shapes, so the four cells of a call (and batches of the same
    shape) copy nothing from the host; a new shape's copy does not wait for the device's queue either (`to_device`;
    a blocking copy waited for the token layer)."""
    capacity, steps = graph_rows(batch_size), len(running_rows)
    rows = torch.tensor(running_rows, dtype=torch.long)
    block_rows = [graph_rows(int(rows[start])) for start in range(0, steps, GATE_BLOCK_STEPS)]
    token_steps = torch.repeat_interleave(torch.arange(steps), rows)
    rows_of_step = torch.tensor(block_rows, dtype=torch.long).repeat_interleave(GATE_BLOCK_STEPS)[token_steps]
    step_starts = torch.tensor(step_positions(running_rows), dtype=torch.long)
    row_in_step = torch.arange(len(token_steps)) - step_starts[token_steps]
    block, step_in_block = token_steps // GATE_BLOCK_STEPS, token_steps % GATE_BLOCK_STEPS
    places = block * GATE_BLOCK_STEPS * capacity + step_in_block * rows_of_step + row_in_step
    with torch.inference_mode(False):  # usable by calls made outside inference mode too
        places = to_device(places, device)
        running = torch.ones(len(places), dtype=torch.int8, device=device)
    return block_rows, places, running


def graphed_recurrence(
    inputs: torch.Tensor, batch: SequenceBatch, initial_state: LstmState, linears: LstmLinears,
    cell_clip: float | None, projection_clip: float | None,
) -> tuple[torch.Tensor, LstmState]:
    """`reference_elmo.lstm_recurrence` (same arguments and results): the fused recurrence in blocks of
    `GATE_BLOCK_STEPS` steps, each block on the rows running at its first step (`graph_rows` of them; a padded batch:
    every row) with the mask keeping a finished row's state, replayed from CUDA graphs (`RecurrenceGraphs`), one per
    run of blocks computing the same rows, captured on the first call of its kind. So a call launches a few graphs
    (and a few copies) instead of four kernels a step and pays no Python per step, while a batch of sentences of
    mixed lengths computes about the rows a packed batch does, not all its rows at every step.

    Layout: block `b` of the static buffers holds `GATE_BLOCK_STEPS` steps of `capacity` rows (`graph_rows` of the
    batch size), of which its graph uses the first `rows` of each step, contiguous; a token `(t, j)` (step `t`, row
    `j` in running order) lies at row `j` of step `t % GATE_BLOCK_STEPS` of block `t // GATE_BLOCK_STEPS`."""
    batch_size, (hidden, cell) = batch.batch_size, initial_state
    width, projection_dim = inputs.shape[-1], hidden.shape[1]
    blocks, capacity = math.ceil(batch.steps / GATE_BLOCK_STEPS), graph_rows(batch_size)
    if batch.packed:
        block_rows, places, running = block_layout(tuple(batch.batch_sizes), batch_size, inputs.device)
    else:
        block_rows, places, _ = block_layout((batch_size,) * batch.steps, batch_size, inputs.device)
        running = batch.mask.reshape(-1).to(torch.int8)
    shapes = dict(
        inputs=(blocks, GATE_BLOCK_STEPS * capacity, width), running=(blocks, GATE_BLOCK_STEPS * capacity),
        hidden=(capacity, projection_dim), cell=(capacity, cell.shape[1]),
        outputs=(blocks, GATE_BLOCK_STEPS * capacity, projection_dim),
    )  # fmt: skip
    device_graphs = RecurrenceGraphs.device_graphs
    with RecurrenceGraphs.lock:
        static = RecurrenceGraphs.static(inputs.device, inputs.dtype, shapes)
        event = device_graphs.after(RecurrenceGraphs.last_call.get(inputs.device), inputs.device)

        def body(first_block: int, count: int, rows: int) -> None:
            limits = clip_limits(cell_clip, projection_clip, inputs.dtype, inputs.device)
            for block in range(first_block, first_block + count):
                steps = GATE_BLOCK_STEPS * rows
                fused_padded_steps(
                    static["inputs"][block, :steps].view(GATE_BLOCK_STEPS, rows, width),
                    static["running"][block, :steps].view(GATE_BLOCK_STEPS, rows), static["hidden"][:rows],
                    static["cell"][:rows], static["outputs"][block, :steps].view(GATE_BLOCK_STEPS, rows, -1),
                    linears, limits,
                )  # fmt: skip

        # Every graph of the call first (a capture's warm-up run writes the static buffers), then the call's data.
        key = graph_key(inputs, capacity, linears, cell_clip, projection_clip)
        replays = [
            RecurrenceGraphs.graph((*key, *run), functools.partial(body, *run), inputs.device)
            for run in block_runs(block_rows)
        ]
        static["inputs"].view(-1, width).index_copy_(0, places, inputs.reshape(-1, width))
        static["running"].zero_()
        static["running"].view(-1).index_copy_(0, places, running)
        static["hidden"][:batch_size].copy_(hidden)
        static["cell"][:batch_size].copy_(cell)
        for replay in replays:
            replay()
        outputs = static["outputs"].view(-1, projection_dim).index_select(0, places)
        if not batch.packed:
            outputs = outputs.view(batch.steps, batch_size, projection_dim)
        final_state = static["hidden"][:batch_size].clone(), static["cell"][:batch_size].clone()
        device_graphs.end(event, inputs.device)
        RecurrenceGraphs.last_call[inputs.device] = event
    return outputs, final_state


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
    limits = clip_limits(cell_clip, projection_clip, gate_inputs.dtype, gate_inputs.device)
    clipped_cells = None
    if cell_clip is not None:
        clipped_cells = torch.empty(num_positions, lstm_dim, dtype=torch.int8, device=gate_inputs.device)
    for start, active in zip(step_positions(batch_sizes), batch_sizes):
        rows = slice(start, start + active)
        recurrent = functional.linear(hidden[:active], hidden_to_gates, bias)
        kernels.training_cell[(math.ceil(active * lstm_dim / BLOCK),)](
            gate_inputs[rows], recurrent, cell, unprojected[rows], cell_factors[rows], output_factor[rows],
            cell_from_output[rows], forget_gate[rows], None if clipped_cells is None else clipped_cells[rows], active,
            lstm_dim, limits.cell, CLIP=limits.cell is not None, COMPUTE=compute, BLOCK=BLOCK,
        )  # fmt: skip
        torch.mm(unprojected[rows], projection.t(), out=unclipped[rows])
        kernels.output[(math.ceil(active * projection_dim / BLOCK),)](
            unclipped[rows], hidden, outputs[rows], None, active, projection_dim, limits.projection,
            CLIP=limits.projection is not None, MASKED=False, COMPUTE=compute, BLOCK=BLOCK,
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


def char_cnn_as_products(convolutions: tuple[torch.nn.Conv1d, ...], activation: Layer) -> Layer:
    """`ElmoCharCnn`'s computation with each convolution as one matrix product over every window of every word
    (`cpu_kernels.window_products_max`): `(num_words, max_characters, char_embedding_dim)` -> `(num_words,
    num_filters)`. Every window is multiplied: skipping those inside each word's final run of one repeated id, as the
    CPU kernel does, needs their count on the host, a synchronisation per chunk of words."""

    def char_cnn(char_embeddings: torch.Tensor) -> torch.Tensor:
        pooled = [
            window_products_max(
                char_embeddings,
                conv.kernel_size[0],
                functools.partial(functional.linear, weight=conv.weight.flatten(1), bias=conv.bias),
            )
            for conv in convolutions
        ]
        return activation(torch.cat(pooled, dim=-1))

    return char_cnn


def token_layer_without_tf32(word_ids: torch.Tensor, layers: TokenLayers, chunk_size: int | None) -> torch.Tensor:
    """`reference_elmo.token_layer` (same arguments and result) with the convolutions as matrix products
    (`char_cnn_as_products`), which use TF32 only where the user lets matrix products use it."""
    char_cnn = char_cnn_as_products(layers.convolutions, layers.activation)
    return token_layer(word_ids, layers._replace(char_cnn=char_cnn), chunk_size)


__all__ = [
    "RecurrenceGraphs",
    "TRITON_STEPS",
    "char_cnn_as_products",
    "fused_recurrence",
    "fused_training_recurrence",
    "graphed_recurrence",
    "supports_fused_recurrence",
    "supports_fused_training",
    "supports_graphed_recurrence",
    "supports_token_layer_without_tf32",
    "token_layer_without_tf32",
    "triton_available",
]
