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
"""ELMo as a sentence-transformers module: `SentenceTransformer(modules=[ElmoSentenceModule(...)])` embeds texts as
the mean of their words' ELMo vectors (a chosen layer, the average of the layers, a fixed mix or a learned one).

    from sentence_transformers import SentenceTransformer
    from elmo_hf.integrations.sentence_transformers import ElmoSentenceModule

    model = SentenceTransformer(modules=[ElmoSentenceModule("elmo-en-mini", layers="average")])
    embeddings = model.encode(["ELMo reads characters .", "Words , not subwords ."])   # (2, 2 * projection_dim)
    model.save("elmo-sentences")
    model = SentenceTransformer("elmo-sentences", trust_remote_code=True)

sentence-transformers imports a module class from outside its own package only with `trust_remote_code=True`; here the
flag lets it import this installed module (`modules.json` names it), and no code from the folder runs. The saved
folder is also an ELMo folder (`ElmoModel.from_pretrained("elmo-sentences")` loads its biLM). Texts are
split into words by the ELMo tokenizer (whitespace and punctuation); a text without words gets the zero vector.
Importing this module needs the `sentence-transformers` extra.
"""

import os
from typing import Any

import torch
from sentence_transformers.base.modules import InputModule

from .. import ElmoModel, ElmoScalarMix, ElmoTokenizer
from ..corpus.embed import select_layers
from ..packaged_elmo import DEFAULT_MODEL
from .vectors import check_numbers, layer_mix, load_elmo

SENTENCE_LAYERS = ("average", "top", "mix", "learned")


class ElmoSentenceModule(InputModule):
    """The first (input) module of a `SentenceTransformer`: texts -> ELMo word vectors (`token_embeddings`, `(batch,
    words, 2 * projection_dim)`) -> their mean over the words (`sentence_embedding`, `(batch, 2 * projection_dim)`).

    Args:
        model_name_or_path: a packaged model's name (default `elmo-en-mini`), a converted folder or a Hub id.
        layers: the word vectors that are pooled: `"average"` (default, the plain mean of the `num_layers + 1`
            layers), `"top"` (the top biLSTM layer), `"mix"` (fixed `mix_weights` summing to 1, times `gamma`), or
            `"learned"` (an `ElmoScalarMix` that trains with the model, starting equal or from `scalar_parameters`,
            the pre-softmax scalars, and `gamma`).
    """

    config_file_name = "elmo_sentence_config.json"
    config_keys = ["layers", "mix_weights", "gamma", "scalar_parameters"]
    save_in_root = True

    def __init__(
        self,
        model_name_or_path: str | os.PathLike = DEFAULT_MODEL,
        layers: str = "average",
        mix_weights: list[float] | None = None,
        gamma: float = 1.0,
        scalar_parameters: list[float] | None = None,
    ):
        super().__init__()
        if layers not in SENTENCE_LAYERS:
            raise ValueError(f"layers must be one of {SENTENCE_LAYERS}, got {layers!r}.")
        if scalar_parameters is not None and layers != "learned":
            raise ValueError(f"scalar_parameters apply to layers='learned' only, not layers={layers!r}.")
        elmo, tokenizer = load_elmo(model_name_or_path, "cpu")
        self.elmo: ElmoModel = elmo
        self.tokenizer: ElmoTokenizer = tokenizer
        self.layers = layers
        representations = elmo.config.num_layers + 1
        if layers == "learned":
            if mix_weights is not None:
                raise ValueError("layers='learned' starts from scalar_parameters (pre-softmax), not mix_weights.")
            if scalar_parameters is not None and len(scalar_parameters) != representations:
                raise ValueError(
                    f"layers='learned' needs {representations} scalar_parameters (num_layers + 1 of this model, token "
                    f"layer first); got {scalar_parameters!r}."
                )
            check_numbers("scalar_parameters", [] if scalar_parameters is None else scalar_parameters)
            check_numbers("gamma", [gamma])
            self.mix = ElmoScalarMix(representations)
            with torch.no_grad():
                if scalar_parameters is not None:
                    self.mix.scalar_parameters.copy_(torch.tensor(scalar_parameters))
                self.mix.gamma.fill_(gamma)
        else:
            self.mix = layer_mix(layers, representations, mix_weights, gamma)
        self.mix_weights = None if mix_weights is None else [float(weight) for weight in mix_weights]
        self.gamma = float(gamma)

    def preprocess(self, inputs: list[str], prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        """Texts (raw `str`) -> `input_ids` `(batch, words, max_characters_per_token)` and `attention_mask`."""
        if any(not isinstance(text, str) for text in inputs):
            kinds = sorted({type(text).__name__ for text in inputs if not isinstance(text, str)})
            raise TypeError(f"ElmoSentenceModule embeds texts (str), got {', '.join(kinds)}.")
        if prompt:
            inputs = self._prepend_prompt(inputs, prompt)
        encoding = self.tokenizer(list(inputs), padding=True, return_tensors="pt")
        return {"input_ids": encoding["input_ids"], "attention_mask": encoding["attention_mask"]}

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        attention_mask = features["attention_mask"]
        outputs = self.elmo(input_ids=features["input_ids"], attention_mask=attention_mask, output_hidden_states=True)
        words = select_layers(outputs, attention_mask, "mix" if self.layers == "learned" else self.layers, self.mix)
        keep = attention_mask.unsqueeze(-1).to(words.dtype)
        features["token_embeddings"] = words
        features["sentence_embedding"] = (words * keep).sum(1) / keep.sum(1).clamp(min=1)
        return features

    def get_embedding_dimension(self) -> int:
        return 2 * self.elmo.config.projection_dim

    def get_config_dict(self) -> dict[str, Any]:
        learned = self.layers == "learned"
        return {
            "layers": self.layers,
            "mix_weights": self.mix_weights,
            "gamma": float(self.mix.gamma.item()) if learned else self.gamma,
            "scalar_parameters": self.mix.scalar_parameters.tolist() if learned else None,
        }

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        """The biLM and tokenizer as an ELMo folder (safetensors), and this module's settings beside them."""
        self.elmo.save_pretrained(output_path)
        self.tokenizer.save_pretrained(output_path)
        self.save_config(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        **kwargs,
    ) -> "ElmoSentenceModule":
        hub = {
            "token": token, "cache_folder": cache_folder, "revision": revision, "local_files_only": local_files_only
        }
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub)
        folder = cls.load_dir_path(model_name_or_path, subfolder=subfolder, **hub)
        return cls(folder, **config)


__all__ = ["ElmoSentenceModule"]
