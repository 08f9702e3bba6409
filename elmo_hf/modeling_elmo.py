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
"""PyTorch ELMo model: character CNN token layer and bidirectional LSTM language model.

Paper: "Deep contextualized word representations", Peters et al. 2018 (https://arxiv.org/abs/1802.05365).
Original implementations: allenai/bilm-tf (TensorFlow) and allenai/allennlp (PyTorch), Apache-2.0.

Dimension names used in the docstrings: `batch_size`, `sequence_length` (words), `max_characters_per_token`,
`projection_dim`, `lstm_dim`; `sequence_length + 2` counts the sentence boundaries `<S>` and `</S>`.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import ModelOutput, SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils.generic import can_return_tuple
from transformers.utils import logging

from .configuration_elmo import ElmoConfig
from .tokenization_elmo import BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN, word_to_char_ids

LstmState = tuple[torch.Tensor, torch.Tensor]

# Rows of input-to-gate products computed at once in `lstm_with_projection`: large enough for an efficient matrix
# product, small enough that memory stays bounded for any sequence length ((rows, 4 * lstm_dim) floats at a time).
# At 256 rows the original architecture's block is 16 MiB, below the 32 MiB up to which the C allocator reuses freed
# memory instead of mapping fresh pages for every block: its products measured 305 GFLOP/s against 241 at 512 rows.
GATE_INPUT_BLOCK_ROWS = 256


def onednn_linear_available(inputs: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear` may use oneDNN: a CPU float32 or bfloat16 product that autograd does not record."""
    return (
        inputs.device.type == "cpu"
        and inputs.dtype in (torch.float32, torch.bfloat16)
        and weight.dtype == inputs.dtype
        and weight.is_contiguous()
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and not (torch.is_grad_enabled() and (inputs.requires_grad or weight.requires_grad))
    )


def linear(
    inputs: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    add: torch.Tensor | None = None,
    weight_onednn: torch.Tensor | None = None,
) -> torch.Tensor:
    """`inputs @ weight.T + bias + add` for `(rows, in_features)` inputs and `(out_features, in_features)` weights.

    Without autograd on CPU, products of several rows run oneDNN's matrix product (the one `torch.compile` emits for
    CPU linear layers), with the bias and `add` fused into it, on `weight_onednn` (the same weight in oneDNN's layout,
    see `onednn_weight`) when given: faster than MKL's `addmm` for the few-row products of the LSTM recurrence. Single
    rows are matrix-vector products, bound by memory, where MKL reads the weight 10-25% faster than oneDNN (measured
    in `benchmarks/`). Elsewhere (training, CUDA) this is `torch.nn.functional.linear`.
    """
    if inputs.shape[0] > 1 and onednn_linear_available(inputs, weight):
        inputs, weight = inputs.contiguous(), weight if weight_onednn is None else weight_onednn
        if add is not None:
            return torch.ops.mkldnn._linear_pointwise.binary(inputs, add.contiguous(), weight, bias, "add")
        return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")
    if add is not None and bias is None:
        return torch.addmm(add, inputs, weight.t())
    outputs = nn.functional.linear(inputs, weight, bias)
    return outputs if add is None else outputs + add


# Copies of weights in oneDNN's layout, one per parameter, kept as long as the parameter lives (see `onednn_weight`).
_ONEDNN_WEIGHTS = WeakIdKeyDictionary()


def onednn_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` reordered once into oneDNN's blocked layout, for `linear` without autograd on CPU.

    The recurrence multiplies the same weights by a few rows at every time step; from the reordered copy oneDNN's
    products are 1.6x faster at 8 rows and 1.2x at 64 than from the plain layout (measured in `benchmarks/`). The
    copy costs the weight's memory once; it is remade when the parameter's data or version change (`.to()`,
    `load_state_dict`, an optimizer step). Returns `weight` itself where reordering is unavailable.
    """
    if weight.is_inference() or not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return weight
    key = (weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape))
    cached = _ONEDNN_WEIGHTS.get(weight)
    if cached is None or cached[0] != key:
        cached = (key, torch.ops.mkldnn._reorder_linear_weight(weight.detach()))
        _ONEDNN_WEIGHTS[weight] = cached
    return cached[1]


def word_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """`(batch_size, sequence_length)` bool: the given attention mask, or the rows with any non-zero character id."""
    return attention_mask.bool() if attention_mask is not None else (input_ids > 0).any(-1)


def words_first_order(mask: torch.Tensor) -> torch.Tensor | None:
    """Per row, the positions of its words in order, then its padding; `None` when every row is right-padded already.

    Gathering with it moves left padding (or holes in the mask) behind the words; `order.argsort(1)` undoes it.
    """
    lengths = mask.sum(1, keepdim=True)
    if bool((mask == (torch.arange(mask.shape[1], device=mask.device) < lengths)).all()):
        return None
    return (~mask).to(torch.int8).argsort(dim=1, stable=True)


def lstm_cell_update(
    gates: torch.Tensor, cell: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The element-wise part of one LSTM step.

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


def lstm_step(
    gate_inputs: torch.Tensor,
    hidden: torch.Tensor,
    cell: torch.Tensor,
    hidden_to_gates_weight: torch.Tensor,
    projection_weight: torch.Tensor,
    cell_clip: float | None,
    projection_clip: float | None,
    onednn_weights: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> LstmState:
    """One time step of the recurrence: `(rows, 4 * lstm_dim)` input-to-gate products (bias included) and the state
    `(hidden, cell)` of shapes `(rows, projection_dim)`, `(rows, lstm_dim)` -> the new state. Arguments as in
    `lstm_with_projection`."""
    hidden_to_gates_onednn, projection_onednn = onednn_weights or (None, None)
    gates = linear(hidden, hidden_to_gates_weight, add=gate_inputs, weight_onednn=hidden_to_gates_onednn)
    cell, unprojected = lstm_cell_update(gates, cell, cell_clip)
    hidden = linear(unprojected, projection_weight, weight_onednn=projection_onednn)
    if projection_clip is not None:
        hidden = hidden.clamp(-projection_clip, projection_clip)
    return hidden, cell


def lstm_with_projection(
    inputs: torch.Tensor,
    batch_sizes: list[int],
    input_to_gates_weight: torch.Tensor,
    hidden_to_gates_weight: torch.Tensor,
    gates_bias: torch.Tensor,
    projection_weight: torch.Tensor,
    initial_state: LstmState,
    cell_clip: float | None,
    projection_clip: float | None,
    onednn_weights: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, LstmState]:
    """Runs one LSTM direction with a projected, clipped output over a packed, length-sorted batch.

    Pure function, state in and out, so the scan can be swapped for a kernel. The inputs are packed time-major, as in
    `torch.nn.utils.rnn.PackedSequence`: step `t` holds the first `batch_sizes[t]` rows of the length-sorted batch,
    so no work is spent on padding and the active batch shrinks as sentences end. The input-to-gate products of
    blocks of steps (about `GATE_INPUT_BLOCK_ROWS` rows) are one matrix product each; only the recurrence is
    sequential. The gate order is i, f, g, o; the forget bias of the original TensorFlow cell is already folded into
    `gates_bias`.

    Args:
        inputs: `(num_positions, input_dim)`, packed time-major; `num_positions = sum(batch_sizes)`.
        batch_sizes: number of rows still running at each step (non-increasing, one entry per step).
        input_to_gates_weight: `(4 * lstm_dim, input_dim)`.
        hidden_to_gates_weight: `(4 * lstm_dim, projection_dim)`.
        gates_bias: `(4 * lstm_dim,)`.
        projection_weight: `(projection_dim, lstm_dim)`.
        initial_state: `(h, c)` of shapes `(batch_size, projection_dim)` and `(batch_size, lstm_dim)`, rows sorted as
            the batch.
        cell_clip, projection_clip: clip bounds, `None` for no clipping.
        onednn_weights: the hidden-to-gate and projection weights in oneDNN's layout (`onednn_weight`), for the
            products of the recurrence when autograd is off.

    Returns:
        The outputs `(num_positions, projection_dim)`, packed as the inputs, and the final `(h, c)` of every row (the
        state after its own last step).
    """
    hidden, cell = initial_state
    outputs = inputs.new_empty(inputs.shape[0], projection_weight.shape[0])
    finished_hidden, finished_cell = [], []
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
            gate_inputs = linear(inputs[block_start:block_end], input_to_gates_weight, gates_bias)
        if active < hidden.shape[0]:
            finished_hidden.append(hidden[active:])
            finished_cell.append(cell[active:])
            hidden, cell = hidden[:active], cell[:active]
        step_gate_inputs = gate_inputs[position - block_start : position - block_start + active]
        hidden, cell = lstm_step(
            step_gate_inputs,
            hidden,
            cell,
            hidden_to_gates_weight,
            projection_weight,
            cell_clip,
            projection_clip,
            onednn_weights,
        )
        outputs[position : position + active] = hidden
        position += active
    finished_hidden.append(hidden)
    finished_cell.append(cell)
    # Rows finish from the back of the sorted batch: the pieces, reversed, are rows 0..batch_size-1.
    return outputs, (torch.cat(finished_hidden[::-1]), torch.cat(finished_cell[::-1]))


class ElmoCharCnn(nn.Module):
    """Convolutions of several widths over a word's characters, max-pooled over positions, then the activation."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, num, width) for width, num in config.filters
        )
        self.activation = torch.relu if config.activation == "relu" else torch.tanh

    def forward(self, char_embeddings: torch.Tensor) -> torch.Tensor:
        """`(num_words, max_characters_per_token, char_embedding_dim)` -> `(num_words, num_filters)`.

        Each convolution is one matrix product over all windows of all words (faster on CPU than the direct
        convolution, measured in `benchmarks/`), so call it on bounded chunks of words.
        """
        num_words, chars, dim = char_embeddings.shape
        pooled = []
        for conv in self.convolutions:
            width = conv.kernel_size[0]
            # (num_words, chars - width + 1, dim, width): every window, flattened as the Conv1d weight (num, dim, width)
            windows = char_embeddings.unfold(1, width, 1).reshape(-1, dim * width)
            responses = linear(windows, conv.weight.reshape(conv.out_channels, -1), conv.bias)
            pooled.append(responses.view(num_words, chars - width + 1, -1).amax(dim=1))
        return self.activation(torch.cat(pooled, dim=-1))


class ElmoHighwayLayer(nn.Module):
    """`x <- g * relu(transform(x)) + (1 - g) * x` with `g = sigmoid(gate(x))` (Srivastava et al. 2015).

    As in bilm-tf, the gate multiplies the transformed branch.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(linear(hidden, self.gate.weight, self.gate.bias))
        transformed = torch.relu(linear(hidden, self.transform.weight, self.transform.bias))
        return gate * transformed + (1 - gate) * hidden


class ElmoHighway(nn.Module):
    """The stack of highway layers after the character CNN."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.layers = nn.ModuleList(ElmoHighwayLayer(config.num_filters) for _ in range(config.num_highway_layers))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden


class ElmoCharacterEncoder(nn.Module):
    """The context-independent token layer: character embeddings, CNN, highway, linear projection."""

    # Words encoded at once: bounds the CNN's intermediate memory ((chunk * max_characters_per_token, num_filters)
    # floats for the widest bank) whatever the number of words.
    chunk_size = 256

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.char_embeddings = nn.Embedding(config.char_vocab_size, config.char_embedding_dim, padding_idx=0)
        self.char_cnn = ElmoCharCnn(config)
        self.highway = ElmoHighway(config)
        self.projection = nn.Linear(config.num_filters, config.projection_dim)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """`(num_words, max_characters_per_token)` character ids -> `(num_words, projection_dim)` token vectors."""
        chunks = []
        for chunk in char_ids.split(self.chunk_size):
            features = self.highway(self.char_cnn(self.char_embeddings(chunk)))
            chunks.append(linear(features, self.projection.weight, self.projection.bias))
        return torch.cat(chunks)


class ElmoLstmCellWithProjection(nn.Module):
    """One direction of one biLSTM layer: an LSTM cell whose output is projected to `projection_dim` and clipped."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.input_to_gates = nn.Linear(config.projection_dim, 4 * config.lstm_dim, bias=False)
        self.hidden_to_gates = nn.Linear(config.projection_dim, 4 * config.lstm_dim)
        self.projection = nn.Linear(config.lstm_dim, config.projection_dim, bias=False)
        self.cell_clip = config.cell_clip
        self.projection_clip = config.projection_clip

    def forward(
        self, inputs: torch.Tensor, batch_sizes: list[int], initial_state: LstmState
    ) -> tuple[torch.Tensor, LstmState]:
        """`(num_positions, projection_dim)` packed time-major (see `lstm_with_projection`), in this direction's time
        order. Without autograd on CPU the recurrent weights, multiplied by a few rows at every step, also go in
        oneDNN's layout (`onednn_weight`); the input-to-gate products have hundreds of rows and gain nothing by it."""
        onednn_weights = None
        if all(onednn_linear_available(tensor, self.hidden_to_gates.weight) for tensor in (inputs, *initial_state)):
            onednn_weights = (onednn_weight(self.hidden_to_gates.weight), onednn_weight(self.projection.weight))
        return lstm_with_projection(
            inputs,
            batch_sizes,
            self.input_to_gates.weight,
            self.hidden_to_gates.weight,
            self.hidden_to_gates.bias,
            self.projection.weight,
            initial_state,
            self.cell_clip,
            self.projection_clip,
            onednn_weights,
        )


class ElmoLstmLayer(nn.Module):
    """One biLSTM layer: independent forward and backward cells, each fed its own direction's previous layer."""

    def __init__(self, config: ElmoConfig, residual: bool):
        super().__init__()
        self.forward_cell = ElmoLstmCellWithProjection(config)
        self.backward_cell = ElmoLstmCellWithProjection(config)
        self.residual = residual

    def forward(
        self,
        forward_inputs: torch.Tensor,
        backward_inputs: torch.Tensor,
        batch_sizes: list[int],
        initial_states: tuple[LstmState, LstmState],
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[LstmState, LstmState]]:
        """Inputs `(num_positions, projection_dim)`, packed time-major; the backward ones are packed from the
        time-reversed rows. Returns both outputs (same layout) and both final states."""
        forward_outputs, forward_state = self.forward_cell(forward_inputs, batch_sizes, initial_states[0])
        backward_outputs, backward_state = self.backward_cell(backward_inputs, batch_sizes, initial_states[1])
        if self.residual:
            forward_outputs = forward_outputs + forward_inputs
            backward_outputs = backward_outputs + backward_inputs
        return forward_outputs, backward_outputs, (forward_state, backward_state)


class ElmoBiLm(nn.Module):
    """The stack of biLSTM layers over the token layer (the first layer has no residual connection)."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            ElmoLstmLayer(config, residual=config.use_skip_connections and index > 0)
            for index in range(config.num_layers)
        )

    def forward(
        self, token_embeddings: torch.Tensor, lengths: torch.Tensor, initial_state: LstmState
    ) -> tuple[list[torch.Tensor], LstmState]:
        """Runs every layer in both directions.

        Args:
            token_embeddings: `(batch_size, sequence_length + 2, projection_dim)`, zero beyond each row's length.
            lengths: `(batch_size,)` tokens per row, boundaries included (at least 2).
            initial_state: `(h, c)`, `(2 * num_layers, batch_size, projection_dim | lstm_dim)`, row
                `2 * layer + direction` (direction 0 forward, 1 backward).

        Returns:
            One `(batch_size, sequence_length + 2, 2 * projection_dim)` tensor `[forward; backward]` per layer, zero
            beyond each row's length, and the final state in the layout of `initial_state`.
        """
        batch_size, steps, dim = token_embeddings.shape
        sorted_lengths, order = lengths.sort(descending=True)
        unsort = order.argsort()
        # Packed time-major positions: step t holds the rows (sorted longest first) still running at t.
        running = torch.arange(steps, device=lengths.device).unsqueeze(1) < sorted_lengths.unsqueeze(0)
        batch_sizes = running.sum(1).tolist()
        packed_steps, packed_rows = running.nonzero(as_tuple=True)
        # Where each packed position lives in the (batch_size * (sequence_length + 2)) flattened batch, per direction:
        # the backward direction reads row r at step t from position length - 1 - t.
        row_starts = order[packed_rows] * steps
        forward_index = row_starts + packed_steps
        backward_index = row_starts + sorted_lengths[packed_rows] - 1 - packed_steps

        flat_tokens = token_embeddings.reshape(batch_size * steps, dim)
        forward_inputs, backward_inputs = flat_tokens[forward_index], flat_tokens[backward_index]
        hidden, cell = initial_state[0][:, order], initial_state[1][:, order]
        layer_outputs, final_hidden, final_cell = [], [], []
        for index, layer in enumerate(self.layers):
            states = ((hidden[2 * index], cell[2 * index]), (hidden[2 * index + 1], cell[2 * index + 1]))
            forward_inputs, backward_inputs, (forward_state, backward_state) = layer(
                forward_inputs, backward_inputs, batch_sizes, states
            )
            # (batch_size * (sequence_length + 2), 2 * projection_dim), zeros at padding
            outputs = flat_tokens.new_zeros(batch_size * steps, 2 * dim)
            outputs[forward_index, :dim] = forward_inputs
            outputs[backward_index, dim:] = backward_inputs
            layer_outputs.append(outputs.view(batch_size, steps, 2 * dim))
            final_hidden += [forward_state[0], backward_state[0]]
            final_cell += [forward_state[1], backward_state[1]]
        return layer_outputs, (torch.stack(final_hidden)[:, unsort], torch.stack(final_cell)[:, unsort])


@dataclass
class ElmoModelOutput(ModelOutput):
    r"""
    Outputs of [`ElmoModel`], one vector per word (sentence boundaries removed, zeros at padding).

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, sequence_length, 2 * projection_dim)`):
            The top biLSTM layer, `[forward; backward]`.
        hidden_states (`tuple(torch.FloatTensor)`, returned with `output_hidden_states=True`):
            `num_layers + 1` tensors of shape `(batch_size, sequence_length, 2 * projection_dim)`: the token layer
            doubled, `[token; token]`, then every biLSTM layer.
        lstm_state (`tuple(torch.FloatTensor)`, returned with `output_lstm_state=True`):
            The final LSTM state `(h, c)`, `(2 * num_layers, batch_size, projection_dim)` and
            `(2 * num_layers, batch_size, lstm_dim)`, row `2 * layer + direction`; pass it as `lstm_state` to the
            next call to continue statefully, as the original implementations do.
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    lstm_state: tuple[torch.FloatTensor, torch.FloatTensor] | None = None


class ElmoPreTrainedModel(PreTrainedModel):
    """Weight initialisation and loading for every ELMo model."""

    config: ElmoConfig
    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    _no_split_modules = ["ElmoCharacterEncoder", "ElmoLstmLayer"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        super()._init_weights(module)
        if isinstance(module, ElmoScalarMix):
            module.reset_parameters()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Loads as usual, without transformers' per-tensor "Loading weights" bar (a checkpoint has a few dozen
        tensors; downloads keep their own bar)."""
        shown = logging.is_progress_bar_enabled()
        logging.disable_progress_bar()
        try:
            return super().from_pretrained(*args, **kwargs)
        finally:
            if shown:
                logging.enable_progress_bar()


class ElmoModel(ElmoPreTrainedModel):
    """The ELMo biLM: per-word contextual vectors from character ids.

    The model wraps each sentence in `<S>` / `</S>` itself and removes them from the outputs, so `input_ids` hold one
    row of character ids per word. By default every call starts from zero LSTM states (stateless, deterministic); pass
    `lstm_state` to start from a previous call's `output_lstm_state` as the original, stateful implementations do.

    Speed: no work is spent on padding, the character CNN runs once per distinct word of the batch, and without
    autograd (`torch.inference_mode()`) the CPU matrix products go through oneDNN, with the recurrent weights reordered
    once into its layout, or MKL for single rows (see `linear`); training uses the same code with autograd. Long
    inputs: there is no length limit; the character CNN runs on chunks of `ElmoCharacterEncoder.chunk_size` words and
    the input-to-gate products on blocks of `GATE_INPUT_BLOCK_ROWS` rows, so memory grows linearly with the number of
    words (a 5,000-word document is one call).
    """

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.token_encoder = ElmoCharacterEncoder(config)
        self.bilm = ElmoBiLm(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.token_encoder.char_embeddings

    def set_input_embeddings(self, value: nn.Embedding):
        self.token_encoder.char_embeddings = value

    def _check_inputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None):
        """Raises a clear error for inputs the model cannot read correctly."""
        if not isinstance(input_ids, torch.Tensor):
            raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}; use ElmoTokenizer.")
        if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
            raise TypeError(f"input_ids must hold integer character ids, got dtype {input_ids.dtype}.")
        chars = self.config.max_characters_per_token
        if input_ids.dim() != 3:
            raise ValueError(
                f"input_ids must have shape (batch_size, sequence_length, {chars}): one row of character ids per "
                f"word, as ElmoTokenizer returns; got shape {tuple(input_ids.shape)}."
            )
        if input_ids.shape[0] == 0:
            raise ValueError("input_ids is an empty batch (batch_size 0); pass at least one sentence.")
        if input_ids.shape[-1] != chars:
            raise ValueError(
                f"input_ids has {input_ids.shape[-1]} character ids per word, but this model reads "
                f"max_characters_per_token={chars}; tokenize with ElmoTokenizer(max_characters_per_token={chars})."
            )
        if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= self.config.char_vocab_size):
            raise ValueError(
                f"input_ids holds character ids outside 0..{self.config.char_vocab_size - 1} (found "
                f"{int(input_ids.min())}..{int(input_ids.max())}); ELMo ids come from ElmoTokenizer."
            )
        if attention_mask is not None:
            if tuple(attention_mask.shape) != tuple(input_ids.shape[:2]):
                raise ValueError(
                    f"attention_mask must have shape (batch_size, sequence_length) = {tuple(input_ids.shape[:2])}, "
                    f"got {tuple(attention_mask.shape)}."
                )
            if (attention_mask.bool() & (input_ids == 0).all(-1)).any():
                raise ValueError(
                    "attention_mask marks a word whose character ids are all 0 (a padding row); padding rows must "
                    "have attention_mask 0."
                )

    def _initial_lstm_state(self, lstm_state: LstmState | None, batch_size: int, like: torch.Tensor) -> LstmState:
        """The state each row starts from: row i of `lstm_state` for row i, zeros for rows it does not have."""
        shapes = (
            (2 * self.config.num_layers, self.config.projection_dim),
            (2 * self.config.num_layers, self.config.lstm_dim),
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

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        lstm_state: LstmState | None = None,
        output_hidden_states: bool | None = None,
        output_lstm_state: bool | None = None,
        **kwargs,
    ) -> ElmoModelOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length, max_characters_per_token)`):
                Character ids of each word, from [`ElmoTokenizer`]; a padding word is all zeros.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for words, 0 for padding. Derived from `input_ids` (any non-zero id) when not given.
            lstm_state (`tuple(torch.FloatTensor)`, *optional*):
                `(h, c)` to start the LSTMs from, as returned in `lstm_state` by a previous call: row i starts from
                its row i (zeros for rows it lacks). `None` (default) starts every row from zeros.
            output_hidden_states (`bool`, *optional*):
                Return all `num_layers + 1` layers in `hidden_states`.
            output_lstm_state (`bool`, *optional*):
                Return the final LSTM state in `lstm_state`. Rows of the given `lstm_state` beyond this batch are
                passed through unchanged, as the original implementations keep them.
        """
        if input_ids is None:
            raise ValueError("ElmoModel needs input_ids of shape (batch_size, sequence_length, max_characters_per_token).")
        self._check_inputs(input_ids, attention_mask)
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        mask = word_mask(input_ids, attention_mask)
        batch_size, sequence_length = mask.shape
        lengths = mask.sum(1)

        # Words to the front of each row (left padding or holes in the mask), in order; undone on the outputs.
        gather_order = words_first_order(mask)
        if gather_order is not None:
            input_ids = input_ids.gather(1, gather_order.unsqueeze(-1).expand_as(input_ids))
            mask = mask.gather(1, gather_order)

        # The char CNN runs once per distinct word of the batch (and the two boundary tokens), never on padding.
        chars = self.config.max_characters_per_token
        boundary_ids = torch.tensor(
            [word_to_char_ids(BEGIN_SENTENCE_TOKEN, chars), word_to_char_ids(END_SENTENCE_TOKEN, chars)],
            device=input_ids.device,
        )
        words = torch.cat([boundary_ids, input_ids[mask]])
        distinct_ids, occurrences = torch.unique(words, dim=0, return_inverse=True)
        embeddings = self.token_encoder(distinct_ids)[occurrences]
        begin_embedding, end_embedding, word_embeddings = embeddings[0], embeddings[1], embeddings[2:]
        # (batch_size, sequence_length + 2, projection_dim): <S>, the words, </S>, then zeros.
        tokens = word_embeddings.new_zeros(batch_size, sequence_length + 2, self.config.projection_dim)
        tokens[:, 1 : sequence_length + 1][mask] = word_embeddings
        tokens[:, 0] = begin_embedding
        tokens[torch.arange(batch_size, device=mask.device), lengths + 1] = end_embedding

        initial_state = self._initial_lstm_state(lstm_state, batch_size, tokens)
        layer_outputs, final_state = self.bilm(tokens, lengths + 2, initial_state)

        keep = mask.unsqueeze(-1).to(tokens.dtype)
        layers = [torch.cat([tokens, tokens], dim=-1)] + layer_outputs
        layers = [layer[:, 1 : sequence_length + 1] * keep for layer in layers]
        if gather_order is not None:
            restore = gather_order.argsort(dim=1).unsqueeze(-1).expand(-1, -1, layers[0].shape[-1])
            layers = [layer.gather(1, restore) for layer in layers]

        if output_lstm_state and lstm_state is not None and lstm_state[0].shape[1] > batch_size:
            final_state = tuple(
                torch.cat([new, old[:, batch_size:].to(new)], dim=1) for new, old in zip(final_state, lstm_state)
            )
        return ElmoModelOutput(
            last_hidden_state=layers[-1],
            hidden_states=tuple(layers) if output_hidden_states else None,
            lstm_state=final_state if output_lstm_state else None,
        )


class ElmoScalarMix(nn.Module):
    r"""A mix of the biLM layers (paper eq. 1): `gamma * sum_j w_j * h_j` with `w = softmax(s)`.

    The usual ways to build one:
    - `ElmoScalarMix(num_layers + 1)`: learned weights, starting equal (what a task head trains);
    - `ElmoScalarMix.top_layer(num_layers + 1)`: the top layer only (weights `[0, ..., 0, 1]`);
    - `ElmoScalarMix.average(num_layers + 1)`: the plain average of the layers;
    - `ElmoScalarMix.from_weights([0.2, 0.3, 0.5], gamma=1.0)`: any fixed weights, given as the normalised weights
      `w` themselves (non-negative, summing to 1), for example those a trained mix reports with `weights()`.
    The last three are fixed (nothing to train) and accept outputs computed under `torch.inference_mode()`.

    `fixed_weights` in the constructor are the *pre-softmax* scalars `s` (the config's `scalar_mix_parameters`,
    AllenNLP's convention): `fixed_weights=[0, 0, 1]` weighs the layers `[0.21, 0.21, 0.58]`, not the top layer only.

    Optionally each layer is normalised first (`"token"`: every word vector to zero mean and unit variance, independent
    of the batch; `"batch"`: one mean and variance over all words of the batch, as bilm-tf's `weight_layers` does, so a
    word's vector depends on its batch). Dropout applies to the mix. `l2_penalty()` is the paper's
    `lambda * ||s||^2`, which pulls the weights towards equal.
    """

    def __init__(
        self,
        num_representations: int,
        layer_norm: str | None = None,
        fixed_weights: list[float] | None = None,
        dropout: float = 0.0,
        l2_coefficient: float = 0.0,
    ):
        super().__init__()
        trainable = fixed_weights is None
        self.fixed_weights = fixed_weights
        self.scalar_parameters = nn.Parameter(torch.zeros(num_representations), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.ones(1), requires_grad=trainable)
        self.layer_norm = layer_norm
        self.dropout = nn.Dropout(dropout)
        self.l2_coefficient = l2_coefficient if trainable else 0.0
        self.reset_parameters()

    @classmethod
    def from_weights(
        cls, weights: list[float], gamma: float = 1.0, layer_norm: str | None = None
    ) -> "ElmoScalarMix":
        """A fixed mix applying exactly `weights` (non-negative, summing to 1; zeros drop a layer) and `gamma`."""
        weights = torch.tensor(weights, dtype=torch.float64)
        if weights.dim() != 1 or not len(weights) or not bool((torch.isfinite(weights) & (weights >= 0)).all()):
            raise ValueError(f"weights must be non-negative numbers, one per layer, got {weights.tolist()}.")
        if abs(weights.sum().item() - 1) > 1e-3:
            raise ValueError(
                f"weights must sum to 1 (they are the normalised weights softmax(s)), got {weights.tolist()} summing "
                f"to {weights.sum().item():.4g}; for the average of {len(weights)} layers use ElmoScalarMix.average."
            )
        mix = cls(len(weights), layer_norm=layer_norm, fixed_weights=weights.log().tolist())
        with torch.no_grad():
            mix.gamma.fill_(gamma)
        return mix

    @classmethod
    def top_layer(cls, num_representations: int) -> "ElmoScalarMix":
        """The top layer only, as a fixed mix of `num_representations` layers."""
        return cls.from_weights([0.0] * (num_representations - 1) + [1.0])

    @classmethod
    def average(cls, num_representations: int) -> "ElmoScalarMix":
        """The plain average of `num_representations` layers, as a fixed mix."""
        return cls.from_weights([1.0 / num_representations] * num_representations)

    def reset_parameters(self):
        """Equal weights (or the fixed ones) and gamma 1."""
        weights = self.fixed_weights if self.fixed_weights is not None else [0.0] * self.scalar_parameters.shape[0]
        init.copy_(self.scalar_parameters, torch.tensor(weights, dtype=self.scalar_parameters.dtype))
        init.ones_(self.gamma)

    def weights(self) -> torch.Tensor:
        """The normalised weights `softmax(s)` the mix applies, `(num_representations,)`."""
        return torch.softmax(self.scalar_parameters, dim=0)

    def _normalise(self, layer: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if self.layer_norm == "token":
            return nn.functional.layer_norm(layer, layer.shape[-1:], eps=1e-12)
        keep = mask.unsqueeze(-1).to(layer.dtype)
        count = (keep.sum() * layer.shape[-1]).clamp(min=1)
        mean = (layer * keep).sum() / count
        variance = (((layer - mean) * keep) ** 2).sum() / count
        return (layer - mean) / torch.sqrt(variance + 1e-12)

    def _check_inputs(self, hidden_states: tuple[torch.Tensor, ...], mask: torch.Tensor | None):
        """Raises a clear error for what the mix cannot use."""
        if hidden_states is None or isinstance(hidden_states, ModelOutput):
            raise TypeError(
                "ElmoScalarMix takes the model's layers: call the model with output_hidden_states=True and pass "
                "outputs.hidden_states."
            )
        if len(hidden_states) != self.scalar_parameters.shape[0]:
            raise ValueError(
                f"ElmoScalarMix mixes {self.scalar_parameters.shape[0]} layers, got {len(hidden_states)}."
            )
        if mask is None and self.layer_norm == "batch":
            raise ValueError("layer_norm='batch' needs the word mask: pass the tokenizer's attention_mask as mask.")
        trains = torch.is_grad_enabled() and (self.scalar_parameters.requires_grad or self.gamma.requires_grad)
        if trains and any(layer.is_inference() for layer in hidden_states):
            raise RuntimeError(
                "ElmoScalarMix got layers computed under torch.inference_mode(), which cannot train its weights. "
                "Compute them under torch.no_grad() instead (the biLM stays frozen), or also run the mix under "
                "torch.inference_mode() if you only need its output; a fixed mix (ElmoScalarMix.top_layer, "
                ".average, .from_weights) takes them anywhere."
            )

    def forward(self, hidden_states: tuple[torch.Tensor, ...], mask: torch.Tensor | None = None) -> torch.Tensor:
        """`num_representations` tensors `(batch_size, sequence_length, dim)` (`outputs.hidden_states`) and optionally
        the word mask `(batch_size, sequence_length)` (the tokenizer's `attention_mask`) -> `(batch_size,
        sequence_length, dim)`. With the mask, padding comes out zero; without it, padding stays as the layers have it
        (zero for `ElmoModel`'s outputs). `layer_norm="batch"` needs the mask."""
        self._check_inputs(hidden_states, mask)
        mixed = sum(
            weight * (self._normalise(layer, mask) if self.layer_norm else layer)
            for weight, layer in zip(self.weights(), hidden_states)
        )
        if mask is not None:
            mixed = mixed * mask.unsqueeze(-1).to(mixed.dtype)
        return self.dropout(self.gamma * mixed)

    def l2_penalty(self) -> torch.Tensor:
        """`lambda * ||s||^2` (zero for fixed weights)."""
        if not self.l2_coefficient:
            return self.scalar_parameters.new_zeros(())
        return self.l2_coefficient * self.scalar_parameters.pow(2).sum()


class ElmoTaskEncoder(nn.Module):
    """The task biLSTM over the ELMo vectors (the paper's NER/SRL shape); runs on the words only."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.lstm = nn.LSTM(
            config.hidden_size,
            config.task_lstm_dim,
            num_layers=config.task_lstm_layers,
            batch_first=True,
            bidirectional=True,
        )

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`(batch_size, sequence_length, hidden_size)` -> `(batch_size, sequence_length, 2 * task_lstm_dim)`, zero at
        padding."""
        order = words_first_order(mask)
        if order is not None:
            features = features.gather(1, order.unsqueeze(-1).expand_as(features))
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(features, lengths, batch_first=True, enforce_sorted=False)
        packed_outputs, _ = self.lstm(packed)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(
            packed_outputs, batch_first=True, total_length=features.shape[1]
        )
        if order is not None:
            outputs = outputs.gather(1, order.argsort(1).unsqueeze(-1).expand(-1, -1, outputs.shape[-1]))
        return outputs * mask.unsqueeze(-1).to(outputs.dtype)


class ElmoPreTrainedTaskModel(ElmoPreTrainedModel):
    """A task head: the biLM (frozen unless `config.freeze_bilm=False`), its own scalar mixes and a task encoder."""

    def __init__(self, config: ElmoConfig, num_mixes: int):
        super().__init__(config)
        self.elmo = ElmoModel(config)
        self.scalar_mixes = nn.ModuleList(
            ElmoScalarMix(
                config.num_layers + 1,
                layer_norm=config.scalar_mix_layer_norm,
                fixed_weights=config.scalar_mix_parameters,
                dropout=config.elmo_dropout,
                l2_coefficient=config.scalar_mix_l2_coefficient,
            )
            for _ in range(num_mixes)
        )
        self.task_encoder = ElmoTaskEncoder(config) if config.task_lstm_dim is not None else None
        self._set_trainable()

    def _set_trainable(self):
        """Freezes the biLM (unless `config.freeze_bilm=False`) and fixed mix weights."""
        self.elmo.requires_grad_(not self.config.freeze_bilm)
        for mix in self.scalar_mixes:
            mix.requires_grad_(mix.fixed_weights is None)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Loads as usual, then freezes again: loading re-creates every parameter as trainable."""
        loaded = super().from_pretrained(*args, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded)._set_trainable()
        return loaded

    def _adjust_missing_and_unexpected_keys(self, loading_info):
        """A head loaded on a biLM checkpoint is expected to lack its task layers: one line says so, instead of
        transformers' table of missing keys (which still lists anything missing from the biLM)."""
        super()._adjust_missing_and_unexpected_keys(loading_info)
        new = {key for key in loading_info.missing_keys if not key.startswith(f"{self.base_model_prefix}.")}
        if new:
            layers = sorted({key.rsplit(".", 1)[0] for key in new})
            logging.get_logger(__name__).warning(
                f"{type(self).__name__}: new task layers ({', '.join(layers)}) start from random values; train them."
            )
            loading_info.missing_keys -= new

    def _elmo_features(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, output_hidden_states: bool | None
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """Runs the biLM once and every mix: (features, word mask, biLM layers)."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.config.freeze_bilm):
            layers = self.elmo(
                input_ids, attention_mask=attention_mask, output_hidden_states=True, return_dict=True
            ).hidden_states
        mask = word_mask(input_ids, attention_mask)
        features = self.scalar_mixes[0](layers, mask)
        if self.task_encoder is not None:
            features = self.task_encoder(features, mask)
            if len(self.scalar_mixes) > 1:
                features = torch.cat([features, self.scalar_mixes[1](layers, mask)], dim=-1)
        return features, mask, layers

    def _feature_dim(self) -> int:
        if self.task_encoder is None:
            return self.config.hidden_size
        extra = self.config.hidden_size if len(self.scalar_mixes) > 1 else 0
        return 2 * self.config.task_lstm_dim + extra

    def _l2_penalty(self, labels: torch.Tensor, num_items_in_batch: torch.Tensor | int | None) -> torch.Tensor:
        """The mixes' L2 penalty, scaled by this batch's share of `num_items_in_batch` (Trainer counts the labels
        that are not -100 over all accumulated batches) so that gradient accumulation adds it once per step."""
        penalty = sum(mix.l2_penalty() for mix in self.scalar_mixes)
        if num_items_in_batch is None:
            return penalty
        return penalty * labels.ne(-100).sum() / num_items_in_batch

    def _check_label_ids(self, labels: torch.Tensor):
        valid = (labels == -100) | ((labels >= 0) & (labels < self.config.num_labels))
        if not bool(valid.all()):
            bad = labels[~valid][0].item()
            raise ValueError(
                f"labels hold id {bad}, outside 0..{self.config.num_labels - 1} (num_labels={self.config.num_labels}) "
                "and not -100 (ignored); set id2label/label2id (or num_labels) in the config to match your labels."
            )


class ElmoForTokenClassification(ElmoPreTrainedTaskModel):
    """ELMo with a per-word classifier: scalar mix -> dropout -> optional task biLSTM (optionally with a second mix
    concatenated to its output) -> linear. For tagging (POS, NER, chunking)."""

    def __init__(self, config: ElmoConfig):
        mixes = 2 if config.task_lstm_dim is not None and config.concatenate_elmo_to_task_output else 1
        super().__init__(config, num_mixes=mixes)
        self.num_labels = config.num_labels
        self.classifier = nn.Linear(self._feature_dim(), config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length, max_characters_per_token)`):
                Character ids of each word, from [`ElmoTokenizer`].
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for words, 0 for padding.
            labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                A label id per word in `0..num_labels - 1`; -100 is ignored (padding, unlabelled words).
            output_hidden_states (`bool`, *optional*):
                Return the biLM's `num_layers + 1` layers.
        """
        features, mask, layers = self._elmo_features(input_ids, attention_mask, output_hidden_states)
        logits = self.classifier(features)
        loss = None
        if labels is not None:
            if tuple(labels.shape) != tuple(mask.shape):
                raise ValueError(
                    f"labels must have shape (batch_size, sequence_length) = {tuple(mask.shape)}, one id per word "
                    f"(-100 for padding), got {tuple(labels.shape)}."
                )
            self._check_label_ids(labels)
            loss = self.loss_function(logits, labels, self.config, **kwargs)
            loss = loss + self._l2_penalty(labels, kwargs.get("num_items_in_batch"))
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=layers if output_hidden_states else None)


class ElmoForSequenceClassification(ElmoPreTrainedTaskModel):
    """ELMo with a sentence classifier: scalar mix -> dropout -> optional task biLSTM -> masked mean and max pooling
    -> linear. Single-label, multi-label and regression, chosen by `config.problem_type` as in transformers."""

    def __init__(self, config: ElmoConfig):
        super().__init__(config, num_mixes=1)
        self.num_labels = config.num_labels
        self.classifier = nn.Linear(2 * self._feature_dim(), config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length, max_characters_per_token)`):
                Character ids of each word, from [`ElmoTokenizer`].
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for words, 0 for padding.
            labels (`torch.Tensor`, *optional*):
                `(batch_size,)` class ids (single-label) or float targets (regression, `num_labels == 1`), or
                `(batch_size, num_labels)` floats (multi-label).
            output_hidden_states (`bool`, *optional*):
                Return the biLM's `num_layers + 1` layers.
        """
        features, mask, layers = self._elmo_features(input_ids, attention_mask, output_hidden_states)
        keep = mask.unsqueeze(-1)
        mean = (features * keep).sum(1) / keep.sum(1).clamp(min=1)
        maximum = features.masked_fill(~keep, float("-inf")).amax(1)
        maximum = maximum.masked_fill(~keep.any(1), 0.0)
        logits = self.classifier(torch.cat([mean, maximum], dim=-1))
        loss = None
        if labels is not None:
            self._check_sequence_labels(labels, batch_size=mask.shape[0])
            loss = self.loss_function(labels, logits, self.config, **kwargs)
            num_items_in_batch = kwargs.get("num_items_in_batch")
            if self.config.problem_type != "single_label_classification" and num_items_in_batch is not None:
                # The stock regression and multi-label losses are means that ignore `num_items_in_batch`; make them
                # sums over it, as the cross-entropy is, so gradient accumulation matches one large batch.
                loss = loss * labels.ne(-100).sum() / num_items_in_batch
            loss = loss + self._l2_penalty(labels, num_items_in_batch)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=layers if output_hidden_states else None)

    def _check_sequence_labels(self, labels: torch.Tensor, batch_size: int):
        if labels.shape[0] != batch_size:
            raise ValueError(f"labels has {labels.shape[0]} rows for a batch of {batch_size} sentences.")
        if labels.dtype.is_floating_point:
            if labels.dim() == 2 and labels.shape[1] != self.config.num_labels:
                raise ValueError(
                    f"multi-label labels must have shape (batch_size, num_labels={self.config.num_labels}), got "
                    f"{tuple(labels.shape)}."
                )
            return
        if labels.dim() != 1:
            raise ValueError(f"class-id labels must have shape (batch_size,), got {tuple(labels.shape)}.")
        self._check_label_ids(labels)


__all__ = [
    "ElmoBiLm",
    "ElmoCharacterEncoder",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoScalarMix",
    "lstm_with_projection",
]
