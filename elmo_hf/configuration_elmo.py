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
from typing import TYPE_CHECKING

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

if TYPE_CHECKING:
    # Never run (importing transformers.pipelines takes seconds), but named here so that `save_pretrained`, which
    # copies the files this one imports, copies pipeline_elmo.py beside it, and remote loading fetches it.
    from .pipeline_elmo import ElmoTokenClassificationPipeline  # noqa: F401

ELMO_ACTIVATIONS = ("relu", "tanh")
SCALAR_MIX_LAYER_NORMS = (None, "token", "batch")
# Remote code: the classes a saved folder names for `trust_remote_code=True` loading (the files travel with it).
ELMO_AUTO_MAP = {
    "AutoConfig": "configuration_elmo.ElmoConfig",
    "AutoModel": "modeling_elmo.ElmoModel",
    "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
    "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
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
            Number of character ids: 0 pads whole words, 1..256 are UTF-8 bytes + 1, 257..261 the markers.
        max_characters_per_token (`int`, defaults to 50):
            Character ids per word, begin/end-of-word marks included.
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
            Standard deviation of the normal initialiser for weights that are not loaded.
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

    char_vocab_size: int = 262
    max_characters_per_token: int = 50
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
    initializer_range: float = 0.02
    freeze_bilm: bool = True
    scalar_mix_parameters: list[float] | None = None
    scalar_mix_layer_norm: str | None = None
    elmo_dropout: float | int = 0.5
    scalar_mix_l2_coefficient: float | int = 0.0
    task_lstm_dim: int | None = None
    task_lstm_layers: int = 1
    concatenate_elmo_to_task_output: bool = False
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
    def num_filters(self) -> int:
        """Width of the character CNN output (all banks concatenated)."""
        return sum(num for _, num in self.filters)

    def validate_architecture(self):
        """Checks every architecture field and names the bad one."""
        super().validate_architecture()
        positive = ("char_embedding_dim", "projection_dim", "lstm_dim", "num_layers")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"ElmoConfig.{name} must be a positive integer, got {getattr(self, name)}.")
        if self.char_vocab_size < 262:
            raise ValueError(
                f"ElmoConfig.char_vocab_size must be at least 262 (ELMo's character ids), got {self.char_vocab_size}."
            )
        if self.max_characters_per_token < 3:
            raise ValueError(
                "ElmoConfig.max_characters_per_token must be at least 3 (begin-of-word, one byte, end-of-word), "
                f"got {self.max_characters_per_token}."
            )
        if self.num_highway_layers < 0:
            raise ValueError(f"ElmoConfig.num_highway_layers must be >= 0, got {self.num_highway_layers}.")
        if self.activation not in ELMO_ACTIVATIONS:
            raise ValueError(f"ElmoConfig.activation must be one of {ELMO_ACTIVATIONS}, got {self.activation!r}.")
        if not self.filters:
            raise ValueError("ElmoConfig.filters must list at least one [width, num_filters] bank.")
        for bank in self.filters:
            if len(bank) != 2 or not all(isinstance(v, int) and v >= 1 for v in bank):
                raise ValueError(f"ElmoConfig.filters entries must be [width, num_filters] positive ints, got {bank}.")
            if bank[0] > self.max_characters_per_token:
                raise ValueError(
                    f"ElmoConfig.filters has width {bank[0]}, wider than max_characters_per_token "
                    f"({self.max_characters_per_token})."
                )
        for name in ("cell_clip", "projection_clip"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"ElmoConfig.{name} must be positive or None (no clipping), got {value}.")
        self._validate_task_fields()

    def _validate_task_fields(self):
        """Checks the fields the task heads read."""
        if self.scalar_mix_parameters is not None and len(self.scalar_mix_parameters) != self.num_layers + 1:
            raise ValueError(
                f"ElmoConfig.scalar_mix_parameters needs num_layers + 1 = {self.num_layers + 1} values, got "
                f"{len(self.scalar_mix_parameters)}."
            )
        if self.scalar_mix_layer_norm not in SCALAR_MIX_LAYER_NORMS:
            raise ValueError(
                f"ElmoConfig.scalar_mix_layer_norm must be one of {SCALAR_MIX_LAYER_NORMS}, got "
                f"{self.scalar_mix_layer_norm!r}."
            )
        if not 0 <= self.elmo_dropout < 1:
            raise ValueError(f"ElmoConfig.elmo_dropout must be in [0, 1), got {self.elmo_dropout}.")
        if self.scalar_mix_l2_coefficient < 0:
            raise ValueError(
                f"ElmoConfig.scalar_mix_l2_coefficient must be >= 0, got {self.scalar_mix_l2_coefficient}."
            )
        if self.task_lstm_dim is not None and self.task_lstm_dim < 1:
            raise ValueError(f"ElmoConfig.task_lstm_dim must be a positive integer or None, got {self.task_lstm_dim}.")
        if self.task_lstm_layers < 1:
            raise ValueError(f"ElmoConfig.task_lstm_layers must be >= 1, got {self.task_lstm_layers}.")


__all__ = ["ElmoConfig"]
