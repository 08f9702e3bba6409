"""The GPU implementations of `gpu_kernels.py` on a CPU: taken by the dispatcher only for the calls they support, a
whole model through them gives the reference's results (Triton's kernels in its interpreter), no global flag
changes, and the model and its saved folder's code work without Triton. Their agreement with the reference on random
batches is the contract test's (`test_implementations.py`)."""

import contextlib
import os
import subprocess
import sys
import threading
from unittest import mock

import pytest
import torch
from conftest import MIXED_SENTENCES, EagerGraphs, encode, random_batch, random_linears, tiny_config
from torch import nn
from transformers.dynamic_module_utils import get_imports

from elmo_hf import ElmoModel, gpu_kernels
from elmo_hf.gpu_kernels import RecurrenceGraphs, graphed_recurrence
from elmo_hf.kernels_elmo import (
    DIRECTIONS_IMPLEMENTATIONS,
    RECURRENCE_IMPLEMENTATIONS,
    TOKEN_LAYER_IMPLEMENTATIONS,
    Implementation,
)
from elmo_hf.reference_elmo import KernelRequest, LstmLinears, lstm_recurrence

# Triton reads TRITON_INTERPRET as it compiles a kernel file, imported on the first call of the fused recurrence.
os.environ["TRITON_INTERPRET"] = "1"
CUDA, CPU = torch.device("cuda"), torch.device("cpu")


def chosen(table: dict[str, Implementation], *request) -> str:
    """The first entry of `table` supporting `KernelRequest(*request)`: the dispatcher's choice for stock layers."""
    return next(name for name, implementation in table.items() if implementation.supports(KernelRequest(*request)))


def test_the_dispatcher_takes_the_gpu_kernels_only_for_the_calls_they_support():
    recurrence, token_layer = RECURRENCE_IMPLEMENTATIONS, TOKEN_LAYER_IMPLEMENTATIONS
    for packed in (True, False):
        for dtype in (torch.float32, torch.bfloat16, torch.float64):
            assert chosen(recurrence, dtype, CUDA, False, packed, False) == "cuda graphs"
        # Training on a GPU: the training kernel with Triton steps on packed batches in float32 and float64.
        for dtype in (torch.float32, torch.float64):
            expected = "triton training" if packed else "reference"
            assert chosen(recurrence, dtype, CUDA, True, packed, False) == expected
        assert chosen(recurrence, torch.bfloat16, CUDA, True, packed, False) == "reference"
    assert chosen(recurrence, torch.float32, CUDA, False, False, True) == "scan"
    assert chosen(recurrence, torch.float32, CPU, False, True, False) == "cpu"
    for recording in (False, True):
        assert chosen(token_layer, torch.float32, CUDA, recording, True, False) == "without-tf32"
    assert chosen(token_layer, torch.bfloat16, CUDA, False, True, False) == "reference"  # no TF32 to avoid
    assert chosen(token_layer, torch.float64, CUDA, False, True, False) == "reference"
    assert chosen(token_layer, torch.float32, CUDA, False, True, True) == "reference"  # traced: the modules' layers


def test_a_call_captured_into_a_users_graph_takes_the_fused_recurrence(monkeypatch):
    """No graph is captured inside a capture: while the current stream captures (the user graphing the model), the
    fused recurrence's kernels are recorded into the user's graph instead."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for packed in (True, False):
        assert chosen(RECURRENCE_IMPLEMENTATIONS, torch.float32, CUDA, False, packed, False) == "triton"


def graphed_like_the_reference(linears: LstmLinears, lengths: list[int], packed: bool) -> None:
    """`graphed_recurrence` on a random batch of rows of `lengths` (random state, both clips) gives the reference's
    outputs and final state."""
    inputs, batch, state = random_batch(torch.float64, packed, with_state=True, lengths=lengths)
    actual = graphed_recurrence(inputs, batch, state, linears, 0.6, 0.4)
    expected = lstm_recurrence(inputs, batch, state, linears, 0.6, 0.4)
    for value, reference in zip((actual[0], *actual[1]), (expected[0], *expected[1]), strict=True):
        torch.testing.assert_close(value, reference, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_a_graph_is_captured_once_per_kind_of_call_and_computes_with_the_current_weights(packed):
    """One graph per run of blocks of 8 steps on the same rows, their place in the buffers and the weights' place in
    memory: a second call of the same kind replays it (with weights changed in place in between, their new values), a
    longer call grows the shared buffers and drops the graphs made on the smaller ones, a replaced weight or another
    batch size is another graph. Buffers made under `inference_mode` serve later calls made outside it."""
    linears = random_linears(torch.float64)
    with torch.inference_mode():
        graphed_like_the_reference(linears, [6, 3, 2, 5], packed)  # one block of 4 rows
    with torch.no_grad():
        graphed_like_the_reference(linears, [7, 7, 1, 2], packed)
        assert len(EagerGraphs.captures) == 1
        # 2 blocks: larger buffers, the first graph dropped; packed, the second block runs 2 rows (another graph)
        graphed_like_the_reference(linears, [9, 9, 4, 1], packed)
        assert (len(EagerGraphs.captures), len(RecurrenceGraphs.graphs)) == ((3, 2) if packed else (2, 1))
        graphed_like_the_reference(linears, [3, 1, 2, 2], packed)  # one block of 4 rows, in the larger buffers
        assert (len(EagerGraphs.captures), len(RecurrenceGraphs.graphs)) == (3, 2)
        linears.hidden_to_gates.weight.mul_(0.5)
        linears.projection.weight.data.mul_(1.5)
        graphed_like_the_reference(linears, [4, 4, 4, 4], packed)
        assert len(EagerGraphs.captures) == 3
        linears.projection.weight = nn.Parameter(linears.projection.weight * 0.9)
        graphed_like_the_reference(linears, [4, 4, 4, 4], packed)
        graphed_like_the_reference(linears, [4, 4, 4], packed)
        assert len(EagerGraphs.captures) == 5
    # one memory pool for the graphs of the device, a new one after the growth that dropped all of them (torch frees
    # a pool with its last graph: the stand-in fails a capture into a freed pool, as torch's allocator does)
    assert len(set(EagerGraphs.captures)) == 2 and EagerGraphs.captures[1] == EagerGraphs.captures[-1]


def test_the_buffers_grow_at_least_twofold_so_rising_lengths_drop_the_graphs_a_few_times():
    """Batches of 1 to 5 blocks of 8 steps, in rising order: the buffers grow (and the graphs are dropped) for 2, 3
    (to 4 blocks' room) and 5 blocks only; the graphs of 1 to 4 blocks made after the last growth but one are kept."""
    linears = random_linears(torch.float64)
    with torch.no_grad():
        for blocks in range(1, 6):
            graphed_like_the_reference(linears, [8 * blocks] * 4, packed=True)
            if blocks == 4:
                assert len(RecurrenceGraphs.graphs) == 2  # 3 and 4 blocks: captured in the same buffers
    inputs = RecurrenceGraphs.buffers[(CPU, torch.float64)]["inputs"]
    assert inputs.numel() == 8 * 8 * 4 * linears.input_to_gates.in_features  # 5 blocks needed, 8 made: 4 doubled
    assert len(EagerGraphs.captures) == 5 and len(RecurrenceGraphs.graphs) == 1


def test_a_capture_runs_its_body_once_then_records_it_without_emptying_torchs_caches(monkeypatch):
    """`CudaGraphs.capture` with CUDA's calls stood in (CI has no GPU; torch's own `CUDAGraph` signatures checked by
    autospec): the body runs once on the device's side stream, then between `capture_begin` (the pool, errors
    thread-local) and `capture_end` on that stream; no device synchronisation and no release of torch's caches, which
    `torch.cuda.graph` would do before each capture; the replay replays the graph; one side stream for two captures."""
    events: list = []
    current = [None]

    class Stream:
        def __init__(self, device=None):
            events.append("new stream")

        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def on_stream(stream):
        previous, current[0] = current[0], stream
        yield
        current[0] = previous

    def refused(name):
        def call(*args, **kwargs):
            raise AssertionError(f"{name} called")

        return call

    graph = mock.create_autospec(torch.cuda.CUDAGraph, instance=True)
    graph.capture_begin.side_effect = lambda **kwargs: events.append(("begin", current[0], kwargs))
    graph.capture_end.side_effect = lambda: events.append(("end", current[0]))
    graph.replay.side_effect = lambda: events.append("replay")
    monkeypatch.setattr(gpu_kernels.CudaGraphs, "streams", {})
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    the_current = Stream()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: the_current)
    monkeypatch.setattr(torch.cuda, "stream", on_stream)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: graph)
    for name in ("synchronize", "empty_cache", "graph"):
        monkeypatch.setattr(torch.cuda, name, refused(f"torch.cuda.{name}"))
    device, pool = torch.device("cuda", 0), ("pool", 0)
    replays = [
        gpu_kernels.CudaGraphs.capture(lambda: events.append(("body", current[0])), device, pool) for _ in range(2)
    ]
    side = gpu_kernels.CudaGraphs.streams[device]
    once = [("body", side), ("begin", side, {"pool": pool, "capture_error_mode": "thread_local"}), ("body", side),
            ("end", side)]  # fmt: skip
    assert events == ["new stream", "new stream", *once, *once]  # the current stream's stand-in, the side stream
    events.clear()
    replays[0]()
    assert events == ["replay"]


def test_each_block_of_a_packed_batch_computes_the_rows_running_at_its_first_step():
    """A packed batch of one long and three short sentences: its first block computes 4 rows, the next two (one
    graph) the one row still running; a padded batch computes every row in every block (one graph)."""
    linears = random_linears(torch.float64)
    for packed, runs in ((True, [(4, 0, 1, 4), (4, 1, 2, 1)]), (False, [(4, 0, 3, 4)])):
        RecurrenceGraphs.clear()
        with torch.no_grad():
            graphed_like_the_reference(linears, [20, 3, 2, 1], packed)
        assert sorted((key[2], *key[-3:]) for key in RecurrenceGraphs.graphs) == runs  # capacity, first, blocks, rows
    rows = {rows: gpu_kernels.graph_rows(rows) for rows in (1, 5, 8, 9, 16, 63, 64, 65, 96, 200, 256, 257)}
    assert rows == {1: 1, 5: 5, 8: 8, 9: 16, 16: 16, 63: 64, 64: 64, 65: 96, 96: 96, 200: 224, 256: 256, 257: 288}


def test_threads_calling_the_graphed_recurrence_at_once_each_get_their_own_results():
    """The graphs share their buffers: calls from several threads at once (batches of other sizes and lengths, so
    other graphs and growing buffers) each get the reference's results for their own batch."""
    linears = random_linears(torch.float64)
    failures = []

    def calls(batches: list[list[int]]) -> None:
        try:
            with torch.no_grad():
                for lengths in batches * 5:
                    graphed_like_the_reference(linears, lengths, packed=len(lengths) % 2 == 0)
        except Exception as error:  # a wrong result, or a buffer of another call's shape
            failures.append(error)

    threads = [
        threading.Thread(target=calls, args=(batches,))
        for batches in ([[3, 2, 1], [9, 9, 2]], [[5, 4], [2, 1, 1, 1]], [[12, 1, 1, 1, 1], [4]])
    ]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads switch often, as they would around a GPU's waits
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not failures and len(EagerGraphs.captures) >= 3


def test_the_least_recently_replayed_graph_is_dropped_beyond_the_cache_size(monkeypatch):
    monkeypatch.setattr(gpu_kernels, "GRAPH_CACHE_SIZE", 2)
    linears = random_linears(torch.float64)
    with torch.no_grad():
        for lengths in ([2, 1, 1, 1], [2, 1, 1], [2, 1, 1, 1], [2, 1]):  # batch sizes 4, 3, 4 (replayed), 2
            graphed_like_the_reference(linears, lengths, packed=True)
    assert len(EagerGraphs.captures) == 3
    assert [key[2] for key in RecurrenceGraphs.graphs] == [4, 2]  # the batch of 3 was the least recently replayed


def flags() -> tuple:
    """The global switches a library could be tempted to flip for exactness or speed."""
    return (
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.enabled,
        torch.backends.cudnn.deterministic,
    )


@pytest.mark.parametrize("recurrence", ["cuda graphs", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_model_through_the_gpu_implementations_gives_the_reference_results(
    dtype, recurrence, tiny_model, tokenizer, monkeypatch
):
    """The GPU entries, made to accept CPU calls, run a whole model (the recurrence's Triton kernels in the
    interpreter, graphs stood in by eager runs): every layer as the reference modules compute it, and no global flag
    changed."""
    calls = []
    for table, name in ((RECURRENCE_IMPLEMENTATIONS, recurrence), (TOKEN_LAYER_IMPLEMENTATIONS, "without-tf32")):
        function = table[name].function
        recorded = Implementation(lambda *args, function=function: calls.append(1) or function(*args), lambda _: True)
        monkeypatch.setitem(table, "cpu", recorded)
    # A layer's cells in turn, as on a GPU: Triton's interpreter runs one kernel at a time, not one per direction.
    at_once = DIRECTIONS_IMPLEMENTATIONS["cpu at once"]
    monkeypatch.setitem(DIRECTIONS_IMPLEMENTATIONS, "cpu at once", Implementation(at_once.function, lambda _: False))
    model = ElmoModel(tiny_config()).to(dtype).eval()
    model.load_state_dict(tiny_model.state_dict())
    inputs = encode(tokenizer, MIXED_SENTENCES)
    before = flags()
    with torch.inference_mode():
        actual = model(**inputs, output_hidden_states=True).hidden_states
        assert len(calls) == 1 + 2 * model.config.num_layers  # the token layer, then every cell
        model.config.elmo_implementation = "eager"
        expected = model(**inputs, output_hidden_states=True).hidden_states
    assert flags() == before
    for layer, reference in zip(actual, expected, strict=True):
        torch.testing.assert_close(layer, reference, rtol=1e-6, atol=1e-6)


def test_the_model_and_its_saved_code_work_without_triton(tmp_path):
    """Where Triton is not installed (simulated: importing it fails), the model imports, runs, and never takes the
    fused recurrence; the kernel file says what is missing; the saved folder's code files require no Triton."""
    script = f"""
import sys
sys.modules["triton"] = None
import torch
from conftest import MIXED_SENTENCES, encode, tiny_config
from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.gpu_kernels import supports_fused_recurrence
from elmo_hf.reference_elmo import KernelRequest
model = ElmoModel(tiny_config()).eval()
with torch.inference_mode():
    model(**encode(ElmoTokenizer(), MIXED_SENTENCES))
assert not supports_fused_recurrence(KernelRequest(torch.float32, torch.device("cuda"), False, True, False))
from elmo_hf.triton_kernels import compiled
try:
    compiled()
except ImportError as error:
    print(error)
model.save_pretrained({str(tmp_path)!r})
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd="tests")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "the fused GPU recurrence needs Triton: `pip install triton`"
    code_files = sorted(tmp_path.glob("*.py"))
    assert {"gpu_kernels.py", "triton_kernels.py"} <= {path.name for path in code_files}
    assert not any("triton" in get_imports(path) for path in code_files)


def test_the_kernels_compile_for_an_h100(tmp_path):
    """Triton's compiler (not its interpreter) makes a cubin of every kernel for compute capability 9.0 (H100) in
    every dtype it is called with, masked (padded batches) or not, clipping or not: what the interpreter accepts but
    the compiler would refuse (Python lists in a kernel, say) fails here, without a GPU."""
    script = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from elmo_hf.triton_kernels import compiled
kernels = compiled()
scalars = {"rows": "i32", "lstm_dim": "i32", "projection_dim": "i32"}
masks = {"running", "clipped_cells", "clipped_outputs"}
clips = {"cell_clip", "projection_clip"}  # one-element tensors of the compute dtype
inference = (kernels.cell, kernels.output)
training = (kernels.training_cell, kernels.output, kernels.backward_output, kernels.backward_cell)
for pointer, compute in (("*fp32", kernels.float32), ("*bf16", kernels.float32), ("*fp64", kernels.float64)):
    for kernel in {*inference, *(training if pointer != "*bf16" else ())}:
        names = {p.name for p in kernel.params}
        for masked in (True, False):
            for clip in (True, False):
                # as gpu_kernels calls them: a mask pointer where masked or clipping (int8), else None, a constant
                used = {name for name in masks & names if (masked if name == "running" else clip)}
                constants = {"CLIP": clip, "MASKED": masked, "COMPUTE": compute, "BLOCK": 1024}
                constants = {name: value for name, value in constants.items() if name in names}
                constants |= {name: None for name in masks & names - used}
                constants |= {name: None for name in clips & names if not clip}
                limit = "*fp64" if pointer == "*fp64" else "*fp32"
                signature = {
                    p.name: "constexpr" if p.is_constexpr or p.name in constants else
                    "*i8" if p.name in masks else limit if p.name in clips else scalars.get(p.name, pointer)
                    for p in kernel.params
                }
                source = ASTSource(kernel, signature, constexprs=constants)
                assert triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["cubin"]
print("compiled")
"""
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    environment |= {"TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment)
    assert result.returncode == 0 and result.stdout.strip() == "compiled", result.stderr
