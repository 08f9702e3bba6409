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
Original implementations: allenai/bilm-tf (TensorFlow) and allenai/allennlp (PyTorch), Apache-2.0. How they compute
is described in this repository's docs/original_computation.md.

Every module computes what the paper says with its own submodules. The token layer and the LSTM recurrence are pure
functions with a readable reference (`reference_elmo.py`) and faster implementations of the same signature (CPU
inference kernels, a training autograd function, the export path's `scan`), listed in `kernels_elmo.py`, whose one
dispatcher picks the implementation for each call; `config.elmo_implementation = "eager"` always runs the reference.
A batch runs packed (no work on padding) or, under `torch.export` or with `elmo_implementation = "export"`, padded
with a mask (no host synchronisation, dynamic shapes): `reference_elmo.SequenceBatch`.

Dimension names used in the docstrings: `batch_size`, `sequence_length` (words), `max_characters_per_token`,
`projection_dim`, `lstm_dim`; `sequence_length + 2` counts the sentence boundaries `<S>` and `</S>`.
"""

import contextlib
import copy
import inspect
import os
from dataclasses import dataclass
from functools import partial

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import ModelOutput, SequenceClassifierOutput, TokenClassifierOutput
from transformers.modeling_utils import _add_variant
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, logging
from transformers.utils.generic import can_return_tuple

from .checks_elmo import (
    check_bilm_trainable,
    check_input_device,
    check_mix_arguments,
    check_mix_inputs,
    check_model_inputs,
    check_num_labels,
    check_right_padded,
    check_unread_arguments,
    initial_lstm_state,
    pretraining_labels,
    sequence_labels,
    token_labels,
)
from .configuration_elmo import ElmoConfig, is_int
from .errors import is_finite_real
from .kernels_elmo import (
    DIRECTIONS_IMPLEMENTATIONS,
    RECURRENCE_IMPLEMENTATIONS,
    TOKEN_LAYER_IMPLEMENTATIONS,
    StepThreads,
    choose_implementation,
    traced,
    uses_padded_batches,
)
from .packaged_elmo import check_save_directory, resolve_model_name
from .reference_elmo import (
    ACTIVATIONS,
    LstmLinears,
    LstmState,
    SequenceBatch,
    TokenLayers,
    WordsFirst,
    group_rows,
    log_expected_count,
    log_uniform_sample,
    to_device,
    word_mask,
)
from .tokenization_elmo import BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN, word_to_char_ids

# The alignment in bytes of the memory torch's CPU allocator hands out (c10's `gAlignment` on x86), by which MKL and
# oneDNN pick their code paths.
MEMORY_ALIGNMENT = 64


class ElmoCharCnn(nn.Module):
    """Convolutions of several widths over a word's characters, max-pooled over positions, then the activation."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, num, width) for width, num in config.filters
        )
        self.activation = ACTIVATIONS[config.activation]

    def forward(self, char_embeddings: torch.Tensor) -> torch.Tensor:
        """`(num_words, max_characters_per_token, char_embedding_dim)` -> `(num_words, num_filters)`."""
        # (num_words, char_embedding_dim, max_characters_per_token): channels first, as Conv1d reads them
        channels_first = char_embeddings.transpose(1, 2)
        pooled = [conv(channels_first).amax(dim=-1) for conv in self.convolutions]
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
        """`(num_words, num_filters)` -> same shape."""
        gate = torch.sigmoid(self.gate(hidden))
        return gate * torch.relu(self.transform(hidden)) + (1 - gate) * hidden


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
    """The context-independent token layer: character embeddings, CNN, highway, linear projection.

    With `config.word_embedding_dim` (ELMoForManyLangs), a word embedding is concatenated in front of the highway
    output and projected with it; the word's id is the last of its `row_width` ids.
    """

    # Words encoded at once: bounds the CNN's intermediate memory ((chunk, num_filters, max_characters_per_token)
    # floats) whatever the number of words.
    chunk_size = 256

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.config = config
        self.char_embeddings = nn.Embedding(config.char_vocab_size, config.char_embedding_dim, padding_idx=0)
        self.word_embeddings = (
            nn.Embedding(config.word_embedding_vocab_size, config.word_embedding_dim, padding_idx=0)
            if config.word_embedding_dim
            else None
        )
        self.char_cnn = ElmoCharCnn(config)
        self.highway = ElmoHighway(config)
        self.projection = nn.Linear(config.word_embedding_dim + config.num_filters, config.projection_dim)

    def forward(self, word_ids: torch.Tensor) -> torch.Tensor:
        """`(..., row_width)` ids (characters, then the word id if any), such as `input_ids`, -> `(...,
        projection_dim)`: each row of ids alone (a padding row too)."""
        if word_ids.dim() == 0 or word_ids.shape[-1] != self.config.row_width:
            raise ValueError(
                f"{type(self).__name__} takes rows of {self.config.row_width} ids per word (shape (..., "
                f"{self.config.row_width}), as ElmoTokenizer's input_ids), got shape {tuple(word_ids.shape)}."
            )
        leading = word_ids.shape[:-1]
        word_ids = word_ids.reshape(-1, self.config.row_width)
        layers = TokenLayers(
            self.char_embeddings, self.char_cnn, self.highway, self.word_embeddings, self.projection,
            self.config.max_characters_per_token, self.char_cnn.activation, tuple(self.char_cnn.convolutions),
            tuple((layer.transform, layer.gate) for layer in self.highway.layers),
        )
        # A padded batch (the export path) takes all words at once: a number of chunks would depend on the data.
        packed = not uses_padded_batches(self.config)
        token_layer = choose_implementation(TOKEN_LAYER_IMPLEMENTATIONS, self, packed, word_ids)
        encoded = token_layer(word_ids, layers, self.chunk_size if packed else None)
        return encoded.view(*leading, self.config.projection_dim)


class ElmoLstmCellWithProjection(nn.Module):
    """One direction of one biLSTM layer: an LSTM cell whose output is projected to `projection_dim` and clipped.

    With input `x`, state `(h, c)` and gates in the order i, f, g, o (the original TensorFlow cell's forget bias of 1
    is folded into `hidden_to_gates.bias` by the conversion):

        i, f, g, o = input_to_gates(x) + hidden_to_gates(h)
        c = clip(sigmoid(f) * c + sigmoid(i) * tanh(g), cell_clip)
        h = clip(projection(sigmoid(o) * tanh(c)), projection_clip)
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.config = config
        self.input_to_gates = nn.Linear(config.projection_dim, 4 * config.lstm_dim, bias=False)
        self.hidden_to_gates = nn.Linear(config.projection_dim, 4 * config.lstm_dim)
        self.projection = nn.Linear(config.lstm_dim, config.projection_dim, bias=False)
        self.cell_clip = config.cell_clip
        self.projection_clip = config.projection_clip

    def forward(
        self, inputs: torch.Tensor, batch: SequenceBatch, initial_state: LstmState
    ) -> tuple[torch.Tensor, LstmState]:
        """Runs this direction over a batch, state in and state out (`reference_elmo.lstm_recurrence`).

        Args:
            inputs: `(num_positions, projection_dim)` packed or `(steps, batch_size, projection_dim)` padded, as
                `batch` lays them out, in this direction's time order.
            batch: the batch's layout.
            initial_state: `(h, c)` of shapes `(batch_size, projection_dim)` and `(batch_size, lstm_dim)`, rows in
                the batch's running order (`batch.sorted_rows`).

        Returns:
            The outputs `(..., projection_dim)` in the layout of the inputs and the final `(h, c)` of every row (the
            state after its own last step).
        """
        recurrence = choose_implementation(RECURRENCE_IMPLEMENTATIONS, self, batch.packed, inputs, *initial_state)
        linears = LstmLinears(self.input_to_gates, self.hidden_to_gates, self.projection)
        return recurrence(inputs, batch, initial_state, linears, self.cell_clip, self.projection_clip)


class ElmoLstmLayer(GradientCheckpointingLayer):
    """One biLSTM layer: independent forward and backward cells, each fed its own direction's previous layer. With
    `model.activation_checkpointing_enable()` (Trainer's `activation_checkpointing=True`), a layer that records
    gradients keeps only its inputs and computes its steps again in the backward pass."""

    def __init__(self, config: ElmoConfig, residual: bool):
        super().__init__()
        self.config = config
        self.forward_cell = ElmoLstmCellWithProjection(config)
        self.backward_cell = ElmoLstmCellWithProjection(config)
        self.residual = residual

    def forward(
        self,
        forward_inputs: torch.Tensor,
        backward_inputs: torch.Tensor,
        batch: SequenceBatch,
        initial_states: tuple[LstmState, LstmState],
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[LstmState, LstmState]]:
        """Both directions' inputs as `batch` lays them out (the backward ones from the time-reversed rows). Returns
        both outputs (same layout) and both final states. The directions run in turn or at once, as the dispatcher
        chooses (`kernels_elmo.DIRECTIONS_IMPLEMENTATIONS`)."""
        schedule = choose_implementation(
            DIRECTIONS_IMPLEMENTATIONS, self, batch.packed, forward_inputs, backward_inputs, *initial_states[0],
            *initial_states[1],
        )
        (forward_outputs, forward_state), (backward_outputs, backward_state) = schedule(
            (self.forward_cell, self.backward_cell), (forward_inputs, backward_inputs), batch, initial_states
        )
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
        self, token_embeddings: torch.Tensor, batch: SequenceBatch, initial_state: LstmState
    ) -> tuple[list[torch.Tensor], LstmState]:
        """Runs every layer in both directions.

        Args:
            token_embeddings: `(batch_size, sequence_length + 2, projection_dim)`, zero beyond each row's length.
            batch: the rows' lengths (boundaries included, at least 2) and the layout to run them in.
            initial_state: `(h, c)`, `(2 * num_layers, batch_size, projection_dim | lstm_dim)`, row
                `2 * layer + direction` (direction 0 forward, 1 backward).

        Returns:
            One `(batch_size, sequence_length + 2, 2 * projection_dim)` tensor `[forward; backward]` per layer, zero
            beyond each row's length, and the final state in the layout of `initial_state`.
        """
        forward_inputs, backward_inputs = batch.directions(token_embeddings)
        hidden, cell = (batch.sorted_rows(state) for state in initial_state)
        layer_outputs, final_hidden, final_cell = [], [], []
        for index, layer in enumerate(self.layers):
            states = ((hidden[2 * index], cell[2 * index]), (hidden[2 * index + 1], cell[2 * index + 1]))
            forward_inputs, backward_inputs, (forward_state, backward_state) = layer(
                forward_inputs, backward_inputs, batch, states
            )
            layer_outputs.append(batch.merge(forward_inputs, backward_inputs))
            final_hidden += [forward_state[0], backward_state[0]]
            final_cell += [forward_state[1], backward_state[1]]
        return layer_outputs, tuple(batch.original_rows(torch.stack(state)) for state in (final_hidden, final_cell))


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


def init_like_the_original(model: "ElmoModel") -> None:
    """Initialises the biLM as the original's training code did (`docs/pretraining.md`, "Initialisation"):
    character embeddings uniform in [-1, 1]; the CNN's filters uniform in [-0.05, 0.05] with relu, of standard
    deviation 1/sqrt(width * dim) with tanh; highway and projection weights of standard deviation 1/sqrt(fan-in), the
    highway gates nearly closed (bias -2); Glorot-uniform LSTM weights with the forget bias 1. With transformers' 0.02
    everywhere the token layer starts near zero, and Adam's first steps leave nearly all of its variance in one
    direction. Weights loaded from a checkpoint are left alone (`transformers.initialization`)."""
    encoder = model.token_encoder
    characters = encoder.char_embeddings.weight
    init.uniform_(characters, -1.0, 1.0)
    # A slice does not carry the flag that keeps a loaded tensor as it was: ask the whole tensor (as transformers does
    # for padding rows). Nothing is drawn from the random generator for a loaded tensor.
    if not getattr(characters, "_is_hf_initialized", False):
        init.zeros_(characters[encoder.char_embeddings.padding_idx])
    for convolution in encoder.char_cnn.convolutions:
        if encoder.char_cnn.activation is torch.relu:
            init.uniform_(convolution.weight, -0.05, 0.05)
        else:
            init.normal_(convolution.weight, std=(convolution.kernel_size[0] * convolution.in_channels) ** -0.5)
        init.zeros_(convolution.bias)
    for layer in encoder.highway.layers:
        for linear, bias in ((layer.transform, 0.0), (layer.gate, -2.0)):
            init.normal_(linear.weight, std=linear.in_features**-0.5)
            init.constant_(linear.bias, bias)
    init.normal_(encoder.projection.weight, std=encoder.projection.in_features**-0.5)
    init.zeros_(encoder.projection.bias)
    for layer in model.bilm.layers:
        for cell in (layer.forward_cell, layer.backward_cell):
            lstm_dim = cell.projection.in_features
            # TensorFlow's LSTM kernel is one matrix over [input; hidden]: one Glorot bound for both halves.
            bound = (6.0 / (cell.input_to_gates.in_features + cell.hidden_to_gates.in_features + 4 * lstm_dim)) ** 0.5
            init.uniform_(cell.input_to_gates.weight, -bound, bound)
            init.uniform_(cell.hidden_to_gates.weight, -bound, bound)
            init.zeros_(cell.hidden_to_gates.bias)
            if not getattr(cell.hidden_to_gates.bias, "_is_hf_initialized", False):
                init.ones_(cell.hidden_to_gates.bias[lstm_dim : 2 * lstm_dim])
            bound = (6.0 / (lstm_dim + cell.projection.out_features)) ** 0.5
            init.uniform_(cell.projection.weight, -bound, bound)


def align_in_memory(model: nn.Module) -> None:
    """Moves each CPU parameter and buffer whose data does not start at a multiple of `MEMORY_ALIGNMENT` bytes (a
    safetensors file maps its tensors at any offset) to memory that does, in place (`.data`, so tied and shared
    parameters stay one object). MKL picks its code paths by the alignment of the matrices it multiplies: without
    this, a loaded model's reference modules computed other bits than the model it was saved from."""
    for module in model.modules():
        for tensor in (*module._parameters.values(), *module._buffers.values()):
            if (
                tensor is not None
                and type(tensor.data) is torch.Tensor
                and tensor.device.type == "cpu"
                and tensor.data_ptr() % MEMORY_ALIGNMENT
            ):
                tensor.data = tensor.data.clone(memory_format=torch.contiguous_format)


class ElmoPreTrainedModel(PreTrainedModel):
    """Weight initialisation and loading for every ELMo model."""

    config: ElmoConfig
    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    _no_split_modules = ["ElmoCharacterEncoder", "ElmoLstmLayer"]
    supports_gradient_checkpointing = True
    # A pretraining folder (the packaged model is one) holds the word softmax too: the biLM and the task heads load it
    # without it, silently.
    _keys_to_ignore_on_load_unexpected = [r"^softmax\."]

    def __init__(self, config: ElmoConfig, *inputs, **kwargs):
        # Fields are checked as they are set, the constraints between them (e.g. scalar_mix_parameters against
        # num_layers) only as a whole: check again before any module reads the config.
        config.validate()
        super().__init__(config, *inputs, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """transformers' defaults, except for the biLM and the word softmax, which start as the original's training
        code started them (`init_like_the_original`)."""
        super()._init_weights(module)
        if module is getattr(self, "softmax", None):
            init.normal_(module.weight, std=module.in_features**-0.5)
            init.zeros_(module.bias)
        if isinstance(module, ElmoScalarMix):
            module.reset_parameters()
        if isinstance(module, ElmoModel):
            init.copy_(module.boundary_char_ids, module.boundary_char_ids_of(module.config))
            # Here, not per submodule: transformers skips the submodules of remote code that hold no parameter of
            # their own (the encoder, the cells), and the model itself always comes here (its buffer).
            init_like_the_original(module)

    def to_empty(self, *, device: torch.device | str | None, recurse: bool = True) -> "ElmoPreTrainedModel":
        """As `nn.Module.to_empty`, then each `ElmoModel`'s boundary rows again: a model built on the meta device,
        moved with `to_empty` and given its weights by `load_state_dict` would otherwise hold uninitialised ids there
        (a non-persistent buffer, which no state dict restores)."""
        super().to_empty(device=device, recurse=recurse)
        for module in self.modules():
            if isinstance(module, ElmoModel):
                module.boundary_char_ids.copy_(module.boundary_char_ids_of(module.config))
        return self

    def _reads_input_values(self) -> bool:
        """Whether the forward may read its inputs' values (ids, mask, labels) on the host, to check them or branch
        on them: not in a graph traced on the export path, which must take no shape or branch from the data."""
        return not (uses_padded_batches(self.config) and traced())

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """As transformers' (the tokens are character ids), refusing before anything changes a size the config would
        refuse: fewer ids than ELMo's 262 (the tokenizer makes them all), or than a dictionary's boundary rows use;
        and sizes that are no positive int (the config's strict field would name only itself). Without the check the
        model resized, then its forward refused the ids and `save_pretrained` its config."""
        if new_num_tokens is not None:
            for name, value in (("new_num_tokens", new_num_tokens), ("pad_to_multiple_of", pad_to_multiple_of)):
                if value is not None and not is_int(value):
                    raise TypeError(f"resize_token_embeddings: {name} must be an int, got {value!r}.")
            if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
                raise ValueError(
                    f"resize_token_embeddings: pad_to_multiple_of must be positive, got {pad_to_multiple_of}."
                )
            size = new_num_tokens
            if pad_to_multiple_of is not None:
                size = -(-new_num_tokens // pad_to_multiple_of) * pad_to_multiple_of
            resized = copy.deepcopy(self.config)
            resized.char_vocab_size = size
            try:
                resized.validate_architecture()
            except ValueError as error:
                raise ValueError(f"resize_token_embeddings({new_num_tokens}) is refused: {error}") from None
        return super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike | None, *args, **kwargs):
        """Loads as usual, without transformers' per-tensor "Loading weights" bar (a checkpoint has a few dozen
        tensors; downloads keep their own bar). The name of a packaged model (`elmo_hf.packaged_models()`) loads it
        offline."""
        shown = logging.is_progress_bar_enabled()
        logging.disable_progress_bar()
        try:
            loaded = super().from_pretrained(resolve_model_name(pretrained_model_name_or_path), *args, **kwargs)
        except SafetensorError as error:
            # safetensors names neither the file nor the cause a user can act on.
            raise OSError(
                f"The weights of {pretrained_model_name_or_path} cannot be read ({error}): a .safetensors "
                f"file there is cut short or not a safetensors file. Save or download the model again."
            ) from error
        finally:
            if shown:
                logging.enable_progress_bar()
        align_in_memory(loaded[0] if isinstance(loaded, tuple) else loaded)
        return loaded

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs):
        """As transformers', but a path that is a file raises (`check_save_directory`) instead of saving nothing, and
        a previous save's weights in the other layout (of the same `variant`) are removed: transformers left a
        `model.safetensors` (`model.VARIANT.safetensors`) beside new shards, and `from_pretrained` then loaded it, the
        old weights, without a word."""
        check_save_directory(save_directory)
        arguments = inspect.signature(PreTrainedModel.save_pretrained).bind(self, save_directory, *args, **kwargs)
        variant = arguments.arguments.get("variant")
        layouts = [
            os.path.join(save_directory, _add_variant(name, variant))
            for name in (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME)
        ]

        def stats() -> list[tuple[int, int, int] | None]:
            """Each layout's file as identity, size and modification time (`None` where absent)."""
            found = [os.stat(path) if os.path.isfile(path) else None for path in layouts]
            return [stat and (stat.st_ino, stat.st_size, stat.st_mtime_ns) for stat in found]

        before = stats()
        super().save_pretrained(save_directory, *args, **kwargs)
        written = [old != new and new is not None for old, new in zip(before, stats())]
        if arguments.arguments.get("is_main_process", True) and sum(written) == 1:
            stale = layouts[written.index(False)]
            if os.path.isfile(stale):
                os.remove(stale)


class ElmoModel(ElmoPreTrainedModel):
    """The ELMo biLM: per-word contextual vectors from character ids.

    The model wraps each sentence in `<S>` / `</S>` itself and removes them from the outputs, so `input_ids` hold one
    row of character ids per word. By default every call starts from zero LSTM states (stateless, deterministic); pass
    `lstm_state` to start from a previous call's `output_lstm_state` as the original, stateful implementations do.

    Speed: no work is spent on padding, the character CNN runs once per distinct word of the batch (a word's token
    vector does not depend on its context), and on CPU without autograd (`torch.inference_mode()`) the token layer
    and the LSTM cells run the kernels of `cpu_kernels.py` (chosen by `kernels_elmo.choose_implementation`;
    `config.elmo_implementation = "eager"` turns them off). Long inputs: there is no length limit; the character CNN
    runs on chunks of `ElmoCharacterEncoder.chunk_size` words, so memory grows linearly with the number of words (a
    5,000-word document is one call).
    """

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.token_encoder = ElmoCharacterEncoder(config)
        self.bilm = ElmoBiLm(config)
        # (2, row_width): the input ids of <S> and </S>, which the model adds to every sentence.
        self.register_buffer("boundary_char_ids", self.boundary_char_ids_of(config), persistent=False)
        self.post_init()

    @staticmethod
    def boundary_char_ids_of(config: ElmoConfig) -> torch.Tensor:
        """The config's boundary rows for a character dictionary, else the fixed UTF-8 byte rows."""
        if config.boundary_input_ids is not None:
            return torch.tensor(config.boundary_input_ids)
        chars = config.max_characters_per_token
        return torch.tensor([word_to_char_ids(token, chars) for token in (BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN)])

    def get_input_embeddings(self) -> nn.Embedding:
        return self.token_encoder.char_embeddings

    def set_input_embeddings(self, value: nn.Embedding):
        self.token_encoder.char_embeddings = value

    def _boundary_tokens(self, input_ids: torch.Tensor, mask: torch.Tensor, packed: bool) -> torch.Tensor:
        """The token vectors of every sentence wrapped in `<S>`, `</S>`: `(batch_size, sequence_length + 2,
        projection_dim)`, zero beyond each row's length + 2. Rows must be right-padded (`mask`).

        A packed batch runs the token layer once per distinct row of ids (characters, and the word id if any) and the
        two boundary tokens, never on padding; a padded one (the export path) on every position, taking no shape from
        the data. The packed path reads the data on the host only before the token layer is launched (where the words
        are, which rows are distinct, `group_rows`): on a GPU the host then queues the rest of the forward while the
        token layer runs, instead of waiting for it. Given ids on the host (the CPU) while the model is on a GPU, it
        reads them there, never waiting for the GPU, and sends the token layer only the distinct rows and one index.
        """
        batch_size, sequence_length = mask.shape
        lengths = mask.sum(1)
        device = self.boundary_char_ids.device
        # On the host, the boundary rows come from the config, as the buffer did (a copy from a GPU would wait).
        boundaries = self.boundary_char_ids if input_ids.device == device else self.boundary_char_ids_of(self.config)
        boundaries = boundaries.to(input_ids)
        if packed:
            rows, positions = mask.nonzero(as_tuple=True)
            words = torch.cat([boundaries, input_ids[rows, positions]])
            first, occurrences = group_rows(words)
            embeddings = self.token_encoder(to_device(words[first], device))
            # Each position's row of `embeddings`, padding the zero row appended to them: one gather.
            table = nn.functional.pad(embeddings, (0, 0, 0, 1))
            where = occurrences.new_full((batch_size, sequence_length + 2), embeddings.shape[0])
            where[:, 0] = occurrences[0]
            where[rows, positions + 1] = occurrences[2:]
            where[torch.arange(batch_size, device=mask.device), lengths + 1] = occurrences[1]
            return table[to_device(where, device)]
        embeddings = self.token_encoder(torch.cat([boundaries, input_ids.reshape(-1, self.config.row_width)]))
        words = embeddings[2:].view(batch_size, sequence_length, embeddings.shape[-1]) * mask.unsqueeze(-1)
        tokens = nn.functional.pad(words, (0, 0, 1, 1))
        steps = torch.arange(sequence_length + 2, device=mask.device)
        tokens = torch.where((steps == 0).unsqueeze(-1), embeddings[0], tokens)
        return torch.where((steps == lengths.unsqueeze(1) + 1).unsqueeze(-1), embeddings[1], tokens)

    def checked_inputs(
        self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, caller: nn.Module
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Checks the inputs of `caller` (this model or a model around it) and returns the ids as int64 and the mask
        where they are read: where they were given (the model's device, or the host, where the tokenizer leaves them:
        see `_boundary_tokens`), or on the model's device for the padded batches of the export path, which reads
        nothing on the host."""
        check_input_device(input_ids, self.boundary_char_ids.device)
        check_model_inputs(self.config, input_ids, attention_mask, caller._reads_input_values(), model=caller)
        if uses_padded_batches(self.config):
            input_ids, attention_mask = (
                None if tensor is None else to_device(tensor, self.boundary_char_ids.device)
                for tensor in (input_ids, attention_mask)
            )
        return input_ids.long(), attention_mask  # any integer dtype that holds the ids (checked) reads the same

    def boundary_layers(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        lstm_state: LstmState | None = None,
        final_steps: bool = True,
    ) -> tuple[list[torch.Tensor], LstmState | None]:
        """The biLM's layers with the sentence boundaries kept (what the pretraining softmax reads), and the final
        LSTM state. Rows must be right-padded: each row's words first, then padding.

        Args:
            input_ids, attention_mask, lstm_state: as for `forward`.
            final_steps: `False` skips each direction's last step (`SequenceBatch`) where the batch is packed: the
                biLSTM layers' forward halves are then zero at `</S>` and their backward halves at `<S>`, and no
                final state is returned. `forward` skips them unless asked for the state: it drops the boundaries,
                so a sentence of n words runs n + 1 steps per direction instead of n + 2.

        Returns:
            `num_layers + 1` tensors `(batch_size, sequence_length + 2, 2 * projection_dim)`: `[token; token]`, then
            every biLSTM layer, `<S>` at position 0 and `</S>` at each row's length + 1, zeros beyond; and the final
            `(h, c)` as `forward` returns it (`None` where the final steps were skipped).
        """
        mask = word_mask(input_ids, attention_mask)
        lengths = mask.sum(1)
        packed = not uses_padded_batches(self.config)
        batch = SequenceBatch(lengths + 2, mask.shape[1] + 2, packed, final_steps)
        tokens = self._boundary_tokens(input_ids, mask, batch.packed)
        batch.to(tokens.device)
        initial_state = initial_lstm_state(self.config, lstm_state, mask.shape[0], tokens)
        layer_outputs, final_state = self.bilm(tokens, batch, initial_state)
        return [torch.cat([tokens, tokens], dim=-1)] + layer_outputs, final_state if batch.final_steps else None

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
                passed through unchanged, as the original implementations keep them. Without it, each direction
                skips its step at the far boundary, whose output is dropped (`boundary_layers`).
        """
        check_unread_arguments(self, kwargs)
        padded = uses_padded_batches(self.config)
        input_ids, attention_mask = self.checked_inputs(input_ids, attention_mask, self)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        mask = word_mask(input_ids, attention_mask)
        batch_size, sequence_length = mask.shape
        # The CPU kernels' thread count holds between them (nothing to hold where a compiler traces the call).
        with contextlib.nullcontext() if traced() else StepThreads.scope():
            # Words to the front of each row (left padding or holes in the mask), in order; undone on the outputs.
            words_first = WordsFirst(mask, packed=not padded)
            layers, final_state = self.boundary_layers(
                words_first.apply(input_ids), words_first.mask, lstm_state, final_steps=bool(output_lstm_state)
            )
            words_first.to(layers[0].device)
            keep = words_first.mask.unsqueeze(-1).to(layers[0].dtype)
            layers = [words_first.restore(layer[:, 1 : sequence_length + 1] * keep) for layer in layers]
        # Rows of the given state beyond this batch pass through (the export path takes exactly batch_size rows).
        if output_lstm_state and not padded and lstm_state is not None and lstm_state[0].shape[1] > batch_size:
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
        check_mix_arguments(num_representations, layer_norm, fixed_weights, l2_coefficient)
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
        if not is_finite_real(gamma):  # NaN or inf gives NaN vectors, a str fails inside torch's fill_
            raise ValueError(f"gamma must be a finite number, got {gamma!r}.")
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
            mix.gamma.fill_(float(gamma))
        return mix

    @classmethod
    def top_layer(cls, num_representations: int) -> "ElmoScalarMix":
        """The top layer only, as a fixed mix of `num_representations` layers."""
        check_mix_arguments(num_representations)
        return cls.from_weights([0.0] * (num_representations - 1) + [1.0])

    @classmethod
    def average(cls, num_representations: int) -> "ElmoScalarMix":
        """The plain average of `num_representations` layers, as a fixed mix."""
        check_mix_arguments(num_representations)
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

    def forward(self, hidden_states: tuple[torch.Tensor, ...], mask: torch.Tensor | None = None) -> torch.Tensor:
        """`num_representations` tensors `(batch_size, sequence_length, dim)` (`outputs.hidden_states`) and optionally
        the word mask `(batch_size, sequence_length)` (the tokenizer's `attention_mask`) -> `(batch_size,
        sequence_length, dim)`. With the mask, padding comes out zero; without it, padding stays as the layers have it
        (zero for `ElmoModel`'s outputs). `layer_norm="batch"` needs the mask. The mask may be where the tokenizer left
        it (the host) while the layers are on a GPU, as `ElmoModel` takes it: it is moved to them."""
        check_mix_inputs(self, hidden_states, mask)
        if mask is not None:
            mask = to_device(mask, hidden_states[0].device)
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


class ElmoTaskEncoder(GradientCheckpointingLayer):
    """The task biLSTM over the ELMo vectors (the paper's NER/SRL shape); runs on the words only. Checkpointed like the
    biLM's layers (`ElmoLstmLayer`): with a frozen biLM, which runs without gradients, it is the only layer that is.

    A packed batch runs the `nn.LSTM`; a padded one (the export path: an `nn.LSTM` over packed sequences cannot be
    exported) runs each of its layers and directions as the ELMo recurrence (`reference_elmo.lstm_recurrence`) on the
    `nn.LSTM`'s own weights: a plain LSTM is that recurrence without projection and clips.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.config = config
        self.lstm = nn.LSTM(
            config.hidden_size,
            config.task_lstm_dim,
            num_layers=config.task_lstm_layers,
            batch_first=True,
            bidirectional=True,
        )

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`(batch_size, sequence_length, hidden_size)` -> `(batch_size, sequence_length, 2 * task_lstm_dim)`, zero at
        padding. The word `mask` may be on the host while `features` are on a GPU (ids given on the host): the
        layout is then read there, without waiting for the GPU, and moved."""
        words_first = WordsFirst(mask, packed=not uses_padded_batches(self.config)).to(features.device)
        batch_size, sequence_length = mask.shape
        if words_first.packed and sequence_length == 0:  # only texts without words (an LSTM cannot pack zero steps)
            return features.new_zeros(batch_size, 0, 2 * self.lstm.hidden_size)
        inputs, lengths = words_first.apply(features), mask.sum(1)
        if words_first.packed:
            packed = nn.utils.rnn.pack_padded_sequence(
                inputs, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
            )
            outputs = nn.utils.rnn.pad_packed_sequence(
                self.lstm(packed)[0], batch_first=True, total_length=sequence_length
            )[0]
        else:
            batch = SequenceBatch(lengths, sequence_length, packed=False).to(features.device)
            for layer in range(self.lstm.num_layers):
                directions = []
                for direction_inputs, suffix in zip(batch.directions(inputs), ("", "_reverse")):
                    weight_ih, bias_ih, weight_hh, bias_hh = (
                        getattr(self.lstm, f"{name}_l{layer}{suffix}")
                        for name in ("weight_ih", "bias_ih", "weight_hh", "bias_hh")
                    )
                    linears = LstmLinears(
                        partial(nn.functional.linear, weight=weight_ih, bias=bias_ih),
                        partial(nn.functional.linear, weight=weight_hh, bias=bias_hh),
                        None,
                    )
                    # two zero tensors: the scan's initial state may not alias
                    state = tuple(features.new_zeros(batch_size, self.lstm.hidden_size) for _ in range(2))
                    recurrence = choose_implementation(RECURRENCE_IMPLEMENTATIONS, self, False, direction_inputs)
                    directions.append(recurrence(direction_inputs, batch, state, linears, None, None)[0])
                inputs = batch.merge(*directions)
            outputs = inputs
        return words_first.restore(outputs) * to_device(mask, outputs.device).unsqueeze(-1).to(outputs.dtype)


class ElmoPreTrainedTaskModel(ElmoPreTrainedModel):
    """A task head: the biLM (frozen unless `config.freeze_bilm=False`), its own scalar mix of the biLM layers and a
    task encoder; with `task_output_mix`, a second, independent mix concatenated to the task encoder's output."""

    def __init__(self, config: ElmoConfig, task_output_mix: bool = False):
        super().__init__(config)
        self.elmo = ElmoModel(config)
        self.scalar_mix = self._scalar_mix(config)
        self.task_encoder = ElmoTaskEncoder(config) if config.task_lstm_dim is not None else None
        self.task_output_scalar_mix = self._scalar_mix(config) if task_output_mix else None
        self._set_trainable()

    @staticmethod
    def _scalar_mix(config: ElmoConfig) -> ElmoScalarMix:
        return ElmoScalarMix(
            config.num_layers + 1,
            layer_norm=config.scalar_mix_layer_norm,
            fixed_weights=config.scalar_mix_parameters,
            dropout=config.elmo_dropout,
            l2_coefficient=config.scalar_mix_l2_coefficient,
        )

    def _scalar_mixes(self) -> list[ElmoScalarMix]:
        return [mix for mix in (self.scalar_mix, self.task_output_scalar_mix) if mix is not None]

    def _set_trainable(self):
        """Freezes the biLM (unless `config.freeze_bilm=False`) and fixed mix weights."""
        self.elmo.requires_grad_(not self.config.freeze_bilm)
        for mix in self._scalar_mixes():
            mix.requires_grad_(mix.fixed_weights is None)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Loads as usual, then freezes again: loading re-creates every parameter as trainable."""
        loaded = super().from_pretrained(*args, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded)._set_trainable()
        return loaded

    def _adjust_missing_and_unexpected_keys(self, loading_info):
        """A head loaded on a biLM checkpoint is expected to lack its task layers: one line says so, instead of
        transformers' table of missing keys (which still lists anything missing from the biLM), and
        `new_task_layers` names them (for callers that need trained ones, such as an export)."""
        super()._adjust_missing_and_unexpected_keys(loading_info)
        new = {key for key in loading_info.missing_keys if not key.startswith(f"{self.base_model_prefix}.")}
        self.new_task_layers = sorted({key.rsplit(".", 1)[0] for key in new})
        if new:
            logging.get_logger(__name__).warning(
                f"{type(self).__name__}: new task layers ({', '.join(self.new_task_layers)}) start from random "
                "values; train them."
            )
            loading_info.missing_keys -= new

    def _elmo_features(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, output_hidden_states: bool | None
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """Runs the biLM once and every mix: (features, word mask, the biLM layers if `output_hidden_states` (default
        `config.output_hidden_states`) else `None`)."""
        if torch.is_grad_enabled():
            check_bilm_trainable(self)
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.config.freeze_bilm):
            layers = self.elmo(
                input_ids, attention_mask=attention_mask, output_hidden_states=True, return_dict=True
            ).hidden_states
        # checked by the biLM; torch cannot compare uint16..uint64; where the ids are (the host, or the layers' device)
        mask = word_mask(input_ids.long(), attention_mask)
        layers_mask = to_device(mask, layers[0].device)
        features = self.scalar_mix(layers, layers_mask)
        if self.task_encoder is not None:
            features = self.task_encoder(features, mask)
        if self.task_output_scalar_mix is not None:
            features = torch.cat([features, self.task_output_scalar_mix(layers, layers_mask)], dim=-1)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        return features, layers_mask, layers if output_hidden_states else None

    def _feature_dim(self) -> int:
        if self.task_encoder is None:
            return self.config.hidden_size
        extra = self.config.hidden_size if self.task_output_scalar_mix is not None else 0
        return 2 * self.config.task_lstm_dim + extra

    def _l2_penalty(self, labels: torch.Tensor, num_items_in_batch: torch.Tensor | int | None) -> torch.Tensor:
        """The mixes' L2 penalty, scaled by this batch's share of `num_items_in_batch` (Trainer counts the labels
        that are not -100 over all accumulated batches) so that gradient accumulation adds it once per step."""
        penalty = sum(mix.l2_penalty() for mix in self._scalar_mixes())
        if num_items_in_batch is None:
            return penalty
        return penalty * self._batch_share(labels, num_items_in_batch)

    @staticmethod
    def _batch_share(labels: torch.Tensor, num_items_in_batch: torch.Tensor | int) -> torch.Tensor:
        """This batch's labelled items over `num_items_in_batch`: 0, not 0/0, where the accumulated batches hold none
        (the NaN's gradient would reach the weights through `_labelled_loss`'s `torch.where`)."""
        if isinstance(num_items_in_batch, torch.Tensor):
            return labels.ne(-100).sum() / num_items_in_batch.clamp(min=1)
        return labels.ne(-100).sum() / max(num_items_in_batch, 1)

    @staticmethod
    def _loss_without_labelled_items(logits: torch.Tensor) -> torch.Tensor:
        """The loss of a batch without a labelled item (texts without words, or every label -100): zero, with zero
        gradients. The stock mean, or sum over `num_items_in_batch = 0`, is 0/0, and its NaN gradient would spoil
        every weight it reaches."""
        return logits.sum() * 0.0

    def _labelled_loss(self, loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """`loss`, or `_loss_without_labelled_items` for a batch without a labelled item; a `torch.where` where the
        forward cannot read the labels (`_reads_input_values`): the unused loss's gradient is then zero, as its
        items are all ignored (a `torch.cond` failed inductor's backward under `torch.compile`)."""
        labelled = labels.ne(-100).any()
        if self._reads_input_values():
            return loss if bool(labelled) else self._loss_without_labelled_items(logits)
        return torch.where(labelled, loss, self._loss_without_labelled_items(logits).to(loss.dtype))


class ElmoForTokenClassification(ElmoPreTrainedTaskModel):
    """ELMo with a per-word classifier: scalar mix -> dropout -> optional task biLSTM (optionally with a second mix
    concatenated to its output) -> linear. For tagging (POS, NER, chunking)."""

    def __init__(self, config: ElmoConfig):
        super().__init__(
            config, task_output_mix=config.task_lstm_dim is not None and config.concatenate_elmo_to_task_output
        )
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
        check_unread_arguments(self, kwargs)
        features, mask, hidden_states = self._elmo_features(input_ids, attention_mask, output_hidden_states)
        logits = self.classifier(features)
        check_num_labels(self, logits)
        loss = None
        if labels is not None:
            labels = token_labels(labels, mask, self.config.num_labels, self._reads_input_values())
            loss = self.loss_function(logits, labels, self.config, **kwargs)
            loss = loss + self._l2_penalty(labels, kwargs.get("num_items_in_batch"))
            loss = self._labelled_loss(loss, logits, labels)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states)


class ElmoForSequenceClassification(ElmoPreTrainedTaskModel):
    """ELMo with a sentence classifier: scalar mix -> dropout -> optional task biLSTM -> masked mean and max pooling
    -> linear. Single-label, multi-label and regression, chosen by `config.problem_type` as in transformers."""

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
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
        check_unread_arguments(self, kwargs)
        features, mask, hidden_states = self._elmo_features(input_ids, attention_mask, output_hidden_states)
        # A text without words pools to zeros, so its logits are the classifier's bias, alone or in any batch.
        keep = mask.unsqueeze(-1)
        mean = (features * keep).sum(1) / keep.sum(1).clamp(min=1)
        if features.shape[1] == 0:
            maximum = features.new_zeros(features.shape[0], features.shape[2])
        else:
            maximum = features.masked_fill(~keep, float("-inf")).amax(1).masked_fill(~keep.any(1), 0.0)
        logits = self.classifier(torch.cat([mean, maximum], dim=-1))
        check_num_labels(self, logits)
        loss = None
        if labels is not None:
            labels = sequence_labels(labels, mask.shape[0], self.config, self._reads_input_values()).to(logits.device)
            loss = self.loss_function(labels, logits, self.config, **kwargs)
            num_items_in_batch = kwargs.get("num_items_in_batch")
            if self.config.problem_type != "single_label_classification" and num_items_in_batch is not None:
                # The stock regression and multi-label losses are means that ignore `num_items_in_batch`; make them
                # sums over it, as the cross-entropy is, so gradient accumulation matches one large batch.
                loss = loss * self._batch_share(labels, num_items_in_batch)
            loss = self._labelled_loss(loss + self._l2_penalty(labels, num_items_in_batch), logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states)



@dataclass
class ElmoForPreTrainingOutput(ModelOutput):
    r"""
    Outputs of [`ElmoForPreTraining`]. Position `t` of the forward direction reads `<S>` and words `1..t` and
    predicts word `t + 1` (`</S>` after the last); position `t` of the backward direction reads word `t + 1` to
    `</S>` and predicts word `t` (`<S>` before the first). Both have `sequence_length + 1` positions.

    Args:
        loss (`torch.FloatTensor` of shape `()`):
            Mean of the two directions' mean negative log-likelihood (natural log) per predicted word.
        forward_loss, backward_loss (`torch.FloatTensor` of shape `()`):
            Each direction's mean negative log-likelihood over this batch.
        forward_perplexity, backward_perplexity (`torch.FloatTensor` of shape `()`):
            `exp` of the direction's loss (of the sampled loss while training with `softmax_type="sampled"`).
        num_predictions (`torch.LongTensor` of shape `()`):
            Predicted words per direction in this batch (`labels != -100`), to weight batches into a corpus mean.
        forward_logits, backward_logits (`torch.FloatTensor` of shape `(batch_size, sequence_length + 1,
        word_vocab_size)`):
            Full-softmax logits, returned when no labels are given.
        hidden_states (`tuple(torch.FloatTensor)`, returned with `output_hidden_states=True`):
            The biLM's `num_layers + 1` layers with the boundaries, `(batch_size, sequence_length + 2,
            2 * projection_dim)`.
    """

    loss: torch.FloatTensor | None = None
    forward_loss: torch.FloatTensor | None = None
    backward_loss: torch.FloatTensor | None = None
    forward_perplexity: torch.FloatTensor | None = None
    backward_perplexity: torch.FloatTensor | None = None
    num_predictions: torch.LongTensor | None = None
    forward_logits: torch.FloatTensor | None = None
    backward_logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None


class ElmoForPreTraining(ElmoPreTrainedModel):
    """The biLM with the word softmax it is pretrained with (paper §3.1): a forward LM predicts each next word, a
    backward LM each previous word, both through one softmax over `config.word_vocab_size` words.

    Sentence boundaries take part as in the original: the forward LM predicts `</S>` after the last word, the backward
    LM `<S>` before the first. While training, dropout (`config.pretraining_dropout`) applies to every biLSTM layer's
    input and to the top layer's output, and `softmax_type="sampled"` replaces the full softmax by the original's
    sampled softmax; evaluation always normalises over the whole vocabulary. `ElmoModel.from_pretrained` on a saved
    folder gives the biLM alone; `from_pretrained` on a converted biLM starts a new softmax (domain adaptation).
    """

    accepts_loss_kwargs = True

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        if config.word_vocab_size is None:
            raise ValueError(
                "ElmoForPreTraining needs config.word_vocab_size, the number of words of its softmax (the size of the "
                "vocabulary built from the corpus)."
            )
        self.elmo = ElmoModel(config)
        self.dropout = nn.Dropout(config.pretraining_dropout)
        self.softmax = nn.Linear(config.projection_dim, config.word_vocab_size)
        for layer in self.elmo.bilm.layers:
            layer.register_forward_pre_hook(self._drop_layer_inputs)
        self.post_init()

    def _drop_layer_inputs(self, layer: nn.Module, args: tuple) -> tuple | None:
        """Dropout on a biLSTM layer's inputs (both directions) while the layer trains, before its residual
        connection; off when the layer is in eval mode, even if this model is not (`model.elmo.eval()`)."""
        if not layer.training:
            return None
        forward_inputs, backward_inputs, *rest = args
        probability = self.config.pretraining_dropout
        return (
            nn.functional.dropout(forward_inputs, probability),
            nn.functional.dropout(backward_inputs, probability),
            *rest,
        )

    @property
    def _sampler(self) -> tuple[int, int]:
        return self.config.word_vocab_size, self.config.softmax_num_samples

    def _negative_log_likelihoods(
        self, hidden: torch.Tensor, targets: torch.Tensor, sample: tuple[torch.Tensor, torch.Tensor] | None
    ) -> torch.Tensor:
        """`(num_predictions, projection_dim)` outputs and their target ids -> `(num_predictions,)` NLL, over the
        whole vocabulary, or over the target and the sampled words (log-expected-count corrected, the target's own
        id among the samples masked out) when `sample` is given."""
        if sample is None:
            return nn.functional.cross_entropy(self.softmax(hidden), targets, reduction="none")
        sampled, sampled_log_count = sample
        weight, bias = self.softmax.weight, self.softmax.bias
        true_logits = (hidden * weight[targets]).sum(-1) + bias[targets] - log_expected_count(targets, *self._sampler)
        sampled_logits = hidden @ weight[sampled].T + bias[sampled] - sampled_log_count
        sampled_logits = sampled_logits.masked_fill(sampled.unsqueeze(0) == targets.unsqueeze(1), float("-inf"))
        logits = torch.cat([true_logits.unsqueeze(1), sampled_logits], dim=1)
        return -torch.log_softmax(logits, dim=1)[:, 0]

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        backward_labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> ElmoForPreTrainingOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length, max_characters_per_token)`):
                Character ids of each word, right-padded (padding words all zeros), from [`ElmoTokenizer`].
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for words, 0 for padding.
            labels (`torch.LongTensor` of shape `(batch_size, sequence_length + 1)`, *optional*):
                Forward targets: the vocabulary ids of words `1..n` then `</S>` for a sentence of `n` words, -100
                beyond.
            backward_labels (`torch.LongTensor` of shape `(batch_size, sequence_length + 1)`, *optional*):
                Backward targets: `<S>` then words `1..n`, -100 beyond (the same positions as `labels`).
            output_hidden_states (`bool`, *optional*):
                Return the biLM's layers, boundaries included.
            num_items_in_batch (`int`, *optional*):
                Predictions per direction over all batches of an optimizer step (Trainer passes it), so the loss is
                their mean however the step is split into batches or processes.
        """
        check_unread_arguments(self, kwargs)
        input_ids, attention_mask = self.elmo.checked_inputs(input_ids, attention_mask, self)
        mask = word_mask(input_ids, attention_mask)
        check_right_padded(mask)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        layers, _ = self.elmo.boundary_layers(input_ids, mask)
        projection_dim = self.config.projection_dim
        forward_outputs = self.dropout(layers[-1][:, :-1, :projection_dim])
        backward_outputs = self.dropout(layers[-1][:, 1:, projection_dim:])
        hidden_states = tuple(layers) if output_hidden_states else None
        if labels is None and backward_labels is None:
            return ElmoForPreTrainingOutput(
                forward_logits=self.softmax(forward_outputs),
                backward_logits=self.softmax(backward_outputs),
                hidden_states=hidden_states,
            )
        labels, backward_labels = pretraining_labels(labels, backward_labels, mask, self.config.word_vocab_size)
        # checked where the ids are (on the host, or the device), used where the outputs are
        labels, backward_labels = (to_device(value, forward_outputs.device) for value in (labels, backward_labels))
        predicted = labels != -100
        sample = None
        if self.training and self.config.softmax_type == "sampled":
            sample = log_uniform_sample(*self._sampler, forward_outputs.device)
        forward_nll = self._negative_log_likelihoods(forward_outputs[predicted], labels[predicted], sample)
        backward_nll = self._negative_log_likelihoods(backward_outputs[predicted], backward_labels[predicted], sample)
        num_predictions = predicted.sum()
        count = num_predictions.clamp(min=1)
        forward_loss, backward_loss = forward_nll.sum() / count, backward_nll.sum() / count
        num_items_in_batch = kwargs.get("num_items_in_batch")
        if num_items_in_batch is None:
            loss = (forward_loss + backward_loss) / 2
        else:
            loss = (forward_nll.sum() + backward_nll.sum()) / (2 * num_items_in_batch)
        return ElmoForPreTrainingOutput(
            loss=loss,
            forward_loss=forward_loss.detach(),
            backward_loss=backward_loss.detach(),
            forward_perplexity=forward_loss.detach().exp(),
            backward_perplexity=backward_loss.detach().exp(),
            num_predictions=num_predictions,
            hidden_states=hidden_states,
        )


__all__ = [
    "ElmoBiLm",
    "ElmoCharacterEncoder",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoScalarMix",
]
