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
"""The checks of `modeling_elmo`'s inputs and arguments: each raises a clear error naming the problem and what to do,
before a module computes anything with what it cannot read correctly."""

import math

import torch
from torch import nn
from transformers.modeling_outputs import ModelOutput

from .configuration_elmo import SCALAR_MIX_LAYER_NORMS, ElmoConfig, is_finite_number
from .reference_elmo import LstmState, WordsFirst


def check_model_inputs(
    config: ElmoConfig,
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    check_values: bool = True,
    model: nn.Module | None = None,
):
    """Raises a clear error for inputs the model `model` cannot read correctly, and for tracing. `check_values=False`
    checks types and shapes only: the checks of values (id range, a mask marking an all-zero word) read the data,
    which a traced graph cannot do (the export path under `torch.export` or `torch.compile`)."""
    if input_ids is None:
        raise ValueError(
            f"{type(model).__name__} needs input_ids of shape (batch_size, sequence_length, {config.row_width})."
        )
    if torch.jit.is_tracing():
        raise RuntimeError(
            "ELMo cannot be traced (torch.jit.trace, torch.onnx.export(..., dynamo=False)): a trace fixes the "
            "traced batch's sentence lengths into the graph, which is then wrong for other inputs. Export with "
            "`elmo-hf export-onnx`, torch.onnx.export(..., dynamo=True) or torch.export.export."
        )
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}; use ElmoTokenizer.")
    if not holds_integers(input_ids):
        raise TypeError(f"input_ids must hold integer character ids, got dtype {input_ids.dtype}.")
    # The largest id the rows hold (plain comparisons: torch.compile cannot trace `max` over tuples).
    largest, name = config.char_vocab_size - 1, "character ids"
    if config.word_embedding_vocab_size - 1 >= largest:
        largest, name = config.word_embedding_vocab_size - 1, "word ids"
    if torch.iinfo(input_ids.dtype).max < largest:
        raise TypeError(
            f"input_ids has dtype {input_ids.dtype}, which cannot hold {name} up to {largest}, so its values have "
            "wrapped around; keep the torch.long ids ElmoTokenizer returns."
        )
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):
        raise TypeError(
            f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__}; tokenize with "
            "return_tensors='pt' or pass torch.tensor(attention_mask)."
        )
    if attention_mask is not None and attention_mask.device != input_ids.device:
        raise ValueError(
            f"attention_mask is on {attention_mask.device} but input_ids on {input_ids.device}; pass both as the "
            "tokenizer returns them or move both with .to(model.device)."
        )
    chars, width = config.max_characters_per_token, config.row_width
    if input_ids.dim() != 3:
        raise ValueError(
            f"input_ids must have shape (batch_size, sequence_length, {width}): one row of ids per word, as "
            f"ElmoTokenizer returns; got shape {tuple(input_ids.shape)}."
        )
    if input_ids.shape[0] == 0:
        raise ValueError("input_ids is an empty batch (batch_size 0); pass at least one sentence.")
    if input_ids.shape[-1] != width:
        words = " and the word id" if config.word_embedding_dim else ""
        raise ValueError(
            f"input_ids has {input_ids.shape[-1]} ids per word, but this model reads {width} "
            f"(max_characters_per_token={chars}{words}); tokenize with the tokenizer saved with the model."
        )
    if not check_values:
        return
    # Compared in int64: torch cannot reduce or compare uint16..uint64 on CPU (a no-op for the tokenizer's ids).
    input_ids = input_ids.long()
    for name, ids, size in (
        ("character", input_ids[..., :chars], config.char_vocab_size),
        ("word", input_ids[..., chars:], config.word_embedding_vocab_size),
    ):
        if ids.numel():
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= size:
                raise ValueError(
                    f"input_ids holds {name} ids outside 0..{size - 1} (found {low}..{high}); ELMo ids come from "
                    "the tokenizer saved with the model."
                )
    if attention_mask is not None:
        if tuple(attention_mask.shape) != tuple(input_ids.shape[:2]):
            raise ValueError(
                f"attention_mask must have shape (batch_size, sequence_length) = {tuple(input_ids.shape[:2])}, "
                f"got {tuple(attention_mask.shape)}."
            )
        # A row of ids, none negative (checked above), is all zeros where its largest is 0: one pass, no temporary
        # of the ids' size (2.0 against 0.2 ms for 256 sentences of PTB on a 2-vCPU Zen 3).
        if (attention_mask.bool() & (input_ids.amax(-1) == 0)).any():
            raise ValueError(
                "attention_mask marks a word whose character ids are all 0 (a padding row); padding rows must "
                "have attention_mask 0."
            )


def check_input_device(input_ids: torch.Tensor | None, device: torch.device):
    """Raises for ids `ElmoModel` cannot read where they are: on the model's device, or on the CPU, where the
    tokenizer leaves them (the model then reads them there, without waiting for a GPU, and moves what the device
    computes with). Anything but a tensor is left to `check_model_inputs`."""
    if not isinstance(input_ids, torch.Tensor):
        return
    if input_ids.device != device and input_ids.device.type != "cpu":
        raise ValueError(
            f"input_ids are on {input_ids.device} but the model on {device}; move them with .to(model.device), or "
            "pass the tokenizer's CPU tensors as they are."
        )


def check_unread_arguments(model: nn.Module, kwargs: dict):
    """Raises for an argument in `model`'s `**kwargs` that it would otherwise drop silently, computing without it:
    `inputs_embeds`, the LSTM state of a model that does not run statefully (only `ElmoModel` names it), and targets
    given as `label` or `label_ids` (a model computing no loss then)."""
    for name in ("inputs_embeds", "lstm_state", "output_lstm_state", "label", "label_ids"):
        if kwargs.get(name) is None or kwargs.get(name) is False:
            continue
        if name == "inputs_embeds":
            what = "ELMo computes its token vectors from each word's characters; pass input_ids (ElmoTokenizer)"
        elif name.startswith("label"):
            what = "pass the targets as labels= (transformers' data collators rename label and label_ids so)"
        else:
            what = "only ElmoModel carries the LSTM state from one call to the next (a head starts from zeros)"
        raise TypeError(f"{type(model).__name__} does not take {name}: {what}.")


def check_bilm_trainable(model: nn.Module):
    """Raises where a task head's `config.freeze_bilm` and its biLM's parameters disagree in a forward that records
    gradients: the flag freezes the parameters only when the head is built or loaded, and the head runs a frozen biLM
    without gradients, so either the flag set later would be ignored silently or trainable parameters of the biLM
    (adapters, weights unfrozen by hand) would never learn. A head with no trainable parameter at all (frozen whole
    for inference) trains nothing, whatever the flag."""
    trainable = any(parameter.requires_grad for parameter in model.elmo.parameters())
    if trainable != model.config.freeze_bilm:
        return
    if not trainable and not any(parameter.requires_grad for parameter in model.parameters()):
        return
    if model.config.freeze_bilm:
        raise ValueError(
            "config.freeze_bilm is True, so the head runs its biLM without gradients, but some of the biLM's "
            "parameters are trainable (adapters, or weights unfrozen by hand) and would never learn; set "
            "model.config.freeze_bilm = False to train them, or freeze them."
        )
    raise ValueError(
        "config.freeze_bilm is False, but every parameter of the biLM is frozen (the flag freezes or unfreezes them "
        "when the head is built or loaded); load the head with from_pretrained(..., freeze_bilm=False), or call "
        "model.elmo.requires_grad_(True) before building the optimizer."
    )


def check_num_labels(model: nn.Module, logits: torch.Tensor):
    """Raises where a head's `config.num_labels` (or `id2label`) changed after the head was built: its classifier
    still gives the `logits` it was built for, which then do not match the labels the config names, and the stock
    losses would fail on a reshape or (regression) broadcast the logits against the targets."""
    built = logits.shape[-1]
    if model.config.num_labels != built:
        raise ValueError(
            f"config.num_labels is {model.config.num_labels}, but this {type(model).__name__}'s classifier was built "
            f"with {built} outputs (setting num_labels or id2label on a built head does not resize it); load the head "
            f"with from_pretrained(..., num_labels={model.config.num_labels}, ignore_mismatched_sizes=True) to start "
            f"a new classifier, or set num_labels back to {built}."
        )


def initial_lstm_state(
    config: ElmoConfig, lstm_state: LstmState | None, batch_size: int, like: torch.Tensor
) -> LstmState:
    """The state each row starts from: row i of `lstm_state` for row i, zeros for rows it does not have."""
    shapes = (
        (2 * config.num_layers, config.projection_dim),
        (2 * config.num_layers, config.lstm_dim),
    )
    if lstm_state is None:
        return tuple(like.new_zeros(rows, batch_size, dim) for rows, dim in shapes)
    if not isinstance(lstm_state, (tuple, list)) or len(lstm_state) != 2:
        raise TypeError("lstm_state must be the (h, c) pair of a previous output's lstm_state.")
    state = []
    for tensor, (rows, dim), name in zip(lstm_state, shapes, ("h", "c")):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 3 or (tensor.shape[0], tensor.shape[2]) != (
            rows,
            dim,
        ):
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"lstm_state {name} must have shape ({rows}, batch_size, {dim}), got {shape}.")
        tensor = tensor[:, :batch_size].to(like)
        missing = batch_size - tensor.shape[1]
        if missing:
            tensor = torch.cat([tensor, tensor.new_zeros(rows, missing, dim)], dim=1)
        state.append(tensor)
    return tuple(state)


def check_mix_arguments(
    num_representations: int,
    layer_norm: str | None = None,
    fixed_weights: list[float] | None = None,
    l2_coefficient: float = 0.0,
):
    """Raises a clear error for an `ElmoScalarMix` that cannot be built, or would mix to NaN or reward uneven
    weights."""
    if isinstance(num_representations, bool) or not isinstance(num_representations, int) or num_representations < 1:
        raise ValueError(
            f"ElmoScalarMix needs at least one layer to mix, got num_representations={num_representations!r}."
        )
    if layer_norm not in SCALAR_MIX_LAYER_NORMS:
        raise ValueError(f"layer_norm must be one of {SCALAR_MIX_LAYER_NORMS}, got {layer_norm!r}.")
    if fixed_weights is not None and len(fixed_weights) != num_representations:
        raise ValueError(
            f"fixed_weights has {len(fixed_weights)} values for {num_representations} layers; give one pre-softmax "
            "scalar per layer."
        )
    if fixed_weights is not None and (
        any(math.isnan(weight) or weight == math.inf for weight in fixed_weights)
        or all(weight == -math.inf for weight in fixed_weights)
    ):
        raise ValueError(
            f"fixed_weights must be pre-softmax numbers whose softmax is defined (no NaN or +inf, not all -inf), "
            f"got {list(fixed_weights)}."
        )
    if not is_finite_number(l2_coefficient) or l2_coefficient < 0:
        raise ValueError(f"l2_coefficient must be a finite number >= 0, got {l2_coefficient!r}.")


def check_mix_inputs(mix: nn.Module, hidden_states: tuple[torch.Tensor, ...], mask: torch.Tensor | None):
    """Raises a clear error for what the `ElmoScalarMix` `mix` cannot use."""
    if hidden_states is None or isinstance(hidden_states, ModelOutput):
        raise TypeError(
            "ElmoScalarMix takes the model's layers: call the model with output_hidden_states=True and pass "
            "outputs.hidden_states."
        )
    if len(hidden_states) != mix.scalar_parameters.shape[0]:
        raise ValueError(
            f"ElmoScalarMix mixes {mix.scalar_parameters.shape[0]} layers, got {len(hidden_states)}."
        )
    shapes = [tuple(layer.shape) for layer in hidden_states]
    if any(shape != shapes[0] for shape in shapes):
        raise ValueError(f"ElmoScalarMix mixes layers of one shape, got shapes {shapes}.")
    if mask is not None and not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"mask must be a torch.Tensor, got {type(mask).__name__}; pass the tokenizer's attention_mask tensor."
        )
    if mask is not None and tuple(mask.shape) != tuple(hidden_states[0].shape[:-1]):
        raise ValueError(
            f"mask must have the layers' shape without their last axis, {tuple(hidden_states[0].shape[:-1])} "
            f"(batch_size, sequence_length), got {tuple(mask.shape)}."
        )
    if mask is None and mix.layer_norm == "batch":
        raise ValueError("layer_norm='batch' needs the word mask: pass the tokenizer's attention_mask as mask.")
    trains = torch.is_grad_enabled() and (mix.scalar_parameters.requires_grad or mix.gamma.requires_grad)
    # A trace cannot ask `is_inference()` (a fundamental graph break of torch.compile): there torch's own error stays.
    traced = torch.compiler.is_compiling() or torch.compiler.is_exporting()
    if trains and not traced and any(layer.is_inference() for layer in hidden_states):
        raise RuntimeError(
            "ElmoScalarMix got layers computed under torch.inference_mode(), which cannot train its weights. "
            "Compute them under torch.no_grad() instead (the biLM stays frozen), or also run the mix under "
            "torch.inference_mode() if you only need its output; a fixed mix (ElmoScalarMix.top_layer, "
            ".average, .from_weights) takes them anywhere."
        )


def check_right_padded(mask: torch.Tensor):
    """Raises unless every row of the `(batch_size, sequence_length)` word mask has its words first."""
    if WordsFirst(mask, packed=True).order is not None:
        raise ValueError("ElmoForPreTraining needs right-padded batches: every row's words first, then padding.")


def holds_integers(tensor: torch.Tensor) -> bool:
    """Whether `tensor` holds integers (not floats, complex numbers or bools)."""
    return not (tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool)


def check_labels_type(labels: torch.Tensor, name: str = "labels"):
    if not isinstance(labels, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(labels).__name__}; pass torch.tensor({name}) (the data "
            "collators return tensors)."
        )


def class_ids(labels: torch.Tensor, name: str = "labels") -> torch.Tensor:
    """`labels` as the int64 ids the cross-entropy reads: any integer dtype (numpy's int32, say) is taken; floats and
    bools are refused, which the cross-entropy would refuse from deep inside torch."""
    check_labels_type(labels, name)
    if not holds_integers(labels):
        raise TypeError(
            f"{name} must hold integer class ids, got dtype {labels.dtype}; pass them as torch.long (-100 for "
            "ignored items)."
        )
    return labels.long()


def check_label_ids(labels: torch.Tensor, num_labels: int, check_values: bool = True):
    """Raises a `ValueError` for a label id outside `0..num_labels - 1` other than -100. `check_values=False` (a traced
    graph, which cannot read the labels: see `check_model_inputs`) checks nothing."""
    if not check_values:
        return
    valid = (labels == -100) | ((labels >= 0) & (labels < num_labels))
    if not bool(valid.all()):
        bad = labels[~valid][0].item()
        raise ValueError(
            f"labels hold id {bad}, outside 0..{num_labels - 1} (num_labels={num_labels}) "
            "and not -100 (ignored); set id2label/label2id (or num_labels) in the config to match your labels."
        )


def token_labels(
    labels: torch.Tensor, mask: torch.Tensor, num_labels: int, check_values: bool = True
) -> torch.Tensor:
    """Checks a token classifier's `labels` against the `(batch_size, sequence_length)` word `mask` and returns them as
    int64 ids. A label on a padding position (more labels than words, as when `truncation=True` cuts the words but
    not the labels, which `DataCollatorForTokenClassification` then pads to the batch's longest sentence) would be
    trained on silently: it is refused. `check_values=False` checks types and shapes only (`check_label_ids`)."""
    ids = class_ids(labels).to(mask.device)  # the mask is where the logits are
    if tuple(ids.shape) != tuple(mask.shape):
        raise ValueError(
            f"labels must have shape (batch_size, sequence_length) = {tuple(mask.shape)}, one id per word "
            f"(-100 for padding), got {tuple(ids.shape)}."
        )
    check_label_ids(ids, num_labels, check_values)
    if check_values:
        labelled_padding = (ids != -100) & ~mask
        if bool(labelled_padding.any()):
            row, position = (int(index) for index in labelled_padding.nonzero()[0])
            unsigned = "" if labels.dtype.is_signed else f" (labels of dtype {labels.dtype} cannot hold -100)"
            raise ValueError(
                f"labels give position {position} of row {row} label id {int(ids[row, position])}, but that "
                f"position is padding (words in the row: {int(mask[row].sum())}): each sentence needs one label per "
                f"word and -100 for padding{unsigned}. Truncating the words (truncation=True, max_length) leaves the "
                "labels whole: cut them to the words kept, labels[:len(encoding['input_ids'])]."
            )
    return ids


def sequence_labels(
    labels: torch.Tensor, batch_size: int, config: ElmoConfig, check_values: bool = True
) -> torch.Tensor:
    """Checks a sentence classifier's `labels` against its problem type and returns them as its loss reads them:
    int64 class ids, or float targets. An unset `config.problem_type` is read as transformers' loss reads it
    (regression for one label, else single-label for class ids, multi-label for float or bool targets), except
    that class ids of every integer dtype are single-label: transformers takes only int64 and int32 as class ids.
    `check_values=False` leaves the ids' range unchecked (`check_label_ids`)."""
    check_labels_type(labels)
    if labels.dim() == 0:
        raise ValueError(
            "labels is a 0-dim tensor; it needs a batch axis, shape (batch_size,) or (batch_size, num_labels), "
            "e.g. torch.tensor([label]) for one sentence."
        )
    if labels.shape[0] != batch_size:
        raise ValueError(f"labels has {labels.shape[0]} rows for a batch of {batch_size} sentences.")
    num_labels, problem_type = config.num_labels, config.problem_type
    if problem_type is None and num_labels > 1 and holds_integers(labels):
        problem_type = "single_label_classification"
    if problem_type == "single_label_classification":
        labels = class_ids(labels)
        if labels.dim() != 1:
            raise ValueError(
                f"class-id labels must have shape (batch_size,), got {tuple(labels.shape)}; multi-label targets "
                "are floats of shape (batch_size, num_labels), or integers (0/1) with "
                "config.problem_type='multi_label_classification'."
            )
        check_label_ids(labels, num_labels, check_values)
        return labels
    if problem_type is None:
        problem_type = "regression" if num_labels == 1 else "multi_label_classification"
    shapes = [(batch_size, num_labels)] + ([(batch_size,)] if problem_type == "regression" and num_labels == 1 else [])
    if tuple(labels.shape) not in shapes:
        kind = "regression" if problem_type == "regression" else "multi-label"
        raise ValueError(
            f"{kind} labels must have shape (batch_size, num_labels) = {shapes[0]}, got {tuple(labels.shape)} "
            f"(config.problem_type={config.problem_type!r}); class ids (single-label) are integers of shape "
            "(batch_size,)."
        )
    return labels if labels.dtype.is_floating_point else labels.float()


def pretraining_labels(
    labels: torch.Tensor | None, backward_labels: torch.Tensor | None, mask: torch.Tensor, word_vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Checks the pretraining targets and returns them as int64 word ids."""
    expected = (mask.shape[0], mask.shape[1] + 1)
    checked = []
    for name, value in (("labels", labels), ("backward_labels", backward_labels)):
        if value is None:
            raise ValueError(
                "ElmoForPreTraining needs both labels (forward targets) and backward_labels, or neither; "
                "DataCollatorForElmoPreTraining makes both."
            )
        value = class_ids(value, name)
        if tuple(value.shape) != expected:
            raise ValueError(
                f"{name} must have shape (batch_size, sequence_length + 1) = {expected}, got {tuple(value.shape)}."
            )
        valid = (value == -100) | ((value >= 0) & (value < word_vocab_size))
        if not bool(valid.all()):
            raise ValueError(
                f"{name} holds word id {int(value[~valid][0])}, outside 0..{word_vocab_size - 1} "
                "(word_vocab_size) and not -100; the vocabulary does not match this model's softmax."
            )
        checked.append(value)
    labels, backward_labels = checked
    if not bool(((labels == -100) == (backward_labels == -100)).all()):
        raise ValueError("labels and backward_labels must mark the same positions -100.")
    return labels, backward_labels
