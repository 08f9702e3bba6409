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
"""ELMo vectors of a corpus on a Ray cluster: `ElmoBatchEmbedder` is the callable class that
`ray.data.Dataset.map_batches` runs as an actor (one model per actor, on a CPU or a GPU), turning a text column into a
column of per-word vectors.

    import ray
    from elmo_hf.integrations.ray import ElmoBatchEmbedder

    dataset = ray.data.read_text("corpus/*.txt", drop_empty_lines=False)  # a "text" column, one line a row
    vectors = dataset.map_batches(
        ElmoBatchEmbedder,
        fn_constructor_kwargs={"model": "/shared/elmo-original", "layers": "top", "dtype": "float16"},
        batch_size=1024,                                                # rows per call; grouped by length inside
        compute=ray.data.ActorPoolStrategy(size=8),                     # actors, each with its own model
        num_gpus=1,                                                     # per actor; leave out on CPUs (num_cpus=k)
    )
    vectors.write_parquet("vectors/")

Rows keep their columns and gain `vectors`: `(num_layers + 1, words, dim)` with `layers="all"`, `(words, dim)` with
`"top"`, `"average"` or `"mix"` (`mix_weights`, the weights themselves, and `gamma`), float32 or float16. Vectors are
stateless, so they do not depend on how Ray cuts the dataset into batches beyond float rounding (within 1e-6); each
call groups its rows by length into model batches of `batch_size` sentences as `elmo-hf embed` does, which gives
bitwise the command's vectors when a call holds the same lines as one of the command's pools (2,048 lines for
`batch_size=64`). Importing this module does not import Ray.
"""

import os
from collections.abc import Iterable

import numpy as np
import torch

from ..packaged_elmo import DEFAULT_MODEL
from .vectors import WordVectors, check_batch_size, load_elmo

SPLITS = ("whitespace", "default")


class ElmoBatchEmbedder:
    """A batch of texts (a dict of columns, Ray Data's `"numpy"` batch format) -> the same batch with a column of
    ELMo vectors, one array per row.

    Args:
        model: a packaged model's name, a folder made by `elmo-hf convert` (on a path every node can read) or a Hub id.
        text_column: the column holding the text, one sentence a row (`"text"`, as `ray.data.read_text` names it).
        output_column: the column to add (`"vectors"`).
        layers: `"all"` (default), `"top"`, `"average"` or `"mix"` (with `mix_weights` summing to 1, and `gamma`).
        dtype: `"float32"` (default) or `"float16"` for the vectors (a non-finite float16 vector is an error).
        split: `"whitespace"` (default; the text is tokenized already, as `elmo-hf embed` reads it) or `"default"`
            (the tokenizer's splitting at whitespace and punctuation).
        batch_size, max_tokens: the model batches each call's rows are grouped into, by length: at most `batch_size`
            sentences and `max_tokens` padded words.
        device: `"cuda"` or `"cpu"`; default the actor's GPU if Ray gave it one (`num_gpus`), else the CPU.
        model_dtype: `"float32"` (default), `"bfloat16"` or `"float16"` to run the model in.
    """

    def __init__(
        self,
        model: str | os.PathLike = DEFAULT_MODEL,
        *,
        text_column: str = "text",
        output_column: str = "vectors",
        layers: str = "all",
        mix_weights: list[float] | None = None,
        gamma: float = 1.0,
        dtype: str = "float32",
        split: str = "whitespace",
        batch_size: int = 64,
        max_tokens: int | None = None,
        device: str | torch.device | None = None,
        model_dtype: str = "float32",
    ):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}.")
        if output_column == text_column:
            raise ValueError(
                f"output_column {output_column!r} is text_column {text_column!r}: the vectors would replace the "
                "texts; give another output_column (default 'vectors')."
            )
        check_batch_size(batch_size, max_tokens)
        elmo, tokenizer = load_elmo(model, device, model_dtype)
        self.vectors = WordVectors(elmo, tokenizer, layers, mix_weights, gamma, dtype)
        self.text_column, self.output_column, self.split = text_column, output_column, split
        self.batch_size, self.max_tokens = batch_size, max_tokens

    def words(self, text: str) -> list[str]:
        """A text's words, as `elmo-hf embed --split` splits a line."""
        text = text.strip()
        return text.split() if self.split == "whitespace" else self.vectors.tokenizer.tokenize(text)

    def __call__(self, batch: dict[str, np.ndarray | list]) -> dict[str, np.ndarray | list]:
        """The batch's columns and `output_column`: an object array of arrays for NumPy columns (Ray Data), a list of
        arrays for lists (`datasets.Dataset.map(..., batched=True)`)."""
        if self.text_column not in batch:
            raise KeyError(
                f"the batch has no column {self.text_column!r} (it has {sorted(batch)}); pass text_column= in "
                "fn_constructor_kwargs."
            )
        texts = batch[self.text_column]
        if isinstance(texts, str) or not isinstance(texts, Iterable):  # a str would be read as one text a character
            kind = type(texts).__name__
            raise TypeError(f"column {self.text_column!r} must hold texts (a list or array of str), got one {kind}.")
        if any(not isinstance(text, str) for text in texts):
            kinds = sorted({type(text).__name__ for text in texts if not isinstance(text, str)})
            raise TypeError(f"column {self.text_column!r} must hold str, found {', '.join(kinds)}.")
        arrays = list(self.vectors.sentences((self.words(text) for text in texts), self.batch_size, self.max_tokens))
        if not isinstance(texts, np.ndarray):  # a dict of lists (datasets.Dataset.map): a list of arrays
            return {**batch, self.output_column: arrays}
        column = np.empty(len(arrays), dtype=object)  # one array per row, whatever the shapes (Ray's tensor column)
        column[:] = arrays
        return {**batch, self.output_column: column}


__all__ = ["ElmoBatchEmbedder"]
