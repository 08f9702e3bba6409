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
"""Export an elmo-hf folder back to the original format: `options.json` + `weights.hdf5` (bilm-tf / AllenNLP).

    elmo-hf export --model elmo-ptb --output elmo-ptb-original

The biLM of any folder (base model, task head, pretraining model) is written in exactly the layout the converter
reads: the same dataset names, shapes and float32 dtype, TensorFlow's gate order, the forget bias taken out again,
no padding row. A pretraining folder also gets its softmax (`softmax.hdf5`: `softmax/W` `(n_tokens_vocab,
projection_dim)` and `softmax/b`, as bilm-tf names the variables) and its `vocab.txt`, and `n_tokens_vocab` in the
options. Task-head weights have no place in the format and are left out (the command says so). Configurations the
format cannot express are refused; every array is checked to convert back to the model's own before anything is
written, and the folder appears only when complete.
"""

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from transformers.modeling_utils import load_state_dict
from transformers.utils import logging

from elmo_hf import ElmoConfig, ElmoModel
from elmo_hf.conversion.checkpoint import ConversionError, N_CHARACTERS, to_original, to_state_dict
from elmo_hf.conversion.convert import (
    UNREADABLE_FOLDER_ERRORS,
    check_output,
    load_model_weights,
    model_folder,
    read_config,
    staged_folder,
)
from elmo_hf.corpus.data import VOCABULARY_FILE

logger = logging.get_logger(__name__)

OPTIONS_FILE = "options.json"
WEIGHTS_FILE = "weights.hdf5"
SOFTMAX_FILE = "softmax.hdf5"
# What the original's character mapping fixes (AllenNLP hard-codes 50 characters per word).
ORIGINAL_CHAR_VOCAB_SIZE = N_CHARACTERS[-1]
ORIGINAL_MAX_CHARACTERS = 50
BILM_PREFIX = "elmo."


class OriginalExportError(ConversionError):
    """The folder cannot be written in the original format; the message says why (an `ElmoInputError`)."""


def check_exportable(config: ElmoConfig) -> None:
    """Raises for configurations the original format cannot express."""
    if config.char_vocab_size != ORIGINAL_CHAR_VOCAB_SIZE:
        raise OriginalExportError(
            f"char_vocab_size is {config.char_vocab_size}; the original format holds exactly "
            f"{ORIGINAL_CHAR_VOCAB_SIZE} character ids."
        )
    if config.max_characters_per_token != ORIGINAL_MAX_CHARACTERS:
        raise OriginalExportError(
            f"max_characters_per_token is {config.max_characters_per_token}; AllenNLP reads exactly "
            f"{ORIGINAL_MAX_CHARACTERS} characters per word, so the original format cannot carry this model."
        )


def original_arrays(state_dict: dict[str, torch.Tensor], config: ElmoConfig) -> dict[str, np.ndarray]:
    """Our biLM state dict (no prefix) -> every original dataset, float32, checked to convert back to ours (exactly,
    up to the float32 rounding of the forget bias, which the conversion adds)."""
    ours = {name: tensor.float().numpy() for name, tensor in state_dict.items()}
    arrays = {name: array.astype(np.float32) for name, array in to_original(ours, config).items()}
    for name, back in to_state_dict(arrays, config).items():
        if not np.allclose(back, ours[name], rtol=0, atol=1e-6):
            raise OriginalExportError(
                f"{name} has no exact counterpart in the original datasets (for example a non-zero padding row of "
                "the character embeddings); the original format cannot hold this model."
            )
    return arrays


def original_options(config: ElmoConfig) -> dict:
    """The `options.json` of `config`; an absent clip means no clip, as bilm-tf reads it."""
    lstm = {
        "use_skip_connections": config.use_skip_connections,
        "projection_dim": config.projection_dim,
        "dim": config.lstm_dim,
        "n_layers": config.num_layers,
    }
    if config.cell_clip is not None:
        lstm["cell_clip"] = config.cell_clip
    if config.projection_clip is not None:
        lstm["proj_clip"] = config.projection_clip
    options = {
        "lstm": lstm,
        "char_cnn": {
            "activation": config.activation,
            "filters": [list(bank) for bank in config.filters],
            "n_highway": config.num_highway_layers,
            "embedding": {"dim": config.char_embedding_dim},
            "n_characters": ORIGINAL_CHAR_VOCAB_SIZE,
            "max_characters_per_token": config.max_characters_per_token,
        },
    }
    if config.word_vocab_size is not None:
        options["n_tokens_vocab"] = config.word_vocab_size
    return options


def _write_hdf5(path: Path, arrays: dict[str, np.ndarray]) -> None:
    import h5py

    with h5py.File(path, "w") as file:
        for name, array in arrays.items():
            file.create_dataset(name, data=array)


def read_folder(folder: Path) -> tuple[ElmoConfig, dict[str, torch.Tensor]]:
    """The config and all the weights of a model folder, whose biLM weights are checked to be exactly the ones its
    config describes (`load_model_weights`)."""
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        raise OriginalExportError(f"--model {folder} has no .safetensors weights.")
    config = read_config(folder, OriginalExportError)
    state_dict = {}
    try:
        for path in weights:
            state_dict.update(load_state_dict(path))
    except UNREADABLE_FOLDER_ERRORS as error:
        raise OriginalExportError(f"--model {folder} cannot be read: {error}") from error
    load_model_weights(ElmoModel, folder, OriginalExportError, "export a folder as elmo-hf wrote it")
    return config, state_dict


def export_original(model: str | os.PathLike, output: str | os.PathLike, *, overwrite: bool = False,
                    report: Callable[[str], None] = logger.info) -> list[str]:
    """Writes the original-format files of a model into the folder `output`; returns the weights left out.

    Args:
        model: an elmo-hf folder (base model, head or pretraining model) or a packaged model's name.
        output: the folder to write; it must be empty or absent unless `overwrite`, and appears only when complete.
        overwrite: replace a non-empty `output` (only once the new folder is complete).
        report: receives the leftovers of interrupted runs that were cleaned.

    Raises `OriginalExportError` (an `ElmoInputError`) for a model or an `output` that cannot be used and
    `ElmoRunError` if writing fails; in both cases nothing was written.
    """
    model_dir = model_folder(model, OriginalExportError)
    config, state_dict = read_folder(model_dir)
    check_exportable(config)
    if any(name.startswith(BILM_PREFIX) for name in state_dict):  # a head: the biLM is its `elmo` submodule
        bilm = {name.removeprefix(BILM_PREFIX): tensor for name, tensor in state_dict.items()
                if name.startswith(BILM_PREFIX)}
        others = [name for name in state_dict if not name.startswith(BILM_PREFIX)]
    else:
        bilm, others = state_dict, []
    arrays = original_arrays(bilm, config)
    softmax = {}
    if "softmax.weight" in others:
        if not (model_dir / VOCABULARY_FILE).is_file():
            raise OriginalExportError(f"{model_dir} has a softmax but no {VOCABULARY_FILE}; its rows cannot be named.")
        softmax = {f"softmax/{short}": state_dict[f"softmax.{name}"].float().numpy()
                   for short, name in (("W", "weight"), ("b", "bias"))}
        others = [name for name in others if not name.startswith("softmax.")]

    with staged_folder(check_output(output, [model_dir]), overwrite, report) as staging:
        (staging / OPTIONS_FILE).write_text(json.dumps(original_options(config), indent=1), encoding="utf-8")
        _write_hdf5(staging / WEIGHTS_FILE, arrays)
        if softmax:
            _write_hdf5(staging / SOFTMAX_FILE, softmax)
            shutil.copy(model_dir / VOCABULARY_FILE, staging / VOCABULARY_FILE)
    return others
