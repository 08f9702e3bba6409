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
"""What the integrations share: loading an ELMo model by name or folder, and turning word lists into the layers a user
asks for, in batches grouped by length exactly as `elmo-hf embed` groups them (so that the vectors are bitwise the
command's for the same batch size)."""

import os
from collections.abc import Iterable, Iterator

import numpy as np
import torch

from .. import ElmoModel, ElmoScalarMix, ElmoTokenizer
from ..corpus.embed import (
    LAYER_CHOICES,
    MODEL_DTYPES,
    OUTPUT_DTYPES,
    NonFiniteVectors,
    Sentence,
    length_grouped_batches,
    load_model,
    sentence_vectors,
)
from ..packaged_elmo import resolve_model_name


def default_device(device: str | torch.device | None) -> torch.device:
    """`device`, or the first GPU if there is one, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def check_settings(device: torch.device, model_dtype: str) -> None:
    """Refuses a model dtype elmo-hf does not run in, and a GPU that torch does not see, before anything loads."""
    if model_dtype not in MODEL_DTYPES:
        raise ValueError(f"model_dtype must be one of {sorted(MODEL_DTYPES)}, got {model_dtype!r}.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device} was asked for, but torch sees no CUDA GPU; use device='cpu'.")


def load_elmo(
    model: str | os.PathLike, device: torch.device, model_dtype: str = "float32"
) -> tuple[ElmoModel, ElmoTokenizer]:
    """The biLM (in eval mode, on `device`) and tokenizer of a packaged model's name, a converted folder or a Hub id;
    a task head's folder gives its biLM. Raises `ValueError` naming the problem for anything else."""
    check_settings(device, model_dtype)
    return load_model(str(resolve_model_name(str(model))), model_dtype, device)


def layer_mix(
    layers: str, num_representations: int, mix_weights: list[float] | None = None, gamma: float = 1.0
) -> ElmoScalarMix | None:
    """The fixed `ElmoScalarMix` of `layers="average"` or `"mix"` (`mix_weights`: the weights themselves, summing to
    1), or None for `"all"` and `"top"`; refuses a mix setting given where it does not apply."""
    if layers not in LAYER_CHOICES:
        raise ValueError(f"layers must be one of {LAYER_CHOICES}, got {layers!r}.")
    if layers != "mix":
        if mix_weights is not None or gamma != 1.0:
            raise ValueError(f"mix_weights and gamma apply to layers='mix' only, not layers={layers!r}.")
        return ElmoScalarMix.average(num_representations) if layers == "average" else None
    if mix_weights is None or len(mix_weights) != num_representations:
        raise ValueError(
            f"layers='mix' needs mix_weights: {num_representations} weights (num_layers + 1 of this model, token "
            f"layer first) summing to 1; got {mix_weights!r}."
        )
    return ElmoScalarMix.from_weights(list(mix_weights), gamma=gamma)


class WordVectors:
    """An ELMo model, its tokenizer and a layer selection: word lists in, one array per sentence out.

    Every call is stateless (each sentence starts from zero LSTM states), so a sentence's vectors do not depend on what
    else is embedded; sentences are grouped by length into batches (`length_grouped_batches`, the `embed` command's
    grouping), which pads little and gives bitwise the command's vectors for the same `batch_size` and `max_tokens`.
    """

    def __init__(
        self,
        model: ElmoModel,
        tokenizer: ElmoTokenizer,
        layers: str = "all",
        mix_weights: list[float] | None = None,
        gamma: float = 1.0,
        dtype: str = "float32",
    ):
        if dtype not in OUTPUT_DTYPES:
            raise ValueError(f"dtype must be one of {sorted(OUTPUT_DTYPES)}, got {dtype!r}.")
        self.model, self.tokenizer, self.layers, self.dtype = model, tokenizer, layers, dtype
        self.num_representations = model.config.num_layers + 1
        self.mix = layer_mix(layers, self.num_representations, mix_weights, gamma)
        if self.mix is not None:
            self.mix.to(model.device)

    def empty(self) -> np.ndarray:
        """The array of a sentence without words: `(num_layers + 1, 0, dim)` or `(0, dim)`."""
        dim = 2 * self.model.config.projection_dim
        shape = (self.num_representations, 0, dim) if self.layers == "all" else (0, dim)
        return np.zeros(shape, dtype=self.dtype)

    def batch(
        self, sentences: list[list[str]], stateful: bool = False, lstm_state: tuple | None = None
    ) -> tuple[list[np.ndarray], tuple | None]:
        """One batch as the model sees it (rows in this order): one array per sentence, cut to its words, and with
        `stateful` the final LSTM state, the run starting from `lstm_state` (None: zeros)."""
        if not sentences:
            return [], lstm_state
        inputs = self.tokenizer(
            sentences, is_split_into_words=True, add_special_tokens=False, padding=True, padding_side="right",
            return_tensors="pt",
        )
        input_ids = inputs["input_ids"].to(self.model.device)
        attention_mask = inputs["attention_mask"].to(self.model.device)
        with torch.inference_mode():
            outputs = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                output_hidden_states=True,
                lstm_state=lstm_state,
                output_lstm_state=stateful,
            )
            try:
                arrays = sentence_vectors(
                    outputs, attention_mask, [len(words) for words in sentences], self.layers, self.mix,
                    OUTPUT_DTYPES[self.dtype],
                )
            except NonFiniteVectors:
                hint = "; check the model"
                if self.dtype == "float16":
                    hint = " beyond float16's range; use dtype='float32'"
                raise ValueError(f"non-finite vectors for a sentence of this batch{hint}.") from None
        return arrays, outputs.lstm_state

    def sentences(
        self, sentences: Iterable[list[str]], batch_size: int = 64, max_tokens: int | None = None
    ) -> Iterator[np.ndarray]:
        """One array per sentence, in input order; sentences without words give `empty()` and no model call."""
        if batch_size < 1 or (max_tokens is not None and max_tokens < 1):
            raise ValueError(f"batch_size and max_tokens must be positive, got {batch_size} and {max_tokens}.")
        done: dict[int, np.ndarray] = {}

        def numbered() -> Iterator[Sentence]:
            for key, words in enumerate(sentences):
                if words:
                    yield Sentence(key, "", list(words))
                else:
                    done[key] = self.empty()

        next_key = 0
        for batch in length_grouped_batches(numbered(), batch_size, max_tokens):
            arrays, _ = self.batch([sentence.words for sentence in batch])
            done.update((sentence.key, array) for sentence, array in zip(batch, arrays))
            while next_key in done:
                yield done.pop(next_key)
                next_key += 1
        while next_key in done:
            yield done.pop(next_key)
            next_key += 1


__all__ = ["WordVectors", "check_settings", "default_device", "layer_mix", "load_elmo"]
