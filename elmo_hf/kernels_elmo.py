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
"""Which implementation computes ELMo's token layer and recurrence, and schedules a layer's two directions: one table
per computation, one dispatcher.

Every implementation of a table has the signature of its reference in `reference_elmo.py` and gives its results
(`tests/test_implementations.py` runs them all against it). The dispatcher, `choose_implementation`, is the only
place that decides; it takes the reference unless the call provably computes what the reference computes with a
faster implementation:

1. while `torch.export` or `torch.compile` traces, an implementation that supports tracing (the `scan` of a padded
   batch), else the reference, which calls the modules' layers so the tracer sees them;
2. otherwise the reference when `config.elmo_implementation` is not `"auto"`, or the module runs anything the kernels
   do not read: a replaced, wrapped or parametrized layer (PEFT adapters, quantised or pruned layers, a `forward` set
   on an instance as accelerate's hooks set it), a layer built otherwise than ELMo builds it (a convolution's stride,
   padding, dilation or groups, a bias in a cell's `input_to_gates` or `projection`), a forward or backward hook (of
   its layers or global), a tensor subclass, a torch function or dispatch mode, `torch.func` transforms, autocast,
   TorchScript;
3. otherwise the first implementation of the table whose `supports` accepts the call (`KernelRequest`: dtype, device,
   autograd recording, layout): capability first, so a kernel runs only where this machine can run it, and the
   answer depends on nothing but the call and the machine, the same in every process.

Before it decides anything, the dispatcher makes MKL's vector math ready in the process (`VectorMath.resolve`, once,
in the calling thread): two threads calling one of its functions for the first time at once can get a kernel of
another accuracy.

Where the reference is taken within a forward, it runs with torch's thread count, whatever count the CPU kernels'
steps before it left (`StepThreads.scope` holds that count for the cheap work between steps): a reference's bits
depend on the call alone.

A new kernel (a GPU one, say) is one more entry in a table, with its own `supports`. (Imports name what they take,
`from .file import name`: `transformers` copies a saved folder's remote code by following imports of that form.)
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils import parametrize

from .cpu_kernels import (
    StepThreads,
    VectorMath,
    directions_at_once,
    encode_words,
    lstm_with_projection,
    supports_directions_at_once,
)
from .cpu_kernels import supports as cpu_supports
from .export_kernels import scan_recurrence
from .export_kernels import supports as scan_supports
from .gpu_kernels import (
    fused_recurrence,
    fused_training_recurrence,
    graphed_recurrence,
    supports_fused_recurrence,
    supports_fused_training,
    supports_graphed_recurrence,
    supports_token_layer_without_tf32,
    token_layer_without_tf32,
)
from .reference_elmo import KernelRequest, directions_in_turn, lstm_recurrence, token_layer
from .training_kernels import fused_lstm_with_projection
from .training_kernels import supports as training_supports


@dataclass(frozen=True)
class Implementation:
    """One implementation of a computation: the function (the reference's signature) and its capability check."""

    function: Callable
    supports: Callable[[KernelRequest], bool]


def _always(request: KernelRequest) -> bool:
    return True


# In order of preference; the reference last, supporting every call.
RECURRENCE_IMPLEMENTATIONS: dict[str, Implementation] = {
    "cpu": Implementation(lstm_with_projection, cpu_supports),
    "cuda graphs": Implementation(graphed_recurrence, supports_graphed_recurrence),
    "triton": Implementation(fused_recurrence, supports_fused_recurrence),
    "training": Implementation(fused_lstm_with_projection, training_supports),
    "triton training": Implementation(fused_training_recurrence, supports_fused_training),
    "scan": Implementation(scan_recurrence, scan_supports),
    "reference": Implementation(lstm_recurrence, _always),
}
TOKEN_LAYER_IMPLEMENTATIONS: dict[str, Implementation] = {
    "cpu": Implementation(encode_words, cpu_supports),
    "without-tf32": Implementation(token_layer_without_tf32, supports_token_layer_without_tf32),
    "reference": Implementation(token_layer, _always),
}
# How a biLSTM layer runs its two directions (each cell still chooses its own recurrence above).
DIRECTIONS_IMPLEMENTATIONS: dict[str, Implementation] = {
    "cpu at once": Implementation(directions_at_once, supports_directions_at_once),
    "reference": Implementation(directions_in_turn, _always),
}

# The layers whose computation the kernels read from their weights: exactly these classes (a subclass may compute
# anything) hold the weights a kernel uses.
LEAF_LAYERS = (nn.Linear, nn.Conv1d, nn.Embedding, nn.ModuleList)
_GLOBAL_HOOKS = (
    "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks"
)
_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
# The layers of an LSTM cell whose bias no recurrence kernel reads: ELMo's cell adds the gates' bias once, with
# `hidden_to_gates` (`reference_elmo.LstmLinears`).
UNBIASED_CELL_LAYERS = ("input_to_gates", "projection")


def traced() -> bool:
    """Whether `torch.export` or `torch.compile` is tracing the call."""
    return torch.compiler.is_exporting() or torch.compiler.is_compiling()


def uses_padded_batches(config) -> bool:
    """The batch layout (`reference_elmo.SequenceBatch`): padded under `torch.export` (and so
    `torch.onnx.export(..., dynamo=True)`) or with `config.elmo_implementation == "export"` (e.g. for
    `torch.compile(fullgraph=True)`), packed otherwise."""
    return torch.compiler.is_exporting() or config.elmo_implementation == "export"


def runs_as_written(
    module: nn.Module, tensors: Iterable[torch.Tensor], submodules: list[nn.Module] | None = None
) -> bool:
    """Whether `module` computes exactly what its stock layers' weights say, for these tensors: each submodule is a
    leaf layer of `LEAF_LAYERS` or an ELMo module of `module`'s own file, of exactly that class, not parametrized,
    without hooks (nor global ones) or a `forward` of its own (accelerate's offload hooks, a patched method), and
    built as the kernels read it (`built_as_read`); no tensor subclass, sparse tensor or mixed floating dtype; no
    TorchScript, `torch.func` transform, torch function or dispatch mode, or autocast. Asked at every call of every
    ELMo module a kernel may run, so it walks the submodules once: `submodules` is `list(module.modules())` where the
    caller has it."""
    if torch.jit.is_tracing() or torch.jit.is_scripting() or torch._C._functorch.peek_interpreter_stack() is not None:
        return False
    if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
        return False
    if any(getattr(nn.modules.module, name) for name in _GLOBAL_HOOKS):
        return False
    submodules = list(module.modules()) if submodules is None else submodules
    for submodule in submodules:
        if type(submodule) not in LEAF_LAYERS and type(submodule).__module__ != type(module).__module__:
            return False
        if parametrize.is_parametrized(submodule) or any(getattr(submodule, name) for name in _MODULE_HOOKS):
            return False
        if "forward" in vars(submodule) or not built_as_read(submodule):
            return False
    parameters, buffers = module_tensors(submodules)
    tensors = [*tensors, *parameters, *buffers]
    dtype, device = parameters[-1].dtype, parameters[-1].device
    same = all(
        type(tensor) in (torch.Tensor, nn.Parameter)
        and tensor.layout == torch.strided
        and tensor.device == device
        and (tensor.dtype == dtype or not tensor.is_floating_point())
        for tensor in tensors
    )
    # Asked only of a device autocast knows: accelerate's offloaded weights wait on the meta device.
    return same and not (torch.amp.is_autocast_available(device.type) and torch.is_autocast_enabled(device.type))


def module_tensors(submodules: list[nn.Module]) -> tuple[list[nn.Parameter], list[torch.Tensor]]:
    """The parameters and buffers held by `submodules` (`list(module.modules())`), in `module.parameters()`'s and
    `module.buffers()`'s order (a tied one more than once), read off each submodule's own dictionaries: no walk of
    the tree per question."""
    parameters = [p for submodule in submodules for p in submodule._parameters.values() if p is not None]
    return parameters, [b for submodule in submodules for b in submodule._buffers.values() if b is not None]


def built_as_read(layer: nn.Module) -> bool:
    """Whether `layer` holds what the kernels read from it, as ELMo builds it: a `Conv1d` over every window of
    consecutive characters (stride 1, no padding, dilation or groups; the kernels multiply the windows), an LSTM
    cell's `UNBIASED_CELL_LAYERS` without bias (a stock `nn.Linear` put in their place has one by default)."""
    if isinstance(layer, nn.Conv1d):
        return (layer.stride, layer.padding, layer.dilation, layer.groups) == ((1,), (0,), (1,), 1)
    return "hidden_to_gates" not in layer._modules or all(
        getattr(getattr(layer, name, None), "bias", None) is None for name in UNBIASED_CELL_LAYERS
    )


def choose_implementation(
    table: dict[str, Implementation], module: nn.Module, packed: bool, *tensors: torch.Tensor
) -> Callable:
    """The dispatcher: the function of `table` that computes `module`'s call on `tensors` (its inputs; `module`'s
    parameters are checked too) over a packed or padded batch. See the module docstring for the rules."""
    tracing, submodules = traced(), list(module.modules())
    if not tracing:
        # Before anything of ELMo runs in the process, and before two threads can (`VectorMath`).
        VectorMath.resolve()
    reference = table["reference"].function
    if not tracing and (
        module.config.elmo_implementation != "auto" or not runs_as_written(module, tensors, submodules)
    ):
        function = reference
    else:
        parameters, _ = module_tensors(submodules)
        recording = torch.is_grad_enabled() and any(t.requires_grad for t in (*tensors, *parameters))
        request = KernelRequest(parameters[0].dtype, parameters[0].device, recording, packed, tracing)
        function = next(entry.function for entry in table.values() if entry.supports(request))
    if function is reference and not tracing:
        # A reference runs its sums with torch's thread count, not one the CPU kernels' steps before it in the same
        # forward left (`StepThreads.scope`): its bits never depend on them.
        StepThreads.resume_torch_count()
    return function


__all__ = [
    "DIRECTIONS_IMPLEMENTATIONS",
    "Implementation",
    "RECURRENCE_IMPLEMENTATIONS",
    "TOKEN_LAYER_IMPLEMENTATIONS",
    "StepThreads",
    "choose_implementation",
    "runs_as_written",
    "uses_padded_batches",
]
