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
"""ELMo's two computations as pure functions of tensors, with their readable torch references, and the layout of a
batch of sentences they read.

- The token layer, `token_layer(word_ids, layers, chunk_size)`: characters -> CNN -> highway -> projection.
- The recurrence of one LSTM-with-projection direction over a batch,
  `lstm_recurrence(inputs, batch, initial_state, linears, cell_clip, projection_clip)`, and the schedule of a layer's
  two directions, `directions_in_turn(cells, inputs, batch, initial_states)`.
- The pretraining's log-uniform word sampler (`log_uniform_sample`).
- Rows grouped byte for byte (`group_rows`): the distinct words of a batch, which the token layer encodes once each,
  and the repeated inputs the CPU kernels multiply once.

Faster implementations of the same signatures (`cpu_kernels.py`, `training_kernels.py`, `export_kernels.py`) are
listed beside these references in `kernels_elmo.py`, whose dispatcher chooses one per call. The references call the
layers they are given (the modules pass their own submodules), so hooks, PEFT adapters and quantised layers take part.
"""

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

LstmState = tuple[torch.Tensor, torch.Tensor]
Layer = Callable[[torch.Tensor], torch.Tensor]
# The character CNN's activation by `config.activation`.
ACTIVATIONS: dict[str, Layer] = {"relu": torch.relu, "tanh": torch.tanh}


class KernelRequest(NamedTuple):
    """What one call asks of an implementation, for its capability check (`Implementation.supports` in
    `kernels_elmo.py`): the tensors' floating dtype and device, whether autograd records, the batch layout, and
    whether `torch.compile` or `torch.export` is tracing."""

    dtype: torch.dtype
    device: torch.device
    recording: bool
    packed: bool
    traced: bool


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` on `device`. A host tensor goes to a CUDA device without waiting for the work queued there: through
    page-locked memory (a copy from pageable memory may first wait for the device's queue; torch keeps the page-locked
    block until the copy is done). Other devices copy as `Tensor.to` does."""
    if tensor.device.type == "cpu" and device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


class SequenceBatch:
    """Which rows of a batch of right-padded sequences run at which step, and the layout the recurrence reads them in.

    - packed (`packed=True`): time-major without padding, as `torch.nn.utils.rnn.PackedSequence`: rows sorted longest
      first, step `t` holds the first `batch_sizes[t]` rows, so no work is spent on padding;
    - padded (`packed=False`, the export path): time-major `(steps, batch_size, dim)`, every row runs to the longest
      length and `mask` `(steps, batch_size, 1)` says where a row has a token: no host synchronisation and no shape
      taken from data, so it exports with dynamic batch and length.

    Args:
        lengths: `(batch_size,)` tokens per row.
        steps: the padded length of the batch (at least `lengths.max()`).
        packed: the layout.
        final_steps: whether each direction runs its last step, the one that reads the row's other end (`</S>` for
            the forward direction, `<S>` for the backward one). Without it (packed only: `ElmoModel` when no final
            state is asked for), a row runs `length - 1` steps per direction: that step's output is the other
            boundary's, which `ElmoModel` drops, and its state is the final state, so neither is computed, the
            merged outputs are zero there and the recurrence's final state is not a row's final state.
    """

    def __init__(self, lengths: torch.Tensor, steps: int, packed: bool, final_steps: bool = True):
        self.packed, self.batch_size, self.steps = packed, lengths.shape[0], steps
        self.final_steps = final_steps or not packed
        positions = torch.arange(steps, device=lengths.device)
        self.batch_sizes: list[int] | None = None
        self.mask: torch.Tensor | None = None
        if packed:
            sorted_lengths, self.order = lengths.sort(descending=True)
            self.unsort = self.order.argsort()
            skipped = 0 if self.final_steps else 1
            running = positions[: steps - skipped].unsqueeze(1) < (sorted_lengths - skipped).unsqueeze(0)
            self.batch_sizes = running.sum(1).tolist()
            # Where each packed position lives in the flattened `(batch_size * steps)` batch, per direction: the
            # backward direction reads row r at step t from position length - 1 - t.
            packed_steps, packed_rows = running.nonzero(as_tuple=True)
            row_starts = self.order[packed_rows] * steps
            self.forward_index = row_starts + packed_steps
            self.backward_index = row_starts + sorted_lengths[packed_rows] - 1 - packed_steps
        else:
            running = positions < lengths.unsqueeze(1)  # (batch_size, steps)
            self.mask = running.transpose(0, 1).unsqueeze(-1)
            # Row r, step t of the backward direction is position lengths[r] - 1 - t (padding stays in place).
            self.reverse = torch.where(running, lengths.unsqueeze(1) - 1 - positions, positions).unsqueeze(-1)

    def to(self, device: torch.device) -> "SequenceBatch":
        """This layout with its index tensors moved to `device` (in place; returns it; `to_device`). `ElmoModel` lays
        a batch out where its ids are, on the host, which reads them without waiting for a GPU, and computes on the
        model's device."""
        for name in ("order", "unsort", "forward_index", "backward_index") if self.packed else ("mask", "reverse"):
            setattr(self, name, to_device(getattr(self, name), device))
        return self

    def directions(self, sequences: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(batch_size, steps, dim)` -> the forward and the backward direction's inputs in this layout (packed
        `(num_positions, dim)` or padded `(steps, batch_size, dim)`); the backward one reads each row reversed within
        its length."""
        if self.packed:
            flat = sequences.reshape(self.batch_size * self.steps, sequences.shape[-1])
            return flat[self.forward_index], flat[self.backward_index]
        return sequences.transpose(0, 1), self._reversed(sequences).transpose(0, 1)

    def merge(self, forward_outputs: torch.Tensor, backward_outputs: torch.Tensor) -> torch.Tensor:
        """Both directions' outputs in this layout -> `(batch_size, steps, 2 * dim)` `[forward; backward]` in each
        row's own time order, zero at padding."""
        if not self.packed:
            return torch.cat([forward_outputs.transpose(0, 1), self._reversed(backward_outputs.transpose(0, 1))], -1)
        dim = forward_outputs.shape[-1]
        outputs = forward_outputs.new_zeros(self.batch_size * self.steps, 2 * dim)
        outputs[self.forward_index, :dim] = forward_outputs
        outputs[self.backward_index, dim:] = backward_outputs
        return outputs.view(self.batch_size, self.steps, 2 * dim)

    def sorted_rows(self, state: torch.Tensor) -> torch.Tensor:
        """`(..., batch_size, dim)` states of the rows -> in the order the recurrence runs them."""
        return state[:, self.order] if self.packed else state

    def original_rows(self, state: torch.Tensor) -> torch.Tensor:
        """The inverse of `sorted_rows`."""
        return state[:, self.unsort] if self.packed else state

    def _reversed(self, sequences: torch.Tensor) -> torch.Tensor:
        return sequences.gather(1, self.reverse.expand_as(sequences))


def word_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """`(batch_size, sequence_length)` bool: the given attention mask, or the rows with any non-zero character id."""
    return attention_mask.bool() if attention_mask is not None else (input_ids > 0).any(-1)


def same_bytes(tensor: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether two tensors hold exactly the same bytes in the same shape and dtype (NaNs and signed zeros
    included, which `torch.equal` on values would not tell apart)."""
    if tensor.shape != other.shape or tensor.dtype != other.dtype:
        return False
    tensor, other = (t.detach().contiguous().view(-1).view(torch.uint8) for t in (tensor, other))
    if tensor.numel() % 8 == 0 and tensor.storage_offset() % 8 == 0 and other.storage_offset() % 8 == 0:
        # compared as 64-bit words: the same bytes, read twice as fast (a view at an odd offset, a row of odd width
        # cut from a larger tensor, cannot be read as such)
        tensor, other = tensor.view(torch.int64), other.view(torch.int64)
    return torch.equal(tensor, other)


@functools.lru_cache
def key_coefficients(words: int) -> torch.Tensor:
    """`group_rows`' fixed multipliers of a row's `words` 32-bit words `(words,)` int64: random, and as large as keeps
    every key within 64 bits (a sum of `words` products of a word, at most 2**31 in magnitude, and a multiplier)."""
    bits = 62 - 31 - max(1, (words - 1).bit_length())
    return torch.randint(1, 2**bits, (words,), generator=torch.Generator().manual_seed(0))


def group_rows(rows: torch.Tensor, key_bytes: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows grouped by their bytes: `(count, ...)` -> the first row of each group `(groups,)` and each row's group
    `(count,)`, so that `rows[first[places]]` holds exactly the bytes of `rows`.

    Each row is keyed by its first `key_bytes` bytes (all by default): those bytes themselves where they fit in 64
    bits, else a fixed weighted sum of their 32-bit words (integers: exact, the same on every device and thread
    count). Rows are grouped by key, a sort of `count` integers, and where a key holds several rows they are checked
    byte for byte; a key shared by rows that differ (beyond `key_bytes`, or whose sums agree) falls back to sorting
    the rows themselves (`torch.unique(dim=0)`). On a 2-vCPU AMD EPYC Zen 3, the 5,435 words of 256 PTB sentences
    (50 int64 character ids each) were grouped in 3.1-3.6 ms keyed against 14-21 ms sorted.
    """
    count, width = rows.shape[0], math.prod(rows.shape[1:]) * rows.element_size()
    row_bytes = rows.contiguous().view(torch.uint8).view(count, width)
    key_width = width if key_bytes is None else min(key_bytes, width)
    word = 8 if key_width <= 8 else 4  # one 64-bit word, or 32-bit words to sum
    words = max(1, -(-key_width // word))  # rows of no bytes: one zero word, one group
    if key_width == word * words and width % word == 0 and row_bytes.storage_offset() % word == 0:
        key_bytes_of_rows = row_bytes[:, :key_width]
    else:  # zero-padded to whole words
        key_bytes_of_rows = row_bytes.new_zeros(count, word * words)
        key_bytes_of_rows[:, :key_width] = row_bytes[:, :key_width]
    if word == 8:
        keys = key_bytes_of_rows.view(torch.int64).view(-1)
    else:
        values, coefficients = key_bytes_of_rows.view(torch.int32).long(), key_coefficients(words).to(rows.device)
        # The same integers either way: a product of integer vectors (5x faster than the element-wise form on a CPU)
        # where torch has one; CUDA multiplies no int64 matrices.
        keys = torch.mv(values, coefficients) if rows.device.type == "cpu" else (values * coefficients).sum(1)
    distinct, places = torch.unique(keys, return_inverse=True)
    first = first_rows(places, distinct.shape[0])
    if first.shape[0] < count and not same_bytes(rows[first[places]], rows):
        distinct, places = torch.unique(row_bytes, dim=0, return_inverse=True)
        first = first_rows(places, distinct.shape[0])
    return first, places


def first_rows(places: torch.Tensor, groups: int) -> torch.Tensor:
    """For rows grouped by `places` `(count,)` (each row's group, 0 to `groups - 1`, each holding a row): the first
    row of each group `(groups,)`."""
    indices = torch.arange(places.shape[0], device=places.device)
    return places.new_full((groups,), places.shape[0]).scatter_reduce_(0, places, indices, "amin")


class WordsFirst:
    """Moves the words of each row of a `(batch_size, sequence_length)` mask to its front, in order (left padding or
    holes in the mask go behind them), and back.

    Packed batches sort, and only when a row needs it; padded ones (the export path) always scatter, with no sort and
    no host synchronisation. `mask` is the right-padded mask of the moved rows.
    """

    def __init__(self, mask: torch.Tensor, packed: bool):
        lengths = mask.sum(1, keepdim=True)
        right_padded = torch.arange(mask.shape[1], device=mask.device) < lengths
        self.packed, self.mask = packed, right_padded
        if packed:
            moved = not bool((mask == right_padded).all())
            self.order = (~mask).to(torch.int8).argsort(dim=1, stable=True) if moved else None
        else:
            # Where each position goes: the words in order, then the padding in order.
            counts = mask.cumsum(1)
            padding_positions = lengths + torch.arange(mask.shape[1], device=mask.device) - counts
            self.positions = torch.where(mask, counts - 1, padding_positions)

    def to(self, device: torch.device) -> "WordsFirst":
        """These moves with their index tensors on `device` (in place; returns them), as `SequenceBatch.to`."""
        for name in ("mask", "order") if self.packed else ("mask", "positions"):
            if getattr(self, name) is not None:
                setattr(self, name, to_device(getattr(self, name), device))
        return self

    def apply(self, tensor: torch.Tensor) -> torch.Tensor:
        """`(batch_size, sequence_length, ...)` -> each row's words first."""
        if not self.packed:
            return tensor.new_zeros(tensor.shape).scatter(1, self._index(self.positions, tensor), tensor)
        return tensor if self.order is None else tensor.gather(1, self._index(self.order, tensor))

    def restore(self, tensor: torch.Tensor) -> torch.Tensor:
        """The inverse of `apply`."""
        if not self.packed:
            return tensor.gather(1, self._index(self.positions, tensor))
        return tensor if self.order is None else tensor.gather(1, self._index(self.order.argsort(dim=1), tensor))

    @staticmethod
    def _index(positions: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
        return positions.view(*positions.shape, *(1,) * (tensor.dim() - 2)).expand_as(tensor)


class TokenLayers(NamedTuple):
    """The layers of the token layer, as its module holds them.

    The reference calls the stage callables (the module's own submodules: `char_cnn` and `highway` are `ElmoCharCnn`
    and `ElmoHighway`); kernels instead compute those two stages from their leaf layers, `convolutions` and
    `highway_layers` (the dispatcher takes a kernel only where the stages are the stock modules over exactly these
    leaves). Leaf layers, not bare tensors, so that a kernel reads each weight where the model keeps it.
    """

    char_embeddings: Layer  # ids (num_words, max_characters) -> (num_words, max_characters, char_embedding_dim)
    char_cnn: Layer  # (num_words, max_characters, char_embedding_dim) -> (num_words, num_filters)
    highway: Layer  # (num_words, num_filters) -> (num_words, num_filters)
    word_embeddings: Layer | None  # word ids (num_words,) -> (num_words, word_embedding_dim), if the model has them
    projection: Layer  # (num_words, word_embedding_dim + num_filters) -> (num_words, projection_dim)
    max_characters: int
    activation: Layer  # the CNN's own function (`ACTIVATIONS[config.activation]` when it was built)
    convolutions: tuple[nn.Conv1d, ...]
    highway_layers: tuple[tuple[nn.Linear, nn.Linear], ...]  # (transform, gate) of each highway layer


def with_word_embeddings(
    features: torch.Tensor, word_ids: torch.Tensor, word_embeddings: Layer | None, max_characters: int
) -> torch.Tensor:
    """`(num_words, num_filters)` highway output -> the projection's input: the word embedding of each row's last id
    in front of it when the model has one (`(num_words, word_embedding_dim + num_filters)`), else unchanged."""
    if word_embeddings is None:
        return features
    return torch.cat([word_embeddings(word_ids[:, max_characters]), features], dim=-1)


def token_layer(word_ids: torch.Tensor, layers: TokenLayers, chunk_size: int | None) -> torch.Tensor:
    """The reference token layer: `(num_words, row_width)` ids (characters, then the word id if any) ->
    `(num_words, projection_dim)`, on chunks of `chunk_size` words (bounded memory; `None`: all at once)."""
    chunks = (word_ids,) if chunk_size is None else word_ids.split(chunk_size)
    embedded = []
    for chunk in chunks:
        features = layers.highway(layers.char_cnn(layers.char_embeddings(chunk[:, : layers.max_characters])))
        features = with_word_embeddings(features, chunk, layers.word_embeddings, layers.max_characters)
        embedded.append(layers.projection(features))
    return torch.cat(embedded)


class LstmLinears(NamedTuple):
    """The linear maps of one LSTM direction, `(rows, in_features) -> (rows, out_features)`.

    The modules pass their own `nn.Linear` submodules, which the reference calls; kernels read their `weight` and
    `bias` (and the CPU kernel keys its kept reordered weights on the layer, see `cpu_kernels.ReorderedWeights`).
    `input_to_gates` has no bias in ELMo (the gate bias is `hidden_to_gates.bias`); `projection` is `None` for a plain
    LSTM (the task encoder's `nn.LSTM`, whose weights come as functions).
    """

    input_to_gates: Layer
    hidden_to_gates: Layer
    projection: Layer | None


def lstm_step(
    gate_inputs: torch.Tensor,
    state: LstmState,
    linears: LstmLinears,
    cell_clip: float | None,
    projection_clip: float | None,
) -> LstmState:
    """One step of the LSTM with projection, gates in the order i, f, g, o:

        i, f, g, o = input_to_gates(x) + hidden_to_gates(h)
        c = clip(sigmoid(f) * c + sigmoid(i) * tanh(g), cell_clip)
        h = clip(projection(sigmoid(o) * tanh(c)), projection_clip)

    Args:
        gate_inputs: `input_to_gates(x)`, `(rows, 4 * lstm_dim)`.
        state: `(h, c)`, `(rows, projection_dim)` and `(rows, lstm_dim)`.
    """
    hidden, cell = state
    input_gate, forget_gate, candidate, output_gate = (gate_inputs + linears.hidden_to_gates(hidden)).chunk(4, -1)
    cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(candidate)
    if cell_clip is not None:
        cell = cell.clamp(-cell_clip, cell_clip)
    hidden = torch.sigmoid(output_gate) * torch.tanh(cell)
    if linears.projection is not None:
        hidden = linears.projection(hidden)
    if projection_clip is not None:
        hidden = hidden.clamp(-projection_clip, projection_clip)
    return hidden, cell


def masked_step(step: Callable[[torch.Tensor, LstmState], LstmState], state, step_inputs_and_mask):
    """One step of the padded layout: `((h, c), (step_inputs, running))` -> the next state (unchanged in rows not
    running) and the step's output (zero there). No annotations: `torch.compile` cannot evaluate subscripted ones."""
    step_inputs, running = step_inputs_and_mask
    hidden, cell = step(step_inputs, state)
    state = (torch.where(running, hidden, state[0]), torch.where(running, cell, state[1]))
    return state, hidden * running


class FinishedRows:
    """The final states of the rows of a packed batch: rows end from the back of the length-sorted batch, so each
    step keeps the state of the rows ending there (`running`), and `final` puts the pieces back in row order."""

    def __init__(self):
        self.pieces: list[tuple[torch.Tensor, ...]] = []

    def running(self, state: tuple[torch.Tensor, ...], active: int) -> tuple[torch.Tensor, ...]:
        """The first `active` rows of `state`, keeping the others as final."""
        if active < state[0].shape[0]:
            self.pieces.append(tuple(tensor[active:] for tensor in state))
            state = tuple(tensor[:active] for tensor in state)
        return state

    def final(self, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """Every row's final state, rows 0..batch_size-1, given the state after the last step."""
        return tuple(torch.cat(pieces[::-1]) for pieces in zip(*self.pieces, state))


def lstm_recurrence(
    inputs: torch.Tensor, batch: SequenceBatch, initial_state: LstmState, linears: LstmLinears,
    cell_clip: float | None, projection_clip: float | None,
) -> tuple[torch.Tensor, LstmState]:
    """The reference recurrence: one LSTM direction (`lstm_step`) over a batch, state in and state out.

    Args:
        inputs: `(num_positions, input_dim)` packed, or `(steps, batch_size, input_dim)` padded (see
            `SequenceBatch`), in this direction's time order.
        batch: the layout; rows sorted as `batch.sorted_rows` sorts them.
        initial_state: `(h, c)`, `(batch_size, projection_dim)` and `(batch_size, lstm_dim)`.
        linears: the linear maps (`LstmLinears`).
        cell_clip, projection_clip: clip bounds, `None` for none.

    Returns:
        The outputs in the layout of `inputs` (zero at padding) and the final `(h, c)` of every row (the state after
        its own last step).
    """
    gate_inputs = linears.input_to_gates(inputs)

    def step(step_inputs, state):
        return lstm_step(step_inputs, state, linears, cell_clip, projection_clip)

    outputs = []
    if not batch.packed:
        state = initial_state
        for step_inputs_and_mask in zip(gate_inputs, batch.mask):
            state, output = masked_step(step, state, step_inputs_and_mask)
            outputs.append(output)
        # (steps, batch_size, projection_dim); a batch of only empty sentences has no step
        return torch.stack(outputs) if outputs else state[0].new_zeros(0, *state[0].shape), state
    state, finished, position = initial_state, FinishedRows(), 0
    for active in batch.batch_sizes:
        state = step(gate_inputs[position : position + active], finished.running(state, active))
        outputs.append(state[0])
        position += active
    return torch.cat(outputs), finished.final(state)


Direction = Callable[[torch.Tensor, SequenceBatch, LstmState], tuple[torch.Tensor, LstmState]]


def directions_in_turn(
    cells: tuple[Direction, Direction], inputs: tuple[torch.Tensor, torch.Tensor], batch: SequenceBatch,
    initial_states: tuple[LstmState, LstmState],
) -> tuple[tuple[torch.Tensor, LstmState], tuple[torch.Tensor, LstmState]]:
    """The reference schedule of a biLSTM layer's two directions: each cell (a module whose call is one direction's
    recurrence, `lstm_recurrence`'s outputs and final state) over its own inputs and initial state, forward then
    backward. The directions share nothing but `batch`, so any schedule that runs both gives the same results."""
    return tuple(cell(x, batch, state) for cell, x, state in zip(cells, inputs, initial_states, strict=True))


def log_uniform_sample(vocab_size: int, num_samples: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The pretraining's sampled softmax: `num_samples` word ids drawn with replacement from the log-uniform (Zipf)
    distribution the original samples from, which assumes ids sorted by falling frequency, and the log of each id's
    expected count (`log_expected_count`)."""
    uniform = torch.rand(num_samples, device=device, dtype=torch.float64)
    sampled = (torch.exp(uniform * math.log(vocab_size + 1)) - 1).long().clamp(max=vocab_size - 1)
    return sampled, log_expected_count(sampled, vocab_size, num_samples)


def log_expected_count(ids: torch.Tensor, vocab_size: int, num_samples: int) -> torch.Tensor:
    """`log(num_samples * p(id))` for the log-uniform `p(id) = log((id + 2) / (id + 1)) / log(vocab_size + 1)`."""
    ids = ids.double()
    probability = torch.log((ids + 2) / (ids + 1)) / math.log(vocab_size + 1)
    return torch.log(num_samples * probability).float()


__all__ = [
    "FinishedRows",
    "KernelRequest",
    "LstmLinears",
    "SequenceBatch",
    "TokenLayers",
    "WordsFirst",
    "directions_in_turn",
    "group_rows",
    "lstm_recurrence",
    "log_expected_count",
    "log_uniform_sample",
    "lstm_step",
    "masked_step",
    "same_bytes",
    "token_layer",
    "word_mask",
]
