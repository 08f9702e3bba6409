"""The contract of `kernels_elmo.py`: every registered implementation of the recurrence, of the token layer and of
the schedule of a layer's two directions gives the reference's results on random inputs (float32 and float64 where
it supports them, bfloat16 where this CPU does; packed and padded; with and without a state; clips active; the
schedules bit for bit), and the dispatcher takes the reference wherever a kernel could compute something else or this
CPU cannot run it. GPU implementations run here on CPU tensors (Triton's kernels in its interpreter)."""

import os
import subprocess
import sys

import pytest
import torch
from conftest import MIXED_SENTENCES, encode, random_batch, random_linears, tiny_config
from torch import nn

from elmo_hf import ElmoModel, cpu_kernels
from elmo_hf.kernels_elmo import (
    DIRECTIONS_IMPLEMENTATIONS,
    RECURRENCE_IMPLEMENTATIONS,
    TOKEN_LAYER_IMPLEMENTATIONS,
    Implementation,
    choose_implementation,
)
from elmo_hf.modeling_elmo import ElmoCharacterEncoder, ElmoLstmCellWithProjection, ElmoLstmLayer
from elmo_hf.reference_elmo import KernelRequest, SequenceBatch, directions_in_turn, lstm_recurrence, token_layer

DTYPES = [torch.float32, torch.float64] + ([torch.bfloat16] if cpu_kernels.bfloat16_supported() else [])
CPU = torch.device("cpu")
# Triton reads TRITON_INTERPRET as it compiles a kernel file, imported on the first call of the fused recurrence.
os.environ["TRITON_INTERPRET"] = "1"


def assert_relatively_close(actual: torch.Tensor, expected: torch.Tensor):
    """Within 1e-6 of the reference relative to its largest value (float32 and float64: a product summed in another
    order differs in the last bits), 4e-2 in bfloat16 (5 of its rounding steps, over a recurrence)."""
    relative = 4e-2 if expected.dtype == torch.bfloat16 else 1e-6
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    difference = float((actual.detach().double() - expected.double()).abs().max())
    scale = float(expected.double().abs().max())
    assert difference <= relative * scale, f"differs by {difference:.3g}, the reference's largest value is {scale:.3g}"


def requests(dtype: torch.dtype, packed: bool) -> list[KernelRequest]:
    """Every kind of call with this dtype and layout: on CPU or CUDA, inference or training, eager or traced."""
    return [
        KernelRequest(dtype, device, recording, packed, traced)
        for device in (CPU, torch.device("cuda"))
        for recording in (False, True)
        for traced in (False, True)
    ]


def supported(implementation: Implementation, dtype: torch.dtype, packed: bool) -> KernelRequest | None:
    return next((request for request in requests(dtype, packed) if implementation.supports(request)), None)


@pytest.mark.parametrize("name", [name for name in RECURRENCE_IMPLEMENTATIONS if name != "reference"])
@pytest.mark.parametrize("layout", ["packed", "padded", "packed without final steps"])
@pytest.mark.parametrize("with_state", [True, False], ids=["state", "zero-state"])
def test_every_recurrence_gives_the_reference_results(name, layout, with_state):
    implementation = RECURRENCE_IMPLEMENTATIONS[name]
    packed = layout != "padded"
    runs = 0
    for dtype in DTYPES:
        request = supported(implementation, dtype, packed)
        if request is None:
            continue
        linears = random_linears(dtype)
        inputs, batch, state = random_batch(dtype, packed, with_state, final_steps=layout == "packed")
        with torch.no_grad():
            expected = lstm_recurrence(inputs, batch, state, linears, 0.6, 0.4)
            clipped = expected[0].abs() == 0.4
            assert clipped.any() and not clipped.all()  # the projection clip is active
        with torch.set_grad_enabled(request.recording):
            if request.recording:
                inputs = inputs.requires_grad_()
            actual = implementation.function(inputs, batch, state, linears, 0.6, 0.4)
        for value, reference in zip((actual[0], *actual[1]), (expected[0], *expected[1]), strict=True):
            assert_relatively_close(value, reference)
        runs += 1
    # Each implementation runs in float32 or float64 in at least one layout.
    assert runs or supported(implementation, torch.float32, not packed) or supported(
        implementation, torch.float64, not packed
    )


def layer_and_inputs(dtype: torch.dtype = torch.float32) -> tuple[ElmoLstmLayer, tuple, SequenceBatch, tuple]:
    """A biLSTM layer of odd sizes with clips active, and both directions' packed inputs and random states."""
    torch.manual_seed(0)
    layer = ElmoLstmLayer(tiny_config(projection_dim=5, lstm_dim=7, cell_clip=0.6, projection_clip=0.4), False)
    for parameter in layer.parameters():
        nn.init.normal_(parameter, std=0.7)
    layer.to(dtype).eval()
    lengths = torch.tensor([6, 6, 5, 4, 4, 3, 1])
    batch = SequenceBatch(lengths, 6, True)
    tokens = torch.randn(len(lengths), 6, 5, dtype=dtype) * (torch.arange(6) < lengths.unsqueeze(1)).unsqueeze(-1)
    states = tuple((torch.randn(7, 5, dtype=dtype), torch.randn(7, 7, dtype=dtype)) for _ in "ab")
    return layer, batch.directions(tokens), batch, states


@pytest.mark.parametrize("name", [name for name in DIRECTIONS_IMPLEMENTATIONS if name != "reference"])
@pytest.mark.parametrize("way", ["at once", "in turn"])
def test_every_directions_schedule_gives_the_reference_bits(name, way, monkeypatch):
    """Each way of running a layer's two directions gives what running them in turn gives, bit for bit (with two
    torch threads, at once runs each direction with one where one gives the bits of two)."""
    implementation = DIRECTIONS_IMPLEMENTATIONS[name]
    for dtype in DTYPES:
        if not implementation.supports(KernelRequest(dtype, CPU, False, True, False)):
            continue
        layer, inputs, batch, states = layer_and_inputs(dtype)
        cells = (layer.forward_cell, layer.backward_cell)
        with torch.no_grad():
            expected = directions_in_turn(cells, inputs, batch, states)
            monkeypatch.setattr(cpu_kernels.DirectionsAtOnce, "choices", {})
            threads = torch.get_num_threads()
            torch.set_num_threads(2)
            try:
                implementation.function(cells, inputs, batch, states)  # a kind's first call is at once
                for choice in cpu_kernels.DirectionsAtOnce.choices.values():
                    choice[0], choice[2] = way == "at once", 10**9
                actual = implementation.function(cells, inputs, batch, states)
            finally:
                torch.set_num_threads(threads)
        for (outputs, state), (expected_outputs, expected_state) in zip(actual, expected, strict=True):
            for value, reference in zip((outputs, *state), (expected_outputs, *expected_state), strict=True):
                assert torch.equal(value, reference)


# (where the final run of one character id starts, its id) of each word of the token layer tests: a row of one id,
# short words, long ones, a word filling all 50 characters but the last.
REPEAT_STARTS = [(0, 0), (1, 261), (3, 261), (3, 98), (5, 261), (8, 261), (9, 261), (17, 261), (30, 261), (48, 261),
                 (49, 261)]


def encoder_and_ids(dtype: torch.dtype, **config) -> tuple[ElmoCharacterEncoder, torch.Tensor]:
    torch.manual_seed(0)
    encoder = ElmoCharacterEncoder(tiny_config(**config)).to(dtype).eval()
    for parameter in encoder.parameters():
        nn.init.normal_(parameter, std=0.5)
    width = encoder.config.row_width
    word_ids = torch.randint(1, 262, (len(REPEAT_STARTS), width))
    # Characters ending in a run of one id from each start on (as the padding within words ends a word), the run of
    # the padding id 261 but for one of a byte id and a row of zeros (a padding word).
    for row, (start, run_id) in enumerate(REPEAT_STARTS):
        word_ids[row, start : encoder.config.max_characters_per_token] = run_id
        if start:
            word_ids[row, start - 1] = 1 + run_id % 261
    if config.get("word_embedding_dim"):
        word_ids[:, -1] = torch.randint(1, config["word_embedding_vocab_size"], (len(REPEAT_STARTS),))
    return encoder, word_ids


def token_layer_arguments(encoder: ElmoCharacterEncoder, word_ids: torch.Tensor, monkeypatch) -> tuple:
    """The arguments the encoder gives the token layer (recorded from its call of the reference)."""
    arguments = []
    reference = TOKEN_LAYER_IMPLEMENTATIONS["reference"]
    recorded = Implementation(lambda *args: arguments.append(args) or reference.function(*args), reference.supports)
    monkeypatch.setitem(TOKEN_LAYER_IMPLEMENTATIONS, "reference", recorded)
    encoder.config.elmo_implementation = "eager"
    with torch.no_grad():
        encoder(word_ids)
    encoder.config.elmo_implementation = "auto"
    monkeypatch.setitem(TOKEN_LAYER_IMPLEMENTATIONS, "reference", reference)
    return arguments[0]


@pytest.mark.parametrize("name", [name for name in TOKEN_LAYER_IMPLEMENTATIONS if name != "reference"])
@pytest.mark.parametrize(
    "config",
    [
        {},
        {"word_embedding_dim": 3, "word_embedding_vocab_size": 9, "boundary_input_ids": [[1] * 51, [2] * 51]},
        {"activation": "relu"},
    ],
    ids=["characters", "word-embeddings", "relu"],
)
def test_every_token_layer_gives_the_reference_results(name, config, monkeypatch):
    implementation = TOKEN_LAYER_IMPLEMENTATIONS[name]
    runs = 0
    for dtype in DTYPES:
        if supported(implementation, dtype, packed=True) is None:
            continue
        encoder, word_ids = encoder_and_ids(dtype, **config)
        word_ids, layers, chunk_size = token_layer_arguments(encoder, word_ids, monkeypatch)
        with torch.no_grad():
            expected = token_layer(word_ids, layers, chunk_size)
            for chunks in (chunk_size, 3, None):
                assert_relatively_close(implementation.function(word_ids, layers, chunks), expected)
        runs += 1
    assert runs


@pytest.mark.parametrize("name", [name for name in TOKEN_LAYER_IMPLEMENTATIONS if name != "reference"])
def test_every_token_layer_takes_zero_words(name, monkeypatch):
    implementation = TOKEN_LAYER_IMPLEMENTATIONS[name]
    encoder, word_ids = encoder_and_ids(torch.float32)
    word_ids, layers, chunk_size = token_layer_arguments(encoder, word_ids, monkeypatch)
    with torch.no_grad():
        expected = token_layer(word_ids[:0], layers, chunk_size)
        for chunks in (chunk_size, None):
            actual = implementation.function(word_ids[:0], layers, chunks)
            assert actual.shape == expected.shape == (0, encoder.config.projection_dim)
            assert actual.dtype == expected.dtype


def test_the_reference_token_layer_is_the_same_in_chunks_and_at_once(monkeypatch):
    encoder, word_ids = encoder_and_ids(torch.float64)
    word_ids, layers, _ = token_layer_arguments(encoder, word_ids, monkeypatch)
    with torch.no_grad():
        chunked, whole = token_layer(word_ids, layers, 2), token_layer(word_ids, layers, None)
    torch.testing.assert_close(chunked, whole, rtol=1e-12, atol=0)


def chosen(table: dict[str, Implementation], module: nn.Module, *tensors: torch.Tensor) -> str:
    """The name of the table's entry the dispatcher chooses for a packed batch."""
    function = choose_implementation(table, module, True, *tensors)
    return next(name for name, implementation in table.items() if implementation.function is function)


def test_the_dispatcher_takes_the_reference_wherever_a_kernel_could_differ():
    cell = ElmoLstmCellWithProjection(tiny_config()).eval()
    inputs = torch.randn(4, 8)
    with torch.no_grad():
        assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs) == "cpu"
    assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs) == "training"  # autograd records the weights
    cell.requires_grad_(False)
    assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs) == "cpu"
    assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs.requires_grad_()) == "training"
    cell.requires_grad_(True)
    with torch.no_grad():
        assert chosen(RECURRENCE_IMPLEMENTATIONS, cell.double(), inputs.double()) == "reference"  # no float64 kernel
        cell.float()
        cell.config.elmo_implementation = "eager"
        assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs) == "reference"
        cell.config.elmo_implementation = "auto"
        handle = cell.hidden_to_gates.register_forward_pre_hook(lambda *args: None)
        assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs) == "reference"
        handle.remove()

        class Wrapped(nn.Module):  # what PEFT and quantisation do: a layer of another class in the linear's place
            def __init__(self, linear: nn.Linear):
                super().__init__()
                self.base_layer = linear

            def forward(self, inputs):
                return self.base_layer(inputs)

        projection = cell.projection
        cell.projection = Wrapped(projection)
        assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs) == "reference"
        cell.projection = projection
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs) == "reference"
        assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs) == "cpu"
        encoder = ElmoCharacterEncoder(tiny_config()).eval()
        word_ids = torch.randint(1, 262, (3, 50))
        assert chosen(TOKEN_LAYER_IMPLEMENTATIONS, encoder, word_ids) == "cpu"
        handle = encoder.char_cnn.register_forward_hook(lambda *args: None)
        assert chosen(TOKEN_LAYER_IMPLEMENTATIONS, encoder, word_ids) == "reference"
        handle.remove()
    assert chosen(TOKEN_LAYER_IMPLEMENTATIONS, encoder, word_ids) == "reference"  # no training kernel for it


def test_a_layer_runs_its_directions_at_once_only_where_its_cells_run_the_cpu_kernel(monkeypatch):
    """The directions' schedule follows the cells' rules (hooks, wrapped layers, autograd, the config) and needs two
    cores for this process."""
    layer, (forward_inputs, backward_inputs), _, states = layer_and_inputs()
    tensors = (forward_inputs, backward_inputs, *states[0], *states[1])
    with torch.no_grad():
        assert chosen(DIRECTIONS_IMPLEMENTATIONS, layer, *tensors) == (
            "cpu at once" if cpu_kernels.available_cores() >= 2 else "reference"
        )
        monkeypatch.setattr(cpu_kernels, "available_cores", lambda: 2)
        assert chosen(DIRECTIONS_IMPLEMENTATIONS, layer, *tensors) == "cpu at once"
        handle = layer.backward_cell.projection.register_forward_hook(lambda *args: None)
        assert chosen(DIRECTIONS_IMPLEMENTATIONS, layer, *tensors) == "reference"
        handle.remove()
        layer.config.elmo_implementation = "eager"
        assert chosen(DIRECTIONS_IMPLEMENTATIONS, layer, *tensors) == "reference"
        layer.config.elmo_implementation = "auto"
        assert chosen(DIRECTIONS_IMPLEMENTATIONS, layer.double(), *(t.double() for t in tensors)) == "reference"
        layer.float()
        monkeypatch.setattr(cpu_kernels, "available_cores", lambda: 1)
        assert chosen(DIRECTIONS_IMPLEMENTATIONS, layer, *tensors) == "reference"
    monkeypatch.setattr(cpu_kernels, "available_cores", lambda: 2)
    assert chosen(DIRECTIONS_IMPLEMENTATIONS, layer, *tensors) == "reference"  # autograd records the weights


def test_padded_batches_run_the_reference_in_eager_mode():
    cell = ElmoLstmCellWithProjection(tiny_config()).eval()
    with torch.no_grad():
        assert choose_implementation(RECURRENCE_IMPLEMENTATIONS, cell, False, torch.randn(3, 2, 8)) is lstm_recurrence


def test_bfloat16_runs_the_kernels_only_where_the_cpu_computes_it(monkeypatch):
    cell = ElmoLstmCellWithProjection(tiny_config()).to(torch.bfloat16).eval()
    inputs = torch.randn(4, 8, dtype=torch.bfloat16)
    with torch.no_grad():
        native = cpu_kernels.bfloat16_supported()
        assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs) == ("cpu" if native else "reference")
        monkeypatch.setattr(cpu_kernels, "bfloat16_supported", lambda: False)
        assert chosen(RECURRENCE_IMPLEMENTATIONS, cell, inputs) == "reference"


def test_bfloat16_on_a_cpu_without_it_runs_the_reference_close_to_float32(tiny_model, tokenizer, monkeypatch):
    """Issue: on a CPU without AVX-512 BF16 (simulated), `model.to(torch.bfloat16)` under `inference_mode` ran the
    CPU kernels, which oneDNN refuses there; it must run the reference, close to float32."""
    monkeypatch.setattr(cpu_kernels, "bfloat16_supported", lambda: False)
    calls = []
    for table in (TOKEN_LAYER_IMPLEMENTATIONS, RECURRENCE_IMPLEMENTATIONS):
        kernel = table["cpu"]
        function = kernel.function
        recorded = Implementation(lambda *args, function=function: calls.append(1) or function(*args), kernel.supports)
        monkeypatch.setitem(table, "cpu", recorded)
    inputs = encode(tokenizer, MIXED_SENTENCES)
    other = ElmoModel(tiny_config()).eval()
    other.load_state_dict(tiny_model.state_dict())
    other.to(torch.bfloat16)
    with torch.inference_mode():
        expected = tiny_model(**inputs).last_hidden_state
        calls.clear()
        actual = other(**inputs).last_hidden_state
    assert not calls and actual.dtype == torch.bfloat16 and torch.isfinite(actual).all()
    torch.testing.assert_close(actual.float(), expected, atol=0.1, rtol=0)


def test_the_choice_is_the_same_in_fresh_processes():
    """Capability first: the choice depends on the call and the machine only, never on timing."""
    script = """
import torch
from conftest import tiny_config
from elmo_hf.kernels_elmo import RECURRENCE_IMPLEMENTATIONS, choose_implementation
from elmo_hf.modeling_elmo import ElmoLstmCellWithProjection
cell = ElmoLstmCellWithProjection(tiny_config()).eval()
names = []
for dtype in (torch.float32, torch.float64, torch.bfloat16):
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            inputs = torch.randn(2, 8, dtype=dtype)
            function = choose_implementation(RECURRENCE_IMPLEMENTATIONS, cell.to(dtype), True, inputs)
        names.append(function.__name__)
print(" ".join(names))
"""
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd="tests").stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and runs[0].split()[0] == "lstm_with_projection"


def test_a_process_whose_onednn_is_limited_to_avx2_runs_bfloat16_through_the_reference():
    """Capability as oneDNN sees it, not as the CPU's flags say: with oneDNN limited to AVX2 (as on an AVX2 CPU, where
    it refuses bfloat16 products), a real process chooses the reference for bfloat16 and the kernels for float32, and
    a bfloat16 model runs, close to float32."""
    script = """
import torch
from conftest import MIXED_SENTENCES, encode, tiny_config
from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.kernels_elmo import RECURRENCE_IMPLEMENTATIONS, choose_implementation
torch.manual_seed(0)
model = ElmoModel(tiny_config()).eval()
inputs = encode(ElmoTokenizer(), MIXED_SENTENCES)
with torch.inference_mode():
    expected = model(**inputs).last_hidden_state
    cell = model.bilm.layers[0].forward_cell
    names = [choose_implementation(RECURRENCE_IMPLEMENTATIONS, cell, True, torch.randn(2, 8)).__name__]
    model.to(torch.bfloat16)
    names.append(choose_implementation(RECURRENCE_IMPLEMENTATIONS, cell, True, torch.randn(2, 8).bfloat16()).__name__)
    actual = model(**inputs).last_hidden_state.float()
print(*names, (actual - expected).abs().max().item())
"""
    environment = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"}
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd="tests", env=environment
    )
    float32_choice, bfloat16_choice, difference = run.stdout.split()
    assert (float32_choice, bfloat16_choice) == ("lstm_with_projection", "lstm_recurrence")
    assert float(difference) < 0.1
