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
"""The original ELMo checkpoint (bilm-tf / AllenNLP `options.json` + weights `.hdf5`): its names, shapes and layouts.

This is the only file of elmo-hf that spells the original dataset names. `original_datasets(config)` is the one
table: each row is one dataset of the weights file with its shape, the parameters of `ElmoModel` it becomes, and the
transform both ways, so that the shape check, the conversion, an export back to the original format and the float64
reference (`reference.py`, through the name functions below) all derive from it.
"""

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elmo_hf import ElmoConfig
from elmo_hf.errors import ElmoInputError, config_error_message

# TensorFlow orders the LSTM gate blocks i, j (candidate), f, o; torch orders them i, f, g (candidate), o.
TF_TO_TORCH_GATES = (0, 2, 1, 3)
# TensorFlow's LSTMCell adds this to the forget gate at run time; it is not stored in the checkpoint.
TF_FORGET_BIAS = 1.0
# `char_cnn.n_characters` of the released options (262 at training time, 261 in the files for inference).
N_CHARACTERS = (261, 262)
# The most `char_cnn.max_characters_per_token` converted: the released options use 50; a row of ids per word of many
# more (an absurd value, 10**12) would exhaust memory when the model is built.
MAX_CHARACTERS_PER_TOKEN = 1000


class ConversionError(ElmoInputError):
    """The checkpoint or the requested output cannot be used; the message says what is wrong and what to do (exit
    status 2 of the commands)."""


# Dataset names, as bilm-tf named its TensorFlow variables. `kind` of a highway layer is "carry" or "transform".
CHAR_EMBEDDINGS = "char_embed"


def conv_weight_name(index: int) -> str:
    return f"CNN/W_cnn_{index}"


def conv_bias_name(index: int) -> str:
    return f"CNN/b_cnn_{index}"


def highway_weight_name(index: int, kind: str) -> str:
    return f"CNN_high_{index}/W_{kind}"


def highway_bias_name(index: int, kind: str) -> str:
    return f"CNN_high_{index}/b_{kind}"


PROJECTION_WEIGHT = "CNN_proj/W_proj"
PROJECTION_BIAS = "CNN_proj/b_proj"


def _cell(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def cell_kernel_name(direction: int, layer: int) -> str:
    """`W_0`, `(2 * projection_dim, 4 * lstm_dim)`: rows for `[input; previous hidden]`, gate blocks i, j, f, o."""
    return f"{_cell(direction, layer)}/W_0"


def cell_bias_name(direction: int, layer: int) -> str:
    return f"{_cell(direction, layer)}/B"


def cell_projection_name(direction: int, layer: int) -> str:
    return f"{_cell(direction, layer)}/W_P_0"


@dataclass(frozen=True)
class OriginalDataset:
    """One dataset of an original weights file and the `ElmoModel` parameters it becomes.

    `to_parameters(dataset)` returns the parameters in the order of `parameters`; `to_dataset(*parameters)` is its
    inverse (exact, except that the forget bias is stored with `TF_FORGET_BIAS` folded in).
    """

    name: str
    shape: tuple[int, ...]
    parameters: tuple[str, ...]
    to_parameters: Callable[[np.ndarray], tuple[np.ndarray, ...]]
    to_dataset: Callable[..., np.ndarray]


def _same(array: np.ndarray) -> tuple[np.ndarray]:
    return (array,)


def _transposed(array: np.ndarray) -> tuple[np.ndarray]:
    """TF `x @ W` weights (in, out) <-> torch Linear weight (out, in)."""
    return (array.T,)


def _add_padding_row(array: np.ndarray) -> tuple[np.ndarray]:
    """(261, E) embeddings of raw ids -> (262, E) indexed by our ids; id 0 pads a word and embeds to zeros."""
    return (np.concatenate([np.zeros_like(array[:1]), array]),)


def _drop_padding_row(embeddings: np.ndarray) -> np.ndarray:
    return embeddings[1:]


def _conv_to_torch(array: np.ndarray) -> tuple[np.ndarray]:
    """TF conv2d kernel (1, width, E, n) -> torch Conv1d weight (n, E, width)."""
    return (array[0].transpose(2, 1, 0),)


def _conv_to_tf(weight: np.ndarray) -> np.ndarray:
    return weight.transpose(2, 1, 0)[None]


def _reorder_gates(array: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """Gate blocks along the last axis, block `i` of the result being block `order[i]` of `array`."""
    blocks = np.split(array, 4, axis=-1)
    return np.concatenate([blocks[index] for index in order], axis=-1)


def _torch_to_tf_gates() -> tuple[int, ...]:
    return tuple(int(index) for index in np.argsort(TF_TO_TORCH_GATES))


def _kernel_to_torch(array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`W_0` (2P, 4C) -> input-to-gates and hidden-to-gates weights, each (4C, P), in torch gate order."""
    gates = _reorder_gates(array, TF_TO_TORCH_GATES)
    return gates[: array.shape[0] // 2].T, gates[array.shape[0] // 2 :].T


def _kernel_to_tf(input_to_gates: np.ndarray, hidden_to_gates: np.ndarray) -> np.ndarray:
    return _reorder_gates(np.concatenate([input_to_gates.T, hidden_to_gates.T]), _torch_to_tf_gates())


def _bias_to_torch(array: np.ndarray) -> tuple[np.ndarray]:
    """`B` in torch gate order with TF's run-time forget bias folded in."""
    bias = _reorder_gates(array, TF_TO_TORCH_GATES).copy()
    lstm_dim = bias.shape[0] // 4
    bias[lstm_dim : 2 * lstm_dim] += TF_FORGET_BIAS
    return (bias,)


def _bias_to_tf(bias: np.ndarray) -> np.ndarray:
    bias = bias.copy()
    lstm_dim = bias.shape[0] // 4
    bias[lstm_dim : 2 * lstm_dim] -= TF_FORGET_BIAS
    return _reorder_gates(bias, _torch_to_tf_gates())


def original_datasets(config: ElmoConfig) -> list[OriginalDataset]:
    """The table: every dataset an original weights file holds for `config`, in file order, and what it becomes."""
    embed, filters, projection = config.char_embedding_dim, config.num_filters, config.projection_dim
    gates = 4 * config.lstm_dim
    table = [
        OriginalDataset(CHAR_EMBEDDINGS, (config.char_vocab_size - 1, embed),
                        ("token_encoder.char_embeddings.weight",), _add_padding_row, _drop_padding_row)
    ]
    for index, (width, num) in enumerate(config.filters):
        ours = f"token_encoder.char_cnn.convolutions.{index}"
        table.append(OriginalDataset(conv_weight_name(index), (1, width, embed, num), (f"{ours}.weight",),
                                     _conv_to_torch, _conv_to_tf))
        table.append(OriginalDataset(conv_bias_name(index), (num,), (f"{ours}.bias",), _same, np.asarray))
    for index in range(config.num_highway_layers):
        # bilm-tf's "carry" gate multiplies the transformed branch: it is our gate.
        for kind, ours in (("carry", "gate"), ("transform", "transform")):
            ours = f"token_encoder.highway.layers.{index}.{ours}"
            table.append(OriginalDataset(highway_weight_name(index, kind), (filters, filters), (f"{ours}.weight",),
                                         _transposed, np.transpose))
            table.append(OriginalDataset(highway_bias_name(index, kind), (filters,), (f"{ours}.bias",), _same,
                                         np.asarray))
    table.append(OriginalDataset(PROJECTION_WEIGHT, (filters, projection), ("token_encoder.projection.weight",),
                                 _transposed, np.transpose))
    table.append(OriginalDataset(PROJECTION_BIAS, (projection,), ("token_encoder.projection.bias",), _same,
                                 np.asarray))
    for layer in range(config.num_layers):
        for direction, name in enumerate(("forward", "backward")):
            ours = f"bilm.layers.{layer}.{name}_cell"
            table.append(OriginalDataset(
                cell_kernel_name(direction, layer), (2 * projection, gates),
                (f"{ours}.input_to_gates.weight", f"{ours}.hidden_to_gates.weight"), _kernel_to_torch, _kernel_to_tf,
            ))
            table.append(OriginalDataset(cell_bias_name(direction, layer), (gates,), (f"{ours}.hidden_to_gates.bias",),
                                         _bias_to_torch, _bias_to_tf))
            table.append(OriginalDataset(cell_projection_name(direction, layer), (config.lstm_dim, projection),
                                         (f"{ours}.projection.weight",), _transposed, np.transpose))
    return table


def original_shapes(config: ElmoConfig) -> dict[str, tuple[int, ...]]:
    """Every dataset an original weights file must hold for `config`, with its shape."""
    return {dataset.name: dataset.shape for dataset in original_datasets(config)}


def to_state_dict(arrays: dict[str, np.ndarray], config: ElmoConfig) -> dict[str, np.ndarray]:
    """Original datasets (by name) -> `ElmoModel` parameters (by state-dict key), as contiguous arrays."""
    state = {}
    for dataset in original_datasets(config):
        for key, value in zip(dataset.parameters, dataset.to_parameters(arrays[dataset.name])):
            state[key] = np.ascontiguousarray(value)
    return state


def to_original(state: dict[str, np.ndarray], config: ElmoConfig) -> dict[str, np.ndarray]:
    """The inverse of `to_state_dict`: `ElmoModel` parameters -> the original datasets, by name."""
    return {
        dataset.name: np.ascontiguousarray(dataset.to_dataset(*(state[key] for key in dataset.parameters)))
        for dataset in original_datasets(config)
    }


def check_max_characters(value: object, field: str) -> None:
    """Raises `ConversionError` where a checkpoint's characters per word, its `field`, exceed
    `MAX_CHARACTERS_PER_TOKEN` (a value that is no integer is the config's to refuse)."""
    if isinstance(value, int) and value > MAX_CHARACTERS_PER_TOKEN:
        raise ConversionError(
            f"{field} is {value}; at most {MAX_CHARACTERS_PER_TOKEN} is converted (the released ELMo checkpoints use "
            "50)."
        )


def check_input_file(path: Path, what: str, hint: str) -> None:
    """Raises `ConversionError` unless `path` is a regular file, naming what it is instead (absent, a folder, a device
    or a pipe) and ending with `hint`."""
    if path.is_file():
        return
    if path.is_dir():
        raise ConversionError(f"{what} {path} is a folder, not a file; {hint}.")
    if path.exists():
        raise ConversionError(f"{what} {path} is not a regular file (a device, a pipe or a socket); {hint}.")
    raise ConversionError(f"{what} not found: {path}")


def read_options(path: str | os.PathLike) -> dict:
    """Reads an original `options.json`."""
    path = Path(path)
    check_input_file(path, "options file", "pass the checkpoint's options.json")
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConversionError(f"options file {path} is not valid JSON ({error}); pass the checkpoint's options.json.")
    except OSError as error:
        raise ConversionError(f"options file {path} cannot be read: {error.strerror or error}.")
    if not isinstance(options, dict) or not isinstance(options.get("lstm"), dict) or not isinstance(
        options.get("char_cnn"), dict
    ):
        raise ConversionError(
            f"options file {path} has no 'lstm' and 'char_cnn' sections; is it an ELMo options.json?"
        )
    return options


def convert_config(options: dict) -> ElmoConfig:
    """Maps the original options (training-only keys are ignored) to an `ElmoConfig`."""
    lstm, char_cnn = options["lstm"], options["char_cnn"]
    try:
        fields = {
            "char_embedding_dim": char_cnn["embedding"]["dim"],
            "filters": [list(bank) for bank in char_cnn["filters"]],
            "activation": char_cnn["activation"],
            "num_highway_layers": char_cnn.get("n_highway") or 0,
            "max_characters_per_token": char_cnn["max_characters_per_token"],
            "projection_dim": lstm["projection_dim"],
            "lstm_dim": lstm["dim"],
            "num_layers": lstm.get("n_layers", 1),
            # bilm-tf: an absent clip is no clip; AllenNLP: any falsy clip is no clip.
            "cell_clip": lstm.get("cell_clip") or None,
            "projection_clip": lstm.get("proj_clip") or None,
            "use_skip_connections": bool(lstm.get("use_skip_connections", False)),
        }
    except (KeyError, TypeError) as error:
        raise ConversionError(f"options.json lacks the field {error} that the architecture needs.")
    if char_cnn.get("n_characters", N_CHARACTERS[-1]) not in N_CHARACTERS:
        raise ConversionError(
            f"options.json char_cnn.n_characters is {char_cnn['n_characters']}; ELMo checkpoints use 261 or 262."
        )
    if fields["activation"] not in ("relu", "tanh"):
        raise ConversionError(
            f"unknown activation {fields['activation']!r} in options.json; expected 'relu' or 'tanh'."
        )
    check_max_characters(fields["max_characters_per_token"], "options.json char_cnn.max_characters_per_token")
    try:
        return ElmoConfig(**fields)
    except Exception as error:  # the strict config names the bad field
        raise ConversionError(f"options.json describes an invalid architecture: {config_error_message(error)}")


def _to_float32(name: str, array: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Dataset `name` as float32, and why its values cannot be the weights unchanged: non-finite or lossy values."""
    problems = []
    finite = np.isfinite(array)
    if not finite.all():
        first = tuple(int(i) for i in np.argwhere(~finite)[0])
        problems.append(
            f"dataset {name!r} holds {int((~finite).sum())} non-finite values (NaN or inf), the first "
            f"{float(array[first])!r} at index {first}"
        )
    with np.errstate(over="ignore", under="ignore"):  # reported below, by value
        cast = array.astype(np.float32)
    lossy = (finite & ~np.isfinite(cast)) | ((array != 0) & (cast == 0))
    if lossy.any():
        first = tuple(int(i) for i in np.argwhere(lossy)[0])
        problems.append(
            f"dataset {name!r} is {array.dtype} and {int(lossy.sum())} of its values do not fit float32 (the first, "
            f"{float(array[first])!r} at index {first}, would become {float(cast[first])!r})"
        )
    return cast, problems


def read_weights(path: str | os.PathLike, config: ElmoConfig) -> dict[str, np.ndarray]:
    """Reads every dataset `config` needs from an original weights file as float32, by name.

    Presence, shape, dtype (real floating point) and values (finite, and unchanged by the cast to float32 but for
    rounding) of every dataset are checked, and all problems reported at once, before anything is converted.
    """
    import h5py

    path = Path(path)
    check_input_file(path, "weights file", "pass the checkpoint's weights .hdf5")
    if not h5py.is_hdf5(path):
        raise ConversionError(f"weights file {path} is not an HDF5 file; pass the checkpoint's weights .hdf5.")
    problems, arrays = [], {}
    try:
        with h5py.File(path, "r") as weights:
            for name, shape in original_shapes(config).items():
                dataset = weights.get(name)
                if not isinstance(dataset, h5py.Dataset):
                    problems.append(f"missing dataset {name!r} (expected shape {shape})")
                elif tuple(dataset.shape) != shape:
                    problems.append(f"dataset {name!r} has shape {tuple(dataset.shape)}, the options imply {shape}")
                elif dataset.dtype.kind != "f":
                    problems.append(f"dataset {name!r} has dtype {dataset.dtype}; ELMo weights are floating point")
                else:
                    arrays[name], found = _to_float32(name, dataset[()])
                    problems += found
    except (OSError, KeyError, RuntimeError) as error:
        raise ConversionError(
            f"weights file {path} cannot be read ({error}); it is probably truncated or damaged: download it again."
        )
    if problems:
        raise ConversionError(
            f"weights file {path} cannot be converted:\n  - " + "\n  - ".join(problems)
            + "\nCheck that --options and --weights belong to the same checkpoint, and that the weights file is the "
            "one released, complete and unmodified."
        )
    return arrays
