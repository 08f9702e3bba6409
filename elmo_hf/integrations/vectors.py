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
    gather_vectors,
    length_grouped_batches,
    load_model,
    resolve_device,
)
from ..errors import is_finite_real, is_whole
from ..packaged_elmo import resolve_model_name


def check_settings(device: str | torch.device | None, model_dtype: str) -> torch.device:
    """The torch device of `device` (None: the first GPU if there is one, else the CPU), before anything loads;
    refuses a model dtype elmo-hf does not run in, and what is no device or one this machine cannot run on (a GPU
    torch does not see, `"meta"`), as `elmo-hf embed` refuses its `--device`."""
    if not isinstance(model_dtype, str) or model_dtype not in MODEL_DTYPES:
        raise ValueError(f"model_dtype must be one of {sorted(MODEL_DTYPES)}, got {model_dtype!r}.")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device} was asked for, but torch sees no CUDA GPU; use device='cpu'.")
    return resolve_device(device, 0)


def load_elmo(
    model: str | os.PathLike, device: str | torch.device | None, model_dtype: str = "float32"
) -> tuple[ElmoModel, ElmoTokenizer]:
    """The biLM (in eval mode, on `device`, checked by `check_settings`) and tokenizer of a packaged model's name, a
    converted folder or a Hub id; a task head's folder gives its biLM. Raises `ValueError` naming the problem for
    anything else, and `TypeError` for what is no name (None would be looked up on the Hub as "None")."""
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(
            f"model must be a packaged model's name, a converted folder or a Hub id (a str or a path), got "
            f"{type(model).__name__}."
        )
    device = check_settings(device, model_dtype)
    return load_model(str(resolve_model_name(str(model))), model_dtype, device)


def check_numbers(name: str, values: Iterable[object]) -> None:
    """Refuses a setting (`gamma`, mix weights, scalars) holding anything but finite real numbers: a str fails deep
    inside torch, a NaN or an infinity gives NaN vectors."""
    for value in values:
        if not is_finite_real(value):
            raise ValueError(f"{name}: {value!r} is not a finite number.")


def check_batch_size(batch_size: int, max_tokens: int | None = None) -> None:
    """Refuses a `batch_size` or `max_tokens` (None: no limit) that is no positive integer: a float such as 1.5 is
    never reached, so every sentence would go into one batch, and True would be read as 1."""
    limits = [batch_size] if max_tokens is None else [batch_size, max_tokens]
    if any(not is_whole(limit) or limit < 1 for limit in limits):
        raise ValueError(
            f"batch_size and max_tokens (None: no limit) must be positive integers, got {batch_size!r} and "
            f"{max_tokens!r}."
        )


def check_sentences(sentences: object, name: str) -> None:
    """Refuses what is no batch of sentences: None, a single sentence (a str, or a flat list or array of words)."""
    if isinstance(sentences, str):
        raise TypeError(
            f"{name} takes sentences, each a list of words, got a str; pass [text.split()] for one sentence."
        )
    if not isinstance(sentences, Iterable):
        raise TypeError(f"{name} takes sentences, each a list of words, got {type(sentences).__name__}.")
    if isinstance(sentences, (list, tuple, np.ndarray)) and len(sentences) and isinstance(sentences[0], str):
        raise TypeError(
            f"{name} takes sentences, each a list of words, got a flat list of str {list(sentences[:3])!r}...: it "
            "would be read as one-word sentences. Pass [words] for one sentence, or a list of word lists."
        )


def check_flag(name: str, value: object) -> None:
    """Refuses a switch that is no bool (or NumPy bool): "false" or "no" from a config file would be true."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}.")


def check_tokenizer(tokenizer: object, name: str) -> None:
    """Refuses what is no tokenizer instance (None, a str, a tokenizer class), which failed at the first batch with a
    bare "not callable" TypeError; by what is used, a call, not by class (remote code has its own ElmoTokenizer)."""
    if isinstance(tokenizer, type) or not callable(tokenizer):
        got = f"the class {tokenizer.__name__}" if isinstance(tokenizer, type) else type(tokenizer).__name__
        raise TypeError(
            f"{name}: tokenizer must be a tokenizer instance, the model's own "
            f"(ElmoTokenizer.from_pretrained(folder)), got {got}."
        )


def check_words(words: object, index: int) -> list[str]:
    """Sentence `index` as a list of words (from a list, a tuple or a 1-D array), refusing a str (it would be read as
    one-character words)."""
    if isinstance(words, np.ndarray) and words.ndim == 1:
        return words.tolist()
    if isinstance(words, str) or not isinstance(words, (list, tuple)):
        raise TypeError(
            f"sentence {index} is a {type(words).__name__}, expected a list of words (str); pass text.split() for a "
            "whitespace-tokenized line."
        )
    return list(words)


def layer_mix(
    layers: str, num_representations: int, mix_weights: list[float] | None = None, gamma: float = 1.0
) -> ElmoScalarMix | None:
    """The fixed `ElmoScalarMix` of `layers="average"` or `"mix"` (`mix_weights`: the weights themselves, summing to
    1), or None for `"all"` and `"top"`; refuses a mix setting given where it does not apply."""
    if layers not in LAYER_CHOICES:
        raise ValueError(f"layers must be one of {LAYER_CHOICES}, got {layers!r}.")
    check_numbers("gamma", [gamma])
    if layers != "mix":
        if mix_weights is not None or gamma != 1.0:
            raise ValueError(f"mix_weights and gamma apply to layers='mix' only, not layers={layers!r}.")
        return ElmoScalarMix.average(num_representations) if layers == "average" else None
    if mix_weights is None or len(mix_weights) != num_representations:
        raise ValueError(
            f"layers='mix' needs mix_weights: {num_representations} weights (num_layers + 1 of this model, token "
            f"layer first) summing to 1; got {mix_weights!r}."
        )
    check_numbers("mix_weights", mix_weights)
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
        if not isinstance(dtype, str) or dtype not in OUTPUT_DTYPES:
            raise ValueError(f"dtype must be one of {sorted(OUTPUT_DTYPES)}, got {dtype!r}.")
        # By its config, not its class: a model loaded with trust_remote_code=True is the folder's own ElmoModel class.
        if getattr(getattr(model, "config", None), "model_type", None) != "elmo" or hasattr(model, "elmo"):
            hint = "; pass its biLM, model.elmo" if hasattr(model, "elmo") else ""
            raise TypeError(f"WordVectors takes an ElmoModel (the biLM), got {type(model).__name__}{hint}.")
        check_tokenizer(tokenizer, "WordVectors")
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
        check_sentences(sentences, "WordVectors.batch")
        sentences = [check_words(words, index) for index, words in enumerate(sentences)]
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
                arrays = gather_vectors(
                    outputs, attention_mask, [len(words) for words in sentences], self.layers, self.mix,
                    OUTPUT_DTYPES[self.dtype],
                ).result()
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
        check_batch_size(batch_size, max_tokens)
        check_sentences(sentences, "WordVectors.sentences")
        done: dict[int, np.ndarray] = {}

        def numbered() -> Iterator[Sentence]:
            for key, words in enumerate(sentences):
                words = check_words(words, key)
                if words:
                    yield Sentence(key, "", words)
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


__all__ = [
    "WordVectors",
    "check_batch_size",
    "check_flag",
    "check_numbers",
    "check_sentences",
    "check_settings",
    "check_tokenizer",
    "check_words",
    "layer_mix",
    "load_elmo",
]
