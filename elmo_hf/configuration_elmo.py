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
"""ELMo model configuration."""

import copy
import math
import os
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

from .packaged_elmo import check_save_directory, resolve_model_name
from .tokenization_elmo import CHAR_VOCAB_SIZE

if TYPE_CHECKING:
    # Not imported at run time (it imports transformers.pipelines), but named here so that `save_pretrained`, which
    # copies the files this one imports, copies pipeline_elmo.py beside it, and remote loading fetches it.
    from .pipeline_elmo import ElmoTokenClassificationPipeline  # noqa: F401

ELMO_ACTIVATIONS = ("relu", "tanh")
ELMO_IMPLEMENTATIONS = ("auto", "eager", "export")
SCALAR_MIX_LAYER_NORMS = (None, "token", "batch")
SOFTMAX_TYPES = ("full", "sampled")
# Remote code: the classes a saved folder names for `trust_remote_code=True` loading (the files travel with it).
ELMO_AUTO_MAP = {
    "AutoConfig": "configuration_elmo.ElmoConfig",
    "AutoModel": "modeling_elmo.ElmoModel",
    "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
    "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
    "AutoModelForPreTraining": "modeling_elmo.ElmoForPreTraining",
}
# The stock token-classification pipeline cannot read one row of character ids per word, so saved folders name ours.
_ELMO_TOKEN_CLASSIFICATION_PIPELINE = {
    "impl": "pipeline_elmo.ElmoTokenClassificationPipeline",
    "pt": ["AutoModelForTokenClassification"],
    "type": "text",
}
ELMO_CUSTOM_PIPELINES = {
    "token-classification": _ELMO_TOKEN_CLASSIFICATION_PIPELINE,
    "ner": _ELMO_TOKEN_CLASSIFICATION_PIPELINE,
}


@strict
class ElmoConfig(PreTrainedConfig):
    r"""
    Configuration of an ELMo biLM ([Peters et al., 2018](https://arxiv.org/abs/1802.05365)). The defaults are the
    "original" published architecture `2x4096_512_2048cnn_2xhighway`.

    Args:
        char_vocab_size (`int`, defaults to 262):
            Number of character ids: 0 pads whole words, 1..256 are UTF-8 bytes + 1, 257..261 the markers. With
            `boundary_input_ids` (a character dictionary), the dictionary's size + 1.
        max_characters_per_token (`int`, defaults to 50):
            Character ids per word, begin/end-of-word marks included.
        word_embedding_vocab_size (`int`, defaults to 0):
            Number of word ids of the token layer's word embedding (the dictionary's size + 1, id 0 pads); 0 (the
            original English checkpoints) for none.
        word_embedding_dim (`int`, defaults to 0):
            Width of the word embedding, concatenated before the character CNN's output (ELMoForManyLangs); 0 for
            none. With it, `input_ids` carry the word id as one more id after each word's character ids.
        boundary_input_ids (`list[list[int]]`, *optional*):
            The `input_ids` rows of the sentence boundaries `<S>` and `</S>` (`row_width` ids each), for models whose
            character ids come from a dictionary. `None` (default): UTF-8 byte ids, whose boundary rows are fixed.
        char_embedding_dim (`int`, defaults to 16):
            Width of the character embeddings.
        filters (`list[list[int]]`):
            `[width, num_filters]` per convolution bank of the character CNN.
        activation (`str`, defaults to `"relu"`):
            Activation after max-pooling the convolutions, `"relu"` or `"tanh"` (highway layers always use relu).
        num_highway_layers (`int`, defaults to 2):
            Highway layers after the character CNN.
        projection_dim (`int`, defaults to 512):
            Width of the token layer and of each LSTM direction's projected output.
        lstm_dim (`int`, defaults to 4096):
            LSTM cell size.
        num_layers (`int`, defaults to 2):
            biLSTM layers per direction.
        cell_clip (`float`, *optional*, defaults to 3.0):
            The LSTM cell is clipped to `[-cell_clip, cell_clip]`; `None` turns clipping off.
        projection_clip (`float`, *optional*, defaults to 3.0):
            The projected LSTM output is clipped to `[-projection_clip, projection_clip]`; `None` turns it off.
        use_skip_connections (`bool`, defaults to `True`):
            Residual connection around every LSTM layer but the first.
        initializer_range (`float`, defaults to 0.02):
            Standard deviation of the normal initialiser of the task heads' weights that are not loaded (the biLM and
            the word softmax start as the original's did: `docs/pretraining.md`, "Initialisation").
        freeze_bilm (`bool`, defaults to `True`):
            Task heads keep the biLM's weights fixed (the paper's setup); `False` fine-tunes them too.
        scalar_mix_parameters (`list[float]`, *optional*):
            Fixed pre-softmax layer weights (`num_layers + 1` values) for the heads' scalar mixes; they and gamma are
            then not trained. `None` (default) learns them from equal weights.
        scalar_mix_layer_norm (`str`, *optional*):
            Normalise each layer before mixing: `"token"` per word vector (batch-independent), `"batch"` over all
            words of the batch as the originals' `do_layer_norm` does (a word's vector then depends on its batch),
            `None` (default, as in the originals) off. To normalise, prefer `"token"`: predictions then do not change
            with batch size, padding or the other sentences of a batch; `"batch"` is for parity with the originals.
        elmo_dropout (`float`, defaults to 0.5):
            Dropout on the mixed ELMo vectors (the originals' default).
        scalar_mix_l2_coefficient (`float`, defaults to 0.0):
            `lambda` of the paper's penalty `lambda * ||s||^2` on the mix weights, added to a head's training loss.
        task_lstm_dim (`int`, *optional*):
            Hidden size per direction of a task biLSTM between the ELMo vectors and the classifier; `None` (default)
            puts the classifier directly on the ELMo vectors.
        task_lstm_layers (`int`, defaults to 1):
            Layers of the task biLSTM.
        concatenate_elmo_to_task_output (`bool`, defaults to `False`):
            With a task biLSTM, also concatenate a second, independent ELMo mix to its output (paper §3.3).
        word_vocab_size (`int`, *optional*):
            Words of the pretraining softmax ([`ElmoForPreTraining`]), boundary and unknown words included; the
            vocabulary itself is saved beside the model as `vocab.txt`.
        softmax_type (`str`, defaults to `"full"`):
            Training loss of the pretraining softmax: `"full"`, or `"sampled"` (the original's sampled softmax over
            `softmax_num_samples` words drawn log-uniformly, for large vocabularies). Evaluation is always full.
        softmax_num_samples (`int`, defaults to 8192):
            Words sampled per batch by the sampled softmax (the original's `n_negative_samples_batch`).
        pretraining_dropout (`float`, defaults to 0.1):
            Dropout while pretraining on every biLSTM layer's input and on the top layer's output before the softmax
            (the original trains with 0.1).
        elmo_implementation (`str`, defaults to `"auto"`):
            `"auto"` runs the CPU kernels of `cpu_kernels.py` where they compute the same thing as the model's own
            modules (CPU, no autograd, float32 or bfloat16, stock layers without hooks), and while autograd records
            on CPU in float32 or float64 the LSTM cells' fused autograd function of `training_kernels.py` (the same
            forward, its own backward; one backward pass only); `"eager"` always runs the modules themselves (the
            reference computation, also for double backward); `"export"` runs the export path, the computation that
            `torch.export` and ONNX export take whatever this is set to (every sentence runs to the batch's longest
            length, no host synchronisation), e.g. for `torch.compile(model, fullgraph=True, dynamic=True)`.

    Every field is checked whenever it is set (construction, attribute assignment, `update`, `from_pretrained`
    keywords), and the relations between fields (`scalar_mix_parameters` against `num_layers`, filter widths against
    `max_characters_per_token`) once the config is complete and again when a model is built from it.

    `hidden_size` is the width of `last_hidden_state`, `2 * projection_dim` (forward and backward halves). Saved
    configs name the model code in `auto_map` and [`ElmoTokenClassificationPipeline`] in `custom_pipelines`, so a
    folder works with `trust_remote_code=True` where elmo-hf is not installed.

    Example:

    ```python
    >>> from elmo_hf import ElmoConfig, ElmoModel
    >>> config = ElmoConfig(lstm_dim=1024, projection_dim=128, num_highway_layers=1)  # the "small" architecture
    >>> model = ElmoModel(config)
    ```"""

    model_type = "elmo"
    attribute_map = {"vocab_size": "char_vocab_size", "num_hidden_layers": "num_layers"}

    char_vocab_size: int = CHAR_VOCAB_SIZE
    max_characters_per_token: int = 50
    word_embedding_vocab_size: int = 0
    word_embedding_dim: int = 0
    boundary_input_ids: list[list[int]] | None = None
    char_embedding_dim: int = 16
    filters: list[list[int]] | tuple[tuple[int, int], ...] = (
        (1, 32),
        (2, 32),
        (3, 64),
        (4, 128),
        (5, 256),
        (6, 512),
        (7, 1024),
    )
    activation: str = "relu"
    num_highway_layers: int = 2
    projection_dim: int = 512
    lstm_dim: int = 4096
    num_layers: int = 2
    cell_clip: float | int | None = 3.0
    projection_clip: float | int | None = 3.0
    use_skip_connections: bool = True
    initializer_range: float | int = 0.02
    freeze_bilm: bool = True
    scalar_mix_parameters: list[float | int] | None = None
    scalar_mix_layer_norm: str | None = None
    elmo_dropout: float | int = 0.5
    scalar_mix_l2_coefficient: float | int = 0.0
    task_lstm_dim: int | None = None
    task_lstm_layers: int = 1
    concatenate_elmo_to_task_output: bool = False
    word_vocab_size: int | None = None
    softmax_type: str = "full"
    softmax_num_samples: int = 8192
    pretraining_dropout: float | int = 0.1
    elmo_implementation: str = "auto"
    pad_token_id: int | None = 0
    bos_token_id: int | None = 257
    eos_token_id: int | None = 258

    def __post_init__(self, **kwargs):
        self.filters = [list(bank) for bank in self.filters]
        kwargs["auto_map"] = {**ELMO_AUTO_MAP, **(kwargs.get("auto_map") or {})}
        kwargs["custom_pipelines"] = {**copy.deepcopy(ELMO_CUSTOM_PIPELINES), **(kwargs.get("custom_pipelines") or {})}
        super().__post_init__(**kwargs)

    @property
    def hidden_size(self) -> int:
        """Width of every output layer: forward and backward halves of `projection_dim` each."""
        return 2 * self.projection_dim

    @property
    def row_width(self) -> int:
        """Ids per word in `input_ids`: `max_characters_per_token`, plus the word id with a word embedding."""
        return self.max_characters_per_token + (1 if self.word_embedding_dim else 0)

    @property
    def num_filters(self) -> int:
        """Width of the character CNN output (all banks concatenated)."""
        return sum(num for _, num in self.filters)

    def bilm_parameter_count(self, softmax: bool = False) -> int:
        """Parameters of `ElmoModel` for this config (with `softmax`, of `ElmoForPreTraining`: plus its softmax over
        `word_vocab_size` words), counted from the sizes alone, so that a caller can refuse a model too large to
        build before building it (an `ElmoModel` of `num_layers=2**70` would be built layer by layer until memory
        runs out)."""
        filters, projection, gates = self.num_filters, self.projection_dim, 4 * self.lstm_dim
        count = self.char_vocab_size * self.char_embedding_dim
        count += sum(width * self.char_embedding_dim * num + num for width, num in self.filters)
        count += self.num_highway_layers * 2 * (filters * filters + filters)
        count += self.word_embedding_vocab_size * self.word_embedding_dim
        count += (self.word_embedding_dim + filters) * projection + projection
        # each layer and direction: input-to-gate, hidden-to-gate (with the gates' bias) and the projection
        count += self.num_layers * 2 * (2 * gates * projection + gates + projection * self.lstm_dim)
        return count + (self.word_vocab_size * (projection + 1) if softmax else 0)

    def __setattr__(self, name: str, value: Any):
        """Checks a field's own constraint before it changes (cross-field checks run in `validate`)."""
        name = type(self).attribute_map.get(name, name)
        _check_field(name, value)
        super().__setattr__(name, value)

    @contextmanager
    def _checked_as_a_whole(self):
        """Runs `validate` after the changes made inside; if anything fails the config is left as it was."""
        saved = dict(self.__dict__)
        try:
            yield
            self.validate()
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            raise

    def update(self, config_dict: dict[str, Any]):
        """Sets several fields at once and checks the result as a whole, so related fields (`num_layers` and
        `scalar_mix_parameters`) can change together; on error the config is unchanged."""
        with self._checked_as_a_whole():
            super().update(config_dict)

    def update_from_string(self, update_str: str):
        """As [`~PreTrainedConfig.update_from_string`], checked as a whole like `update`."""
        with self._checked_as_a_whole():
            super().update_from_string(update_str)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args, **kwargs) -> "ElmoConfig":
        """Loads as usual; the name of a packaged model (`elmo_hf.packaged_models()`) loads its config offline."""
        return super().from_pretrained(resolve_model_name(pretrained_model_name_or_path), *args, **kwargs)

    @classmethod
    def get_config_dict(
        cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """As transformers', refusing a folder without `config.json` (or whose `config.json` is `{}` or no JSON
        object): transformers reads it as `{}`, which built the default (4096-cell) architecture over the weights."""
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        if not isinstance(config_dict, dict) or not config_dict:
            raise OSError(
                f"{os.fspath(pretrained_model_name_or_path)} has no ELMo config: its config.json is missing, empty or "
                f"not a JSON object. Load a folder written by save_pretrained, or pass config=ElmoConfig(...)."
            )
        return config_dict, kwargs

    def save_pretrained(self, save_directory: str | os.PathLike, push_to_hub: bool = False, **kwargs):
        """As transformers', with a path that is a file refused by `check_save_directory`."""
        check_save_directory(save_directory)
        super().save_pretrained(save_directory, push_to_hub, **kwargs)

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs) -> "ElmoConfig | tuple[ElmoConfig, dict[str, Any]]":
        """Builds the config, then checks it as a whole: `from_pretrained`'s keyword overrides (`num_layers=3`) are
        set one by one after construction, so only this check sees them together with the saved fields."""
        loaded = super().from_dict(config_dict, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded).validate()
        return loaded

    def validate_architecture(self):
        """Checks every field (again, for values set behind `__setattr__`) and the constraints between fields."""
        super().validate_architecture()
        for name in _FIELD_RULES:
            _check_field(name, getattr(self, name))
        if self.boundary_input_ids is None and self.char_vocab_size < CHAR_VOCAB_SIZE:
            raise ValueError(
                f"ElmoConfig.char_vocab_size must be at least {CHAR_VOCAB_SIZE} (ELMo's character ids), got "
                f"{self.char_vocab_size}."
            )
        for width, _ in self.filters:
            if width > self.max_characters_per_token:
                raise ValueError(
                    f"ElmoConfig.filters has width {width}, wider than max_characters_per_token "
                    f"({self.max_characters_per_token})."
                )
        self._validate_dictionary_fields()
        if self.scalar_mix_parameters is not None and len(self.scalar_mix_parameters) != self.num_layers + 1:
            raise ValueError(
                f"ElmoConfig.scalar_mix_parameters needs num_layers + 1 = {self.num_layers + 1} values, got "
                f"{len(self.scalar_mix_parameters)}; change the two together, e.g. with config.update({{...}})."
            )
        if self.concatenate_elmo_to_task_output and self.task_lstm_dim is None:
            raise ValueError(
                "ElmoConfig.concatenate_elmo_to_task_output=True concatenates a second ELMo mix to the task biLSTM's "
                "output, but there is no task biLSTM (task_lstm_dim=None); set task_lstm_dim or leave it False."
            )

    def _validate_dictionary_fields(self):
        """Checks the word embedding and the dictionary boundary rows (ELMoForManyLangs checkpoints)."""
        if (self.word_embedding_vocab_size > 0) != (self.word_embedding_dim > 0):
            raise ValueError(
                f"ElmoConfig.word_embedding_vocab_size ({self.word_embedding_vocab_size}) and "
                f"word_embedding_dim ({self.word_embedding_dim}) must both be 0 (no word embedding) or both positive."
            )
        if self.boundary_input_ids is None:
            if self.word_embedding_dim:
                raise ValueError(
                    "ElmoConfig.word_embedding_dim needs boundary_input_ids: word ids come from a dictionary, and the "
                    "boundary rows must give the <S> and </S> word ids."
                )
            return
        rows = self.boundary_input_ids
        if len(rows) != 2 or any(len(row) != self.row_width for row in rows):
            raise ValueError(
                f"ElmoConfig.boundary_input_ids must be 2 rows (<S>, </S>) of row_width = {self.row_width} ids, got "
                f"{[len(row) for row in rows]}."
            )
        for row in rows:
            chars, words = row[: self.max_characters_per_token], row[self.max_characters_per_token :]
            if not all(0 < char_id < self.char_vocab_size for char_id in chars) or not all(
                0 < word_id < self.word_embedding_vocab_size for word_id in words
            ):
                raise ValueError(
                    f"ElmoConfig.boundary_input_ids row {row} has ids outside 1..char_vocab_size - 1 "
                    f"({self.char_vocab_size - 1}) or, for the word id, 1..word_embedding_vocab_size - 1."
                )


def is_int(value: Any) -> bool:
    """An int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int_row(row: Any) -> bool:
    return isinstance(row, (list, tuple)) and all(is_int(value) for value in row)


def _is_filter_bank(bank: Any) -> bool:
    return isinstance(bank, (list, tuple)) and len(bank) == 2 and all(is_int(v) and v >= 1 for v in bank)


_POSITIVE_INT = (lambda v: is_int(v) and v >= 1, "a positive integer")
# A clip beyond float32's largest value clips nothing a float32 model holds, and torch cannot clamp float32 with it.
_LARGEST_CLIP = 3.4028234663852886e38
_CLIP = (
    lambda v: v is None or (is_finite_number(v) and 0 < v <= _LARGEST_CLIP),
    "positive or None (no clipping), and finite, at most float32's largest value (3.4e38)",
)
_NON_NEGATIVE = (lambda v: is_finite_number(v) and v >= 0, "a finite number >= 0")
_NO_WORD_EMBEDDING_OR_SIZE = (lambda v: is_int(v) and v >= 0, "an integer >= 0 (0: no word embedding)")
# Each field's own constraint, checked whenever it is set: (test, what a valid value is).
_FIELD_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "char_vocab_size": _POSITIVE_INT,
    "word_embedding_vocab_size": _NO_WORD_EMBEDDING_OR_SIZE,
    "word_embedding_dim": _NO_WORD_EMBEDDING_OR_SIZE,
    "boundary_input_ids": (
        lambda v: v is None or (isinstance(v, (list, tuple)) and all(_is_int_row(row) for row in v)),
        "None (UTF-8 byte ids) or the two rows of ids of <S> and </S>",
    ),
    "max_characters_per_token": (
        lambda v: is_int(v) and v >= 3,
        "an integer of at least 3 (begin-of-word, one byte, end-of-word)",
    ),
    "char_embedding_dim": _POSITIVE_INT,
    "filters": (
        lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(_is_filter_bank(bank) for bank in v),
        "a non-empty list of [width, num_filters] banks of positive integers",
    ),
    "activation": (lambda v: v in ELMO_ACTIVATIONS, f"one of {ELMO_ACTIVATIONS}"),
    "num_highway_layers": (lambda v: is_int(v) and v >= 0, "an integer >= 0"),
    "projection_dim": _POSITIVE_INT,
    "lstm_dim": _POSITIVE_INT,
    "num_layers": _POSITIVE_INT,
    "cell_clip": _CLIP,
    "projection_clip": _CLIP,
    "initializer_range": _NON_NEGATIVE,
    "scalar_mix_parameters": (
        lambda v: v is None or (isinstance(v, (list, tuple)) and len(v) > 0 and all(is_finite_number(w) for w in v)),
        "None (learned weights) or num_layers + 1 finite numbers",
    ),
    "scalar_mix_layer_norm": (lambda v: v in SCALAR_MIX_LAYER_NORMS, f"one of {SCALAR_MIX_LAYER_NORMS}"),
    "elmo_dropout": (lambda v: is_finite_number(v) and 0 <= v < 1, "in [0, 1) (1 would zero every ELMo vector)"),
    "scalar_mix_l2_coefficient": _NON_NEGATIVE,
    "task_lstm_dim": (lambda v: v is None or (is_int(v) and v >= 1), "a positive integer or None (no task biLSTM)"),
    "task_lstm_layers": _POSITIVE_INT,
    "elmo_implementation": (lambda v: v in ELMO_IMPLEMENTATIONS, f"one of {ELMO_IMPLEMENTATIONS}"),
    "word_vocab_size": (
        lambda v: v is None or (is_int(v) and v >= 3),
        "None or an integer of at least 3 (</S>, <S>, <UNK>)",
    ),
    "softmax_type": (lambda v: v in SOFTMAX_TYPES, f"one of {SOFTMAX_TYPES}"),
    "softmax_num_samples": _POSITIVE_INT,
    "pretraining_dropout": (lambda v: is_finite_number(v) and 0 <= v < 1, "in [0, 1)"),
}


def _check_field(name: str, value: Any):
    """Raises `ValueError` naming the field, the rule and the value if `value` breaks `name`'s own constraint."""
    rule = _FIELD_RULES.get(name)
    if rule is not None and not rule[0](value):
        raise ValueError(f"ElmoConfig.{name} must be {rule[1]}, got {value!r}.")


__all__ = ["ElmoConfig"]
