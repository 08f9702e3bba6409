"""The training kernel (`training_kernels.py`): the reference's forward bit for bit, its gradients those of autograd
through the reference (`gradcheck` in float64, autograd's own in float32), clipping and variable lengths included;
taken only where it computes the same thing."""

import os

import pytest
import torch
from conftest import tiny_config
from torch import nn
from torch.nn.utils import parametrize

from elmo_hf import ElmoForPreTraining, cpu_kernels, gpu_kernels, training_kernels
from elmo_hf.cli import run_subcommand
from elmo_hf.corpus.data import DataCollatorForElmoPreTraining, ElmoWordVocabulary
from elmo_hf.kernels_elmo import RECURRENCE_IMPLEMENTATIONS, Implementation, choose_implementation
from elmo_hf.modeling_elmo import ElmoLstmCellWithProjection
from elmo_hf.reference_elmo import LstmLinears, SequenceBatch
from elmo_hf.training_kernels import CPU_STEPS, LstmWithProjectionFunction

# Triton reads TRITON_INTERPRET as it compiles a kernel file: the Triton steps run on CPU tensors in its interpreter.
os.environ["TRITON_INTERPRET"] = "1"

# Rows of lengths 6, 6, 5, 4, 4, 3 and one of length 0 (its state passes through untouched, as in the reference).
BATCH = SequenceBatch(torch.tensor([6, 6, 5, 4, 4, 3, 0]), steps=6, packed=True)
BATCH_SIZES = [6, 6, 6, 5, 3, 2]
BATCH_SIZE = 7
assert BATCH.batch_sizes == BATCH_SIZES


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def fused_calls(monkeypatch) -> list[int]:
    """One entry per call of the training kernel by `modeling_elmo`."""
    calls = []
    kernel = RECURRENCE_IMPLEMENTATIONS["training"]
    recorded = Implementation(lambda *args: calls.append(1) or kernel.function(*args), kernel.supports)
    monkeypatch.setitem(RECURRENCE_IMPLEMENTATIONS, "training", recorded)
    return calls


def fused_lstm_with_projection(cell: ElmoLstmCellWithProjection, inputs, hidden, memory):
    """The training kernel on `cell`'s weights, as the cell would call it."""
    linears = LstmLinears(cell.input_to_gates, cell.hidden_to_gates, cell.projection)
    kernel = training_kernels.fused_lstm_with_projection
    return kernel(inputs, BATCH, (hidden, memory), linears, cell.cell_clip, cell.projection_clip)


def random_cell(dtype: torch.dtype, cell_clip: float | None = 0.6, projection_clip: float | None = 0.4):
    """A cell of odd sizes with weights large enough that both clips cut some values and leave others."""
    torch.manual_seed(0)
    cell = ElmoLstmCellWithProjection(
        tiny_config(projection_dim=5, lstm_dim=7, cell_clip=cell_clip, projection_clip=projection_clip)
    ).to(dtype)
    for parameter in cell.parameters():
        nn.init.normal_(parameter, std=0.7)
    return cell


def random_inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Packed inputs and an initial state, all requiring gradients."""
    inputs = torch.randn(sum(BATCH_SIZES), 5, dtype=dtype, requires_grad=True)
    hidden = (0.3 * torch.randn(BATCH_SIZE, 5, dtype=dtype)).requires_grad_()
    cell = torch.randn(BATCH_SIZE, 7, dtype=dtype, requires_grad=True)
    return inputs, hidden, cell


def reference_run(cell: ElmoLstmCellWithProjection, inputs, hidden, memory):
    """The reference forward under autograd (`elmo_implementation="eager"`)."""
    cell.config.elmo_implementation = "eager"
    try:
        outputs, (final_hidden, final_cell) = cell(inputs, BATCH, (hidden, memory))
    finally:
        cell.config.elmo_implementation = "auto"
    return outputs, final_hidden, final_cell


def test_clips_are_active_in_these_tests():
    """Both clips cut some values and leave others, so their gradients' masks are exercised."""
    cell = random_cell(torch.float64, cell_clip=None, projection_clip=None)
    inputs, hidden, memory = random_inputs(torch.float64)
    with torch.no_grad():
        outputs, _, final_cell = reference_run(cell, inputs, hidden, memory)
    for values, clip in ((outputs, 0.4), (final_cell, 0.6)):
        clipped = values.abs() > clip
        assert clipped.any() and not clipped.all()


@pytest.mark.parametrize("clips", [(0.6, 0.4), (None, None), (0.6, None), (None, 0.4)])
def test_gradcheck_in_float64_with_state_in_and_out(clips):
    cell = random_cell(torch.float64, *clips)
    weights = (
        cell.input_to_gates.weight,
        cell.hidden_to_gates.weight,
        cell.hidden_to_gates.bias,
        cell.projection.weight,
    )

    def function(inputs, hidden, memory, *weights):
        return LstmWithProjectionFunction.apply(inputs, hidden, memory, *weights, BATCH_SIZES, *clips, CPU_STEPS)

    assert torch.autograd.gradcheck(function, (*random_inputs(torch.float64), *weights))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_is_the_reference_bit_for_bit_and_gradients_are_autograds(dtype):
    cell = random_cell(dtype)
    inputs, hidden, memory = random_inputs(dtype)
    expected = reference_run(cell, inputs, hidden, memory)
    actual = fused_lstm_with_projection(cell, inputs, hidden, memory)
    actual = (actual[0], *actual[1])
    for value, reference in zip(actual, expected, strict=True):
        assert torch.equal(value, reference)
    weights = [inputs, hidden, memory, *cell.parameters()]
    upstream = [torch.randn_like(value) for value in expected]
    gradients = torch.autograd.grad(actual, weights, upstream, retain_graph=True)
    again = torch.autograd.grad(actual, weights, upstream)  # a retained graph gives the same gradients again
    expected_gradients = torch.autograd.grad(expected, weights, upstream)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-13}
    for gradient, repeated, reference in zip(gradients, again, expected_gradients, strict=True):
        torch.testing.assert_close(gradient, reference, **tolerance)
        assert torch.equal(gradient, repeated)


@pytest.mark.parametrize("clips", [(0.6, 0.4), (None, None), (0.6, None), (None, 0.4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_triton_steps_give_the_reference_outputs_and_autograds_gradients(clips, dtype):
    """The GPU's training kernel (`TRITON_STEPS`, Triton's kernels in its interpreter): the reference's outputs and
    final state, and autograd's gradients through the reference for the inputs, the initial state and every weight,
    to the last bits of a product summed in another order; a row of length 0 passes its state through."""
    cell = random_cell(dtype, *clips)
    inputs, hidden, memory = random_inputs(dtype)
    expected = reference_run(cell, inputs, hidden, memory)
    weights = (cell.input_to_gates.weight, cell.hidden_to_gates.weight, cell.hidden_to_gates.bias)
    weights += (cell.projection.weight,)
    actual = LstmWithProjectionFunction.apply(
        inputs, hidden, memory, *weights, BATCH_SIZES, *clips, gpu_kernels.TRITON_STEPS
    )
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-13}
    for value, reference in zip(actual, expected, strict=True):
        torch.testing.assert_close(value, reference, **tolerance)
    assert torch.equal(actual[1][-1], hidden[-1]) and torch.equal(actual[2][-1], memory[-1])  # the empty row
    differentiated = [inputs, hidden, memory, *weights]
    upstream = [torch.randn_like(value) for value in expected]
    gradients = torch.autograd.grad(actual, differentiated, upstream)
    for gradient, reference in zip(gradients, torch.autograd.grad(expected, differentiated, upstream), strict=True):
        torch.testing.assert_close(gradient, reference, **tolerance)


def test_the_triton_steps_pass_gradcheck_in_float64():
    """`gradcheck` (fast mode: random projections of the Jacobian) of the Triton steps with both clips active."""
    cell = random_cell(torch.float64)
    weights = (cell.input_to_gates.weight, cell.hidden_to_gates.weight, cell.hidden_to_gates.bias)
    weights += (cell.projection.weight,)

    def function(inputs, hidden, memory, *weights):
        steps = gpu_kernels.TRITON_STEPS
        return LstmWithProjectionFunction.apply(inputs, hidden, memory, *weights, BATCH_SIZES, 0.6, 0.4, steps)

    assert torch.autograd.gradcheck(function, (*random_inputs(torch.float64), *weights), fast_mode=True)


def pretraining_steps() -> list[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    """The loss and every parameter's gradient of one pretraining step of a tiny model with dropout, as shipped
    (`auto`) and through the reference (`eager`)."""
    vocabulary = ElmoWordVocabulary(["</S>", "<S>", "<UNK>", *"abcdefg"])
    batch = DataCollatorForElmoPreTraining(vocabulary)(
        [{"words": list("abcab")}, {"words": list("gfe")}, {"words": ["d"]}, {"words": list("abcdefgab")}]
    )
    torch.manual_seed(0)
    model = ElmoForPreTraining(
        tiny_config(word_vocab_size=len(vocabulary), pretraining_dropout=0.2, initializer_range=0.5)
    ).train()
    steps = []
    for implementation in ("auto", "eager"):
        model.config.elmo_implementation = implementation
        model.zero_grad()
        torch.manual_seed(1)
        loss = model(**batch).loss
        loss.backward()
        steps.append((loss.detach(), {name: parameter.grad.clone() for name, parameter in model.named_parameters()}))
    return steps


def test_a_pretraining_step_equals_the_reference_step(fused_calls):
    """The whole model with dropout: the same loss bit for bit, every parameter's gradient autograd's."""
    (loss, gradients), (reference_loss, reference_gradients) = pretraining_steps()
    assert len(fused_calls) == 2 * 2  # both directions of both layers, in the "auto" run only
    assert torch.equal(loss, reference_loss)
    for name, gradient in gradients.items():
        torch.testing.assert_close(gradient, reference_gradients[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_pretraining_step_through_the_triton_steps_equals_the_reference_step(monkeypatch):
    """The GPU's training kernel (its Triton steps in the interpreter), made to take the CPU calls, in the whole
    model: the reference's loss and every parameter's gradient autograd's, to the last bits."""
    calls = []
    recorded = Implementation(
        lambda *args: calls.append(1) or gpu_kernels.fused_training_recurrence(*args),
        RECURRENCE_IMPLEMENTATIONS["training"].supports,
    )
    monkeypatch.setitem(RECURRENCE_IMPLEMENTATIONS, "training", recorded)
    (loss, gradients), (reference_loss, reference_gradients) = pretraining_steps()
    assert len(calls) == 2 * 2
    torch.testing.assert_close(loss, reference_loss, rtol=1e-6, atol=0)
    for name, gradient in gradients.items():
        torch.testing.assert_close(gradient, reference_gradients[name], rtol=1e-5, atol=1e-6, msg=name)


def inference_kernel(cell: ElmoLstmCellWithProjection) -> bool:
    """Whether the dispatcher gives `cell` the CPU inference kernel."""
    chosen = choose_implementation(RECURRENCE_IMPLEMENTATIONS, cell, True, *random_inputs(torch.float32))
    return chosen is cpu_kernels.lstm_with_projection


def test_dispatcher_takes_the_kernel_only_where_it_computes_the_same(fused_calls):
    cell = random_cell(torch.float32)

    def fused(cell=cell, dtype=torch.float32) -> bool:
        fused_calls.clear()
        inputs, hidden, memory = random_inputs(dtype)
        cell(inputs, BATCH, (hidden, memory))
        return bool(fused_calls)

    assert fused()
    assert fused(random_cell(torch.float64), torch.float64)
    with torch.no_grad():
        assert not fused()  # nothing recorded: the inference kernels
    assert not fused(random_cell(torch.bfloat16), torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fused()  # the reference's products run in bfloat16
        with torch.no_grad():  # nor do the inference kernels run under autocast
            assert not inference_kernel(cell)
    with torch.no_grad():
        assert inference_kernel(cell)
    cell.config.elmo_implementation = "eager"
    assert not fused()
    cell.config.elmo_implementation = "auto"
    handle = cell.projection.register_forward_hook(lambda *args: None)
    assert not fused()
    handle.remove()
    handle = nn.modules.module.register_module_full_backward_hook(lambda *args: None)
    assert not fused()
    handle.remove()

    class Halve(nn.Module):
        def forward(self, weight):
            return weight / 2

    parametrize.register_parametrization(cell.projection, "weight", Halve())
    assert not fused()
    parametrize.remove_parametrizations(cell.projection, "weight")
    assert fused()


def test_double_backward_is_refused_and_the_reference_supports_it():
    cell = random_cell(torch.float64)
    inputs, hidden, memory = random_inputs(torch.float64)
    outputs, _ = cell(inputs, BATCH, (hidden, memory))
    (gradient,) = torch.autograd.grad(outputs.square().sum(), inputs, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        gradient.sum().backward()
    outputs = reference_run(cell, inputs, hidden, memory)[0]
    (gradient,) = torch.autograd.grad(outputs.square().sum(), inputs, create_graph=True)
    gradient.sum().backward()


def test_pretrain_command_trains_with_the_kernel(fused_calls, tmp_path):
    """`elmo-hf pretrain` (Trainer, accelerate) leaves the cells stock, so its steps take the kernel."""
    corpus = tmp_path / "train.txt"
    corpus.write_text("the cat sat on the mat\na dog barked\n" * 4, encoding="utf-8")
    flags = ["--lstm-dim", "16", "--projection-dim", "8", "--filters", "1:4,2:8", "--num-highway-layers", "1"]
    assert run_subcommand(
        "pretrain",
        ["--train", str(corpus), "--output", str(tmp_path / "out"), *flags, "--max-steps", "2", "--batch-size", "4",
         "--no-progress"],
    ) == 0
    assert len(fused_calls) == 2 * 2 * 2  # 2 steps, 2 layers, 2 directions


def test_saved_tensor_hooks_see_what_the_backward_keeps():
    """Everything the backward keeps goes through `save_for_backward`, so offloading hooks (`save_on_cpu`,
    checkpointing) see it all; the gradients are unchanged."""
    cell = random_cell(torch.float64)
    inputs, hidden, memory = random_inputs(torch.float64)
    packed = []

    def pack(tensor):
        packed.append(tensor.shape)
        return tensor.clone()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        outputs, _ = fused_lstm_with_projection(cell, inputs, hidden, memory)
    assert (sum(BATCH_SIZES), 3, 7) in packed and len(packed) == 13  # both clips: no None among them
    hooked = torch.autograd.grad(outputs.sum(), [inputs, *cell.parameters()])
    outputs, _ = fused_lstm_with_projection(cell, inputs, hidden, memory)
    for gradient, plain in zip(hooked, torch.autograd.grad(outputs.sum(), [inputs, *cell.parameters()]), strict=True):
        assert torch.equal(gradient, plain)


@pytest.mark.parametrize(("lstm_dim", "projection_dim", "rows"), [(512, 64, 7), (4096, 512, 5)])
def test_the_thread_count_of_a_step_never_changes_outputs_or_gradients(
    monkeypatch, tmp_path, lstm_dim, projection_dim, rows
):
    """Steps switching between one thread and two (a try every other step) give the bits of a run with two threads,
    also for a cell size whose products round differently with one thread (4096 cells, 5 rows, on the machines
    measured): `StepThreads` keeps those steps on torch's count."""
    for table in ("choices", "timings", "same_bits"):
        monkeypatch.setattr(cpu_kernels.StepThreads, table, {})
    monkeypatch.setenv("ELMO_HF_CACHE", str(tmp_path))  # every check made here, none read from earlier tests
    monkeypatch.setattr(cpu_kernels.KnownThreadBits, "_known", None)
    torch.manual_seed(0)
    batch_sizes = [rows, rows, rows, rows - 1, rows - 3]
    inputs = torch.randn(sum(batch_sizes), projection_dim, requires_grad=True)
    state = (torch.zeros(rows, projection_dim), torch.zeros(rows, lstm_dim))
    weights = [
        (torch.randn(4 * lstm_dim, projection_dim) * 0.05).requires_grad_(),
        (torch.randn(4 * lstm_dim, projection_dim) * 0.05).requires_grad_(),
        (torch.randn(4 * lstm_dim) * 0.1).requires_grad_(),
        (torch.randn(projection_dim, lstm_dim) * 0.05).requires_grad_(),
    ]

    def run() -> list[torch.Tensor]:
        leaves = [inputs, *weights]
        for leaf in leaves:
            leaf.grad = None
        outputs, hidden, cell = LstmWithProjectionFunction.apply(
            inputs, *state, *weights, batch_sizes, 3.0, 3.0, CPU_STEPS
        )
        (outputs.sin().sum() + hidden.sum() + cell.sum()).backward()
        return [outputs.detach(), hidden.detach(), cell.detach(), *(leaf.grad for leaf in leaves)]

    torch.set_num_threads(2)
    with monkeypatch.context() as fixed:
        fixed.setattr(cpu_kernels.StepThreads, "same_bits", {}, raising=True)
        fixed.setattr(cpu_kernels.StepThreads, "run", lambda self, name, rows, step, *args, state: step(*args))
        expected = run()
    monkeypatch.setattr(cpu_kernels.StepThreads, "FIRST_TRY", 1)
    monkeypatch.setattr(cpu_kernels.StepThreads, "LONGEST_INTERVAL", 2)
    cpu_kernels.StepThreads.choices[2] = [1, 1, 1]  # one thread first, tries of two every other step
    for _ in range(3):
        assert all(torch.equal(value, other) for value, other in zip(run(), expected))
    assert torch.get_num_threads() == 2
    assert cpu_kernels.StepThreads.same_bits
