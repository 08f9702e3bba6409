"""Every implementation of `kernels_elmo.py`'s tables on odd but legal shapes, against the reference: sizes that are
no multiple of the kernels' blocks (an odd `projection_dim` once crashed the CPU kernels), `lstm_dim` below
`projection_dim`, one row and 65 rows, rows of length 0 and 1 beside a long one, lengths around the graphs' blocks of
8 steps, clips off, and a second call from the first one's final state. GPU entries run on CPU tensors (Triton's
kernels in its interpreter, graphs stood in by eager runs: `conftest.graphs_on_cpu`), in float64, where their results
are the reference's to the last bits of a product summed in another order."""

import os

import pytest
import torch
from conftest import tiny_config
from test_implementations import assert_relatively_close, supported, token_layer_arguments
from torch import nn

from elmo_hf import cpu_kernels
from elmo_hf.kernels_elmo import DIRECTIONS_IMPLEMENTATIONS, RECURRENCE_IMPLEMENTATIONS, TOKEN_LAYER_IMPLEMENTATIONS
from elmo_hf.modeling_elmo import ElmoCharacterEncoder, ElmoLstmLayer
from elmo_hf.reference_elmo import LstmLinears, SequenceBatch, lstm_recurrence

# Triton reads TRITON_INTERPRET as it compiles a kernel file, imported on the first call of the fused recurrence.
os.environ["TRITON_INTERPRET"] = "1"
pytestmark = pytest.mark.usefixtures("one_thread")

# A long row among short ones and empty ones, lengths around the blocks of 8 steps; 65 rows of one token and a long
# one (beyond the graphs' row roundings).
MIXED = [17, 0, 1, 7, 8, 9, 15, 16, 1, 0]
WIDE = [9] + [1] * 64


def linears_of(projection_dim: int, lstm_dim: int, dtype: torch.dtype) -> LstmLinears:
    """One direction's linear maps, inputs of `projection_dim` as in the model, with weights large enough that the
    clips (0.6, 0.4) cut some values."""
    torch.manual_seed(0)
    linears = LstmLinears(
        nn.Linear(projection_dim, 4 * lstm_dim, bias=False),
        nn.Linear(projection_dim, 4 * lstm_dim),
        nn.Linear(lstm_dim, projection_dim, bias=False),
    )
    for linear in linears:
        nn.init.normal_(linear.weight, std=0.7)
        linear.to(dtype)
    return linears


def batch_of(lengths: list[int], dim: int, lstm_dim: int, dtype: torch.dtype, packed: bool, final_steps: bool = True):
    """Inputs of rows of `lengths` tokens in the layout, the layout and a random initial state."""
    generator = torch.Generator().manual_seed(1)
    steps = max(lengths)
    batch = SequenceBatch(torch.tensor(lengths), steps, packed, final_steps)
    tokens = torch.randn(len(lengths), steps, dim, generator=generator, dtype=torch.float64)
    tokens = tokens * (torch.arange(steps) < torch.tensor(lengths).unsqueeze(1)).unsqueeze(-1)
    state = [torch.randn(1, len(lengths), size, generator=generator, dtype=torch.float64) for size in (dim, lstm_dim)]
    state = tuple(batch.sorted_rows(tensor)[0].to(dtype) for tensor in state)
    return batch.directions(tokens.to(dtype))[0], batch, state


def inference_dtype(name: str, packed: bool) -> torch.dtype | None:
    """The dtype an inference implementation is checked in: float64 where it takes it (the GPU entries, the scan),
    else float32; `None` where it takes no inference call in this layout."""
    implementation = RECURRENCE_IMPLEMENTATIONS[name]
    for dtype in (torch.float64, torch.float32):
        request = supported(implementation, dtype, packed)
        if request is not None and not request.recording:
            return dtype
    return None


SHAPES = {
    "1-1-mixed": ((1, 1), MIXED, (0.6, 0.4)),
    "3-1-65-rows-no-clips": ((3, 1), WIDE, (None, None)),
    "9-7-mixed": ((9, 7), MIXED, (None, 0.4)),
    "5-17-one-token": ((5, 17), [1], (0.6, None)),
}
# Each implementation in each layout it takes an inference call in, on each shape with a step to run there.
INFERENCE_CASES = [
    pytest.param(name, layout, *shape, id=f"{name}-{layout}-{shape_id}")
    for name in ("cpu", "cuda graphs", "triton", "scan")
    for layout in ("packed", "padded", "packed without final steps")
    if inference_dtype(name, layout != "padded") is not None
    for shape_id, shape in SHAPES.items()
    if layout != "packed without final steps" or max(shape[1]) > 1
]


@pytest.mark.parametrize("name, layout, sizes, lengths, clips", INFERENCE_CASES)
def test_every_inference_recurrence_gives_the_reference_results_on_odd_shapes(name, layout, sizes, lengths, clips):
    """Two calls, the second from the first one's final state (statefully, as a model over successive batches)."""
    packed = layout != "padded"
    dtype = inference_dtype(name, packed)
    projection_dim, lstm_dim = sizes
    linears = linears_of(projection_dim, lstm_dim, dtype)
    inputs, batch, state = batch_of(lengths, projection_dim, lstm_dim, dtype, packed, layout == "packed")
    expected_state = actual_state = state
    with torch.no_grad():
        for _ in range(2):
            expected = lstm_recurrence(inputs, batch, expected_state, linears, *clips)
            actual = RECURRENCE_IMPLEMENTATIONS[name].function(inputs, batch, actual_state, linears, *clips)
            for value, reference in zip((actual[0], *actual[1]), (expected[0], *expected[1]), strict=True):
                assert_relatively_close(value, reference)
            expected_state, actual_state = expected[1], actual[1]


@pytest.mark.parametrize("name", ["training", "triton training"])
@pytest.mark.parametrize("sizes", [(1, 1), (3, 1), (9, 7)], ids=["1-1", "3-1", "9-7"])
def test_every_training_recurrence_gives_autograds_gradients_on_odd_shapes(name, sizes):
    """Float64: the outputs and the gradients of the inputs, the initial state and every weight are those of
    autograd through the reference, on rows of 0 to 17 tokens, both clips active."""
    projection_dim, lstm_dim = sizes
    linears = linears_of(projection_dim, lstm_dim, torch.float64)
    inputs, batch, state = batch_of(MIXED, projection_dim, lstm_dim, torch.float64, packed=True)
    inputs, state = inputs.requires_grad_(), tuple(tensor.requires_grad_() for tensor in state)
    differentiated = [inputs, *state, *(parameter for linear in linears for parameter in linear.parameters())]
    expected = lstm_recurrence(inputs, batch, state, linears, 0.6, 0.4)
    actual = RECURRENCE_IMPLEMENTATIONS[name].function(inputs, batch, state, linears, 0.6, 0.4)
    expected, actual = (expected[0], *expected[1]), (actual[0], *actual[1])
    upstream = [torch.randn_like(value) for value in expected]
    expected += torch.autograd.grad(expected, differentiated, upstream)
    actual += torch.autograd.grad(actual, differentiated, upstream)
    for value, reference in zip(actual, expected, strict=True):
        torch.testing.assert_close(value, reference, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", ["cuda graphs", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_fused_recurrence_keeps_the_outputs_of_a_tiny_cell_clip(name, dtype):
    """A legal cell clip of 1e-30 makes every cell tiny: the reference outputs about 1e-31, where the fused kernels'
    former `tanh(x) = 2 * sigmoid(2 * x) - 1` gave 0 (`triton_kernels.tanh_of` keeps a small value's digits)."""
    linears = linears_of(3, 1, dtype)
    inputs, batch, state = batch_of([2, 1], 3, 1, dtype, packed=True)
    with torch.no_grad():
        expected = lstm_recurrence(inputs, batch, state, linears, 1e-30, None)
        actual = RECURRENCE_IMPLEMENTATIONS[name].function(inputs, batch, state, linears, 1e-30, None)
    assert float(expected[0].abs().max()) > 0
    assert_relatively_close(actual[0], expected[0])


@pytest.mark.parametrize("name", ["cuda graphs", "triton"])
def test_the_fused_recurrence_keeps_a_nan_where_the_reference_keeps_it(name):
    """A NaN token under both clips: `torch.clamp` keeps it NaN, where the fused kernels' minimum and maximum turned
    it into the clip's limit (finite, wrong outputs where the reference says the input was not a number)."""
    linears = linears_of(3, 5, torch.float32)
    inputs, batch, state = batch_of([4, 3, 0], 3, 5, torch.float32, packed=True)
    inputs = inputs.clone()
    inputs[0, 0] = float("nan")
    with torch.no_grad():
        expected = lstm_recurrence(inputs, batch, state, linears, 0.6, 0.4)
        actual = RECURRENCE_IMPLEMENTATIONS[name].function(inputs, batch, state, linears, 0.6, 0.4)
    for value, reference in zip((actual[0], *actual[1]), (expected[0], *expected[1]), strict=True):
        assert reference.isnan().any() and torch.equal(value.isnan(), reference.isnan())
        finite = ~reference.isnan()
        assert_relatively_close(value[finite], reference[finite])


def test_the_directions_at_once_give_the_bits_in_turn_on_odd_shapes(monkeypatch):
    """A layer of `projection_dim` 3 over `lstm_dim` 1 run at once (two torch threads) gives what in turn gives."""
    torch.manual_seed(0)
    layer = ElmoLstmLayer(tiny_config(projection_dim=3, lstm_dim=1, cell_clip=None, projection_clip=0.4), False)
    for parameter in layer.parameters():
        nn.init.normal_(parameter, std=0.7)
    layer.eval()
    inputs, batch, _ = batch_of(WIDE, 3, 1, torch.float32, packed=True)
    states = tuple(batch_of(WIDE, 3, 1, torch.float32, packed=True)[2] for _ in "ab")
    cells = (layer.forward_cell, layer.backward_cell)
    monkeypatch.setattr(cpu_kernels.DirectionsAtOnce, "choices", {})
    torch.set_num_threads(2)
    with torch.no_grad():
        expected = DIRECTIONS_IMPLEMENTATIONS["reference"].function(cells, (inputs, inputs), batch, states)
        at_once = DIRECTIONS_IMPLEMENTATIONS["cpu at once"].function
        at_once(cells, (inputs, inputs), batch, states)  # a kind's first call makes its choice
        for choice in cpu_kernels.DirectionsAtOnce.choices.values():
            choice[0], choice[2] = True, 10**9
        actual = at_once(cells, (inputs, inputs), batch, states)
    for (outputs, state), (expected_outputs, expected_state) in zip(actual, expected, strict=True):
        for value, reference in zip((outputs, *state), (expected_outputs, *expected_state), strict=True):
            assert torch.equal(value, reference)


@pytest.mark.parametrize("name", [name for name in TOKEN_LAYER_IMPLEMENTATIONS if name != "reference"])
@pytest.mark.parametrize("projection_dim", [1, 33])
def test_every_token_layer_gives_the_reference_results_on_odd_shapes(name, projection_dim, monkeypatch):
    """Odd filter counts and widths, no highway layer, words of 1 to 5 characters, one word and chunks of one."""
    torch.manual_seed(0)
    config = tiny_config(
        projection_dim=projection_dim, filters=[[1, 3], [3, 5]], num_highway_layers=0, char_embedding_dim=3,
        max_characters_per_token=5,
    )  # fmt: skip
    encoder = ElmoCharacterEncoder(config).eval()
    for parameter in encoder.parameters():
        nn.init.normal_(parameter, std=0.5)
    word_ids = torch.randint(1, 262, (7, 5))
    for row in range(5):
        word_ids[row, row + 1 :] = 261
    word_ids, layers, chunk_size = token_layer_arguments(encoder, word_ids, monkeypatch)
    with torch.no_grad():
        for words in (word_ids, word_ids[:1]):
            expected = TOKEN_LAYER_IMPLEMENTATIONS["reference"].function(words, layers, chunk_size)
            for chunks in (chunk_size, 1, None):
                assert_relatively_close(TOKEN_LAYER_IMPLEMENTATIONS[name].function(words, layers, chunks), expected)
