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
"""AllenNLP 0.9's `ElmoEmbedder` and `batch_to_ids`, over any elmo-hf model: code written for AllenNLP runs after
changing its import (and the model it names).

    from elmo_hf.integrations.allennlp import ElmoEmbedder, batch_to_ids

    embedder = ElmoEmbedder("elmo-en-mini")                     # or a converted folder, a Hub id, or
    embedder = ElmoEmbedder(options_file="options.json", weight_file="weights.hdf5", cuda_device=0)
    vectors = embedder.embed_sentence(["ELMo", "reads", "characters", "."])   # (num_layers + 1, 4, 2 * projection_dim)
    embedder.embed_file(open("sentences.txt"), "vectors.hdf5", output_format="all")

The shapes, names and HDF5 layout are AllenNLP's (for the published original: `(3, words, 1024)`). What differs:
vectors are stateless by default (each sentence starts from zero LSTM states, so they do not depend on the batch or on
what was embedded before; `stateful=True` keeps AllenNLP's carried state instead); `embed_sentences` and `embed_file`
group sentences by length into batches as `elmo-hf embed` does (bitwise its vectors for the same `batch_size`), and
keep the input order; empty sentences give 0 words instead of an error; and a flat list of words passed where sentences
are expected is refused instead of being read as one-word sentences. `docs/migrating_from_allennlp.md` has the full
mapping.
"""

import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

import h5py
import numpy as np
import torch

from .. import ElmoModel, ElmoTokenizer
from ..conversion.convert import file_mode
from ..corpus.embed import MODEL_DTYPES
from ..corpus.parts import write_index
from ..errors import is_whole
from ..packaged_elmo import DEFAULT_MODEL
from .vectors import (
    WordVectors,
    check_batch_size,
    check_flag,
    check_sentences,
    check_settings,
    check_tokenizer,
    check_words,
    load_elmo,
)

DEFAULT_BATCH_SIZE = 64  # AllenNLP's
OUTPUT_FORMATS = ("all", "top", "average")


def batch_to_ids(batch: list[list[str]], tokenizer: ElmoTokenizer | None = None) -> torch.Tensor:
    """AllenNLP's `batch_to_ids`: the character ids of a batch of pre-split sentences, `(batch_size, longest,
    max_characters_per_token)`, a padding word a row of zeros.

    The ids are the UTF-8 bytes + 1 framed by begin-word 259 and end-word 260 and padded with 261, exactly AllenNLP's
    (which also adds 1 to the original ids to free 0 for padding), so tensors made by either work with both. Unlike
    bilm-tf's `Batcher`, there are no `<S>`/`</S>` rows: the model adds them. `tokenizer` (default: the UTF-8 byte
    tokenizer) is the model's own, needed for a model with a character dictionary (ELMoForManyLangs).
    """
    check_sentences(batch, "batch_to_ids")
    batch = [check_words(words, index) for index, words in enumerate(batch)]
    tokenizer = ElmoTokenizer() if tokenizer is None else tokenizer
    check_tokenizer(tokenizer, "batch_to_ids")
    if not batch:
        return torch.zeros(0, 0, tokenizer.row_width, dtype=torch.long)
    return tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"]


class ElmoEmbedder:
    """AllenNLP 0.9's `ElmoEmbedder` over an elmo-hf model: per-word vectors of every layer, as NumPy arrays.

    Args:
        model: a packaged model's name (default `elmo-en-mini`), a folder made by `elmo-hf convert`, or a Hub id.
        options_file, weight_file: an original checkpoint (`options.json` and weights `.hdf5`, as AllenNLP takes
            them), converted in memory and checked as `elmo-hf convert` checks it; instead of `model`.
        cuda_device: AllenNLP's GPU index (-1, the default: the CPU).
        device: a torch device instead (`"cpu"`, `"cuda:1"`); not together with `cuda_device`.
        stateful: carry each batch row's final LSTM state into the same row of the next batch, as AllenNLP does
            (`reset_state()` starts again from zeros). Default False: every sentence starts from zeros.
        model_dtype: `"float32"` (default), `"bfloat16"` or `"float16"` to run the model in; arrays are float32.
    """

    def __init__(
        self,
        model: str | os.PathLike | None = None,
        *,
        options_file: str | os.PathLike | None = None,
        weight_file: str | os.PathLike | None = None,
        cuda_device: int = -1,
        device: str | torch.device | None = None,
        stateful: bool = False,
        model_dtype: str = "float32",
    ):
        if device is not None and cuda_device != -1:
            raise ValueError(f"give device ({device!r}) or cuda_device ({cuda_device}), not both.")
        if not is_whole(cuda_device):
            raise TypeError(f"cuda_device must be a GPU index (an int; -1, the default: CPU), got {cuda_device!r}.")
        check_flag("stateful", stateful)
        device = check_settings(
            device if device is not None else f"cuda:{cuda_device}" if cuda_device >= 0 else "cpu", model_dtype
        )
        if options_file is not None or weight_file is not None:
            if options_file is None or weight_file is None or model is not None:
                raise ValueError(
                    "an original checkpoint needs both options_file and weight_file, and no model; or give model "
                    "alone (a packaged name, a converted folder or a Hub id)."
                )
            elmo, tokenizer = _load_original(options_file, weight_file)
            elmo = elmo.to(device, dtype=MODEL_DTYPES[model_dtype])
        else:
            elmo, tokenizer = load_elmo(DEFAULT_MODEL if model is None else model, device, model_dtype)
        self.model: ElmoModel = elmo
        self.tokenizer: ElmoTokenizer = tokenizer
        self.device = device
        self.stateful = bool(stateful)
        self.lstm_state: tuple[torch.Tensor, torch.Tensor] | None = None
        self._vectors = {layers: WordVectors(elmo, tokenizer, layers) for layers in OUTPUT_FORMATS}

    def reset_state(self) -> None:
        """Start the next batch from zero LSTM states (stateful embedders)."""
        self.lstm_state = None

    def embed_batch(self, batch: list[list[str]]) -> list[np.ndarray]:
        """One float32 array `(num_layers + 1, words, dim)` per sentence of `batch`, computed as one batch."""
        return self._embed_batch(batch, "all")

    def embed_sentence(self, sentence: list[str]) -> np.ndarray:
        """The float32 array `(num_layers + 1, words, dim)` of one pre-split sentence."""
        return self.embed_batch([check_words(sentence, 0)])[0]

    def embed_sentences(
        self, sentences: Iterable[list[str]], batch_size: int = DEFAULT_BATCH_SIZE
    ) -> Iterator[np.ndarray]:
        """A generator of `embed_sentence`'s arrays for an iterable of pre-split sentences, in input order.

        Stateless, sentences are grouped by length into batches of at most `batch_size` (fewer padded words than
        AllenNLP's batches in input order; the same vectors within 1e-6, bitwise `elmo-hf embed`'s); stateful, batches
        are consecutive sentences as in AllenNLP, since the state of batch row i passes to row i of the next batch.
        """
        check_sentences(sentences, "embed_sentences")
        check_batch_size(batch_size)
        return self._embed_sentences(sentences, batch_size, "all")

    def embed_file(
        self,
        input_file: IO | str | os.PathLike,
        output_file_path: str | os.PathLike,
        output_format: str = "all",
        batch_size: int = DEFAULT_BATCH_SIZE,
        forget_sentences: bool = False,
        use_sentence_keys: bool = False,
    ) -> None:
        """Embeds a file of whitespace-tokenized sentences, one a line, into HDF5 as AllenNLP (and `elmo-hf embed`)
        lays it out: one float32 dataset per line, named by its 0-based line number (or by the sentence with
        `use_sentence_keys`), `(num_layers + 1, words, dim)` for `output_format="all"` and `(words, dim)` for `"top"`
        and `"average"`; and, unless `forget_sentences` or `use_sentence_keys`, `sentence_to_index`, one string
        holding the JSON object `{sentence: "line number"}`. An empty line gives 0 words.

        `input_file` is an open text file (as AllenNLP takes it; it is closed afterwards, as AllenNLP does) or a path
        to a UTF-8 file (a byte-order mark at its start is dropped, as `elmo-hf embed` drops it). The file is written
        under a temporary name and renamed when complete, so `output_file_path` is never partly written; an existing
        file is replaced, as AllenNLP replaces it.
        """
        if output_format not in OUTPUT_FORMATS:
            raise ValueError(f"output_format must be one of {OUTPUT_FORMATS}, got {output_format!r}.")
        check_batch_size(batch_size)
        check_flag("forget_sentences", forget_sentences)
        check_flag("use_sentence_keys", use_sentence_keys)
        if not isinstance(output_file_path, (str, os.PathLike)):
            raise TypeError(
                f"output_file_path must be the path of the HDF5 file to write (a str or a path), got "
                f"{type(output_file_path).__name__}."
            )
        output = Path(output_file_path)
        if isinstance(input_file, (str, os.PathLike)):
            if Path(input_file).exists() and output.exists() and Path(input_file).resolve() == output.resolve():
                raise ValueError(f"output_file_path {output} is the input file; give another output path.")
            try:
                with open(input_file, encoding="utf-8-sig") as stream:
                    sentences = [line.strip() for line in stream]
            except UnicodeDecodeError as error:
                raise ValueError(f"input_file {input_file} is not UTF-8 text ({error}); convert it first.") from None
        elif not hasattr(input_file, "read"):
            raise TypeError(f"input_file must be an open text file or a path, got {type(input_file).__name__}.")
        else:
            with input_file:
                sentences = [line.strip() for line in input_file]
        if sentences and not isinstance(sentences[0], str):
            raise TypeError("input_file is open in binary mode; open it as text: open(path, encoding='utf-8').")
        if use_sentence_keys:
            _check_sentence_keys(sentences)
        if not output.parent.is_dir():
            raise ValueError(f"folder {output.parent} of output_file_path does not exist; create it first.")
        if output.is_dir():  # found before embedding, not when the finished file replaces it
            raise ValueError(f"output_file_path {output} is a folder; give the path of the HDF5 file to write.")
        arrays = self._embed_sentences([sentence.split() for sentence in sentences], batch_size, output_format)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
        os.fchmod(descriptor, file_mode())  # the umask's permissions, as allennlp's h5py.File gives them, not 0600
        os.close(descriptor)
        try:
            with h5py.File(temporary, "w") as file:
                index: dict[str, int] = {}
                for key, (sentence, vectors) in enumerate(zip(sentences, arrays)):
                    file.create_dataset(sentence if use_sentence_keys else str(key), data=vectors)
                    index[sentence] = key
                if not (forget_sentences or use_sentence_keys):
                    write_index(file, index)
            os.replace(temporary, output)
        except BaseException:
            os.unlink(temporary)
            raise

    def _embed_batch(self, batch: list[list[str]], layers: str) -> list[np.ndarray]:
        check_sentences(batch, "embed_batch")
        arrays, state = self._vectors[layers].batch(batch, self.stateful, self.lstm_state)
        if self.stateful:  # an empty batch gives the state back as it was
            self.lstm_state = state
        return arrays

    def _embed_sentences(self, sentences: Iterable[list[str]], batch_size: int, layers: str) -> Iterator[np.ndarray]:
        if not self.stateful:
            yield from self._vectors[layers].sentences(sentences, batch_size)
            return
        checked = (check_words(words, index) for index, words in enumerate(sentences))
        batch: list[list[str]] = []
        for words in checked:
            batch.append(words)
            if len(batch) == batch_size:
                yield from self._embed_batch(batch, layers)
                batch = []
        yield from self._embed_batch(batch, layers)


def _check_sentence_keys(sentences: list[str]) -> None:
    """Refuses what cannot name an HDF5 dataset: a repeated sentence (AllenNLP refuses it too), and the empty, `"."`
    and `/`-holding names that HDF5 reads as paths."""
    seen: set[str] = set()
    for number, sentence in enumerate(sentences, 1):
        if sentence in seen:
            raise ValueError(
                f"line {number} repeats an earlier sentence, which use_sentence_keys=True cannot name twice; use line "
                "numbers as keys (the default)."
            )
        if not sentence or sentence == "." or "/" in sentence:
            raise ValueError(
                f"line {number} ({sentence!r}) cannot be an HDF5 dataset name (empty, '.' or holding '/'); use line "
                "numbers as keys (the default)."
            )
        seen.add(sentence)


def _load_original(options_file: str | os.PathLike, weight_file: str | os.PathLike) -> tuple[ElmoModel, ElmoTokenizer]:
    """An original checkpoint converted in memory and checked against the float64 reference, as `elmo-hf convert`
    does it (without writing a folder)."""
    from ..conversion.checkpoint import convert_config, read_options, read_weights
    from ..conversion.convert import check_against_reference, model_from_checkpoint

    config = convert_config(read_options(options_file))
    arrays = read_weights(weight_file, config)
    model = model_from_checkpoint(arrays, config)
    check_against_reference(model, arrays)
    return model, ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)


__all__ = ["DEFAULT_BATCH_SIZE", "ElmoEmbedder", "batch_to_ids"]
