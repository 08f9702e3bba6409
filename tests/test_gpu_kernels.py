"""The GPU implementations of `gpu_kernels.py` on a CPU: taken by the dispatcher only for the calls they support, a
whole model through them gives the reference's results (Triton's kernels in its interpreter), no global flag
changes, and the model and its saved folder's code work without Triton. Their agreement with the reference on random
batches is the contract test's (`test_implementations.py`)."""

import os
import subprocess
import sys

import pytest
import torch
from conftest import MIXED_SENTENCES, encode, tiny_config
from transformers.dynamic_module_utils import get_imports

from elmo_hf import ElmoModel
from elmo_hf.kernels_elmo import RECURRENCE_IMPLEMENTATIONS, TOKEN_LAYER_IMPLEMENTATIONS, Implementation
from elmo_hf.reference_elmo import KernelRequest

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
            assert chosen(recurrence, dtype, CUDA, False, packed, False) == "triton"
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


def flags() -> tuple:
    """The global switches a library could be tempted to flip for exactness or speed."""
    return (
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.enabled,
        torch.backends.cudnn.deterministic,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_model_through_the_gpu_implementations_gives_the_reference_results(
    dtype, tiny_model, tokenizer, monkeypatch
):
    """The GPU entries, made to accept CPU calls, run a whole model (the recurrence's Triton kernels in the
    interpreter): every layer as the reference modules compute it, and no global flag changed."""
    calls = []
    for table, name in ((RECURRENCE_IMPLEMENTATIONS, "triton"), (TOKEN_LAYER_IMPLEMENTATIONS, "without-tf32")):
        function = table[name].function
        recorded = Implementation(lambda *args, function=function: calls.append(1) or function(*args), lambda _: True)
        monkeypatch.setitem(table, "cpu", recorded)
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
scalars = {"rows": "i32", "lstm_dim": "i32", "projection_dim": "i32", "cell_clip": "fp32", "projection_clip": "fp32"}
masks = {"running", "clipped_cells", "clipped_outputs"}
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
                signature = {
                    p.name: "constexpr" if p.is_constexpr or p.name in constants else
                    "*i8" if p.name in masks else scalars.get(p.name, pointer)
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
