# Copyright 2026 The elmo-hf Authors.
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
"""The original ELMo computation in float64 NumPy, straight from the original datasets: the reference of elmo-hf.

It reads the weights in the original layout (TensorFlow gate order i, j, f, o, `x @ W` kernels, the forget bias
added at run time), one sentence, one time step at a time, so that it shares no code and no layout decision with
`ElmoModel` or with the conversion table it checks. The converter's self-check, the parity report and the tests use
it; `docs/conversion.md` explains the computation.
"""

import numpy as np

from elmo_hf import ElmoConfig
from elmo_hf.tokenization_elmo import (
    BEGIN_SENTENCE_TOKEN,
    BEGIN_WORD_CHAR_ID,
    END_SENTENCE_TOKEN,
    END_WORD_CHAR_ID,
    PADDING_CHAR_ID,
    PADDING_WITHIN_WORD_CHAR_ID,
    word_to_char_ids,
)

from .checkpoint import (
    CHAR_EMBEDDINGS,
    PROJECTION_BIAS,
    PROJECTION_WEIGHT,
    TF_FORGET_BIAS,
    cell_bias_name,
    cell_kernel_name,
    cell_projection_name,
    conv_bias_name,
    conv_weight_name,
    highway_bias_name,
    highway_weight_name,
)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for very negative x: the sigmoid is then 0
        return 1.0 / (1.0 + np.exp(-x))


def _token_layer(arrays: dict[str, np.ndarray], config: ElmoConfig, char_ids: np.ndarray) -> np.ndarray:
    """`(tokens, max_characters_per_token)` ids -> `(tokens, projection_dim)`: char CNN, highway, projection."""
    chars = arrays[CHAR_EMBEDDINGS][char_ids - 1]  # the file has no row for id 0: (tokens, characters, E)
    pooled = []
    for index, (width, _) in enumerate(config.filters):
        kernel = arrays[conv_weight_name(index)][0]  # (width, E, n)
        windows = np.stack([chars[:, k : chars.shape[1] - width + 1 + k] for k in range(width)], axis=2)
        pooled.append((np.einsum("tpke,ken->tpn", windows, kernel) + arrays[conv_bias_name(index)]).max(axis=1))
    x = np.concatenate(pooled, axis=-1)
    x = np.maximum(x, 0) if config.activation == "relu" else np.tanh(x)
    for index in range(config.num_highway_layers):
        (carry_weight, carry_bias), (transform_weight, transform_bias) = (
            (arrays[highway_weight_name(index, kind)], arrays[highway_bias_name(index, kind)])
            for kind in ("carry", "transform")
        )
        carry = _sigmoid(x @ carry_weight + carry_bias)
        x = carry * np.maximum(x @ transform_weight + transform_bias, 0) + (1 - carry) * x
    return x @ arrays[PROJECTION_WEIGHT] + arrays[PROJECTION_BIAS]


def _lstm(arrays: dict[str, np.ndarray], config: ElmoConfig, direction: int, layer: int, inputs: np.ndarray):
    """One direction of one layer from zero state: `(steps, projection_dim)` -> `(steps, projection_dim)`."""
    kernel, bias = arrays[cell_kernel_name(direction, layer)], arrays[cell_bias_name(direction, layer)]
    projection = arrays[cell_projection_name(direction, layer)]
    hidden, cell = np.zeros(config.projection_dim), np.zeros(config.lstm_dim)
    outputs = []
    for x_t in inputs:
        i, j, f, o = np.split(np.concatenate([x_t, hidden]) @ kernel + bias, 4)
        cell = _sigmoid(f + TF_FORGET_BIAS) * cell + _sigmoid(i) * np.tanh(j)
        if config.cell_clip is not None:
            cell = np.clip(cell, -config.cell_clip, config.cell_clip)
        hidden = (_sigmoid(o) * np.tanh(cell)) @ projection
        if config.projection_clip is not None:
            hidden = np.clip(hidden, -config.projection_clip, config.projection_clip)
        outputs.append(hidden)
    return np.stack(outputs)


def reference_layers(arrays: dict[str, np.ndarray], config: ElmoConfig, char_ids: np.ndarray) -> list[np.ndarray]:
    """Stateless ELMo of one sentence, in float64.

    Args:
        arrays: the original datasets by name (`checkpoint.read_weights`).
        char_ids: `(words, max_characters_per_token)` character ids of the sentence's words, as `ElmoTokenizer`
            gives them (no padding words, no `<S>` / `</S>`: they are added here).

    Returns:
        The `num_layers + 1` layers, each `(words, 2 * projection_dim)` `[forward; backward]`, boundaries removed, as
        `ElmoModel`'s `hidden_states`.
    """
    char_ids = np.asarray(char_ids)
    if (char_ids == PADDING_CHAR_ID).any():
        raise ValueError("reference_layers takes the words of one sentence; remove the padding words (all zeros).")
    arrays = {name: np.asarray(array, dtype=np.float64) for name, array in arrays.items()}
    boundaries = [word_to_char_ids(token, config.max_characters_per_token)
                  for token in (BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN)]
    tokens = _token_layer(arrays, config, np.concatenate([[boundaries[0]], char_ids, [boundaries[1]]]))
    layers = [np.concatenate([tokens, tokens], axis=-1)]
    inputs = [tokens, tokens[::-1]]
    for layer in range(config.num_layers):
        outputs = [_lstm(arrays, config, direction, layer, inputs[direction]) for direction in (0, 1)]
        if config.use_skip_connections and layer > 0:
            outputs = [output + previous for output, previous in zip(outputs, inputs)]
        inputs = outputs
        layers.append(np.concatenate([outputs[0], outputs[1][::-1]], axis=-1))
    return [layer[1:-1] for layer in layers]


def words_to_char_ids(words: list[str], config: ElmoConfig) -> np.ndarray:
    """`(len(words), max_characters_per_token)` character ids of a pre-split sentence."""
    return np.array([word_to_char_ids(word, config.max_characters_per_token) for word in words])


def every_character_sentence(config: ElmoConfig) -> np.ndarray:
    """Character ids of a sentence whose words, with `<S>` and `</S>`, use every row of the character embeddings.

    Byte characters are packed `max_characters_per_token - 2` to a word between the begin- and end-of-word ids (most
    bytes cannot appear alone in UTF-8 text, so the rows are built from ids); the boundary rows hold the
    within-word padding id. A check on this sentence sees any embedding row that is wrong or non-finite.
    Returns `(words, max_characters_per_token)`.
    """
    specials = {BEGIN_WORD_CHAR_ID, END_WORD_CHAR_ID, PADDING_WITHIN_WORD_CHAR_ID}
    specials |= {char_id for token in (BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN)
                 for char_id in word_to_char_ids(token, config.max_characters_per_token)}
    characters = [char_id for char_id in range(PADDING_CHAR_ID + 1, config.char_vocab_size) if char_id not in specials]
    per_word = config.max_characters_per_token - 2
    rows = []
    for start in range(0, len(characters), per_word):
        row = [BEGIN_WORD_CHAR_ID, *characters[start : start + per_word], END_WORD_CHAR_ID]
        rows.append(row + [PADDING_WITHIN_WORD_CHAR_ID] * (config.max_characters_per_token - len(row)))
    return np.array(rows)
