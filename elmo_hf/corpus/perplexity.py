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
"""`elmo-hf perplexity`: each direction's fully normalised perplexity of a pretrained biLM on text files.

    elmo-hf perplexity --model elmo-ptb --text ptb.test.txt [--json test-perplexity.json]

In Python: `corpus_perplexity("elmo-ptb", ["ptb.test.txt"])`. The model is a pretraining folder (`elmo-hf pretrain`
writes one): the biLM, its word softmax and `vocab.txt`. The text is read as `elmo-hf pretrain` reads it (one
sentence per line, empty lines skipped, long lines split).
"""

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from ..conversion.convert import (
    check_output_file,
    load_model_weights,
    read_config,
)
from ..errors import check_positive_integer, check_threads
from ..modeling_elmo import ElmoForPreTraining
from ..packaged_elmo import resolve_model_name
from .data import (
    DECODING_ERRORS,
    VOCABULARY_FILE,
    DataCollatorForElmoPreTraining,
    ElmoWordVocabulary,
    check_corpus,
    load_sentences,
    through_link,
)
from .pretraining import (
    PreTrainingError,
    PreTrainingRunError,
    load_tokenizer,
    model_perplexity,
    staging_name_bytes,
    write_json_atomically,
)


def load_pretraining_model(
    folder: Path, vocabulary_file: Path | None
) -> tuple[ElmoForPreTraining, ElmoWordVocabulary]:
    """The model of a pretraining folder and its vocabulary (`vocabulary_file`, else the folder's `vocab.txt`).

    Raises a `PreTrainingError` for a folder that is not a model, has no softmax (a converted checkpoint, a plain
    `ElmoModel` or a task head), no vocabulary, or a vocabulary of another size than its softmax.
    """
    if not (folder / "config.json").is_file():
        raise PreTrainingError(f"--model {folder} is not a model folder (no config.json).")
    needs = (
        "perplexity needs a pretraining folder (the biLM with its word softmax and vocab.txt, as `elmo-hf pretrain` "
        "writes it)"
    )
    config = read_config(folder, PreTrainingError)
    vocabulary_file = vocabulary_file or folder / VOCABULARY_FILE
    if config.word_vocab_size is None:
        raise PreTrainingError(
            f"--model {folder} has no word softmax (a converted checkpoint, a plain ElmoModel or a task head): "
            f"{needs}. Train one with `elmo-hf pretrain` (--model {folder} to start from this biLM)."
        )
    if not vocabulary_file.is_file():
        raise PreTrainingError(f"no vocabulary {vocabulary_file}: {needs}; give its vocab.txt with --vocab.")
    vocabulary = ElmoWordVocabulary.load(vocabulary_file)
    if len(vocabulary) != config.word_vocab_size:
        raise PreTrainingError(
            f"{vocabulary_file} has {len(vocabulary)} words but the softmax of {folder} has {config.word_vocab_size}: "
            "give the vocab.txt this model was trained with (--vocab)."
        )
    return load_model_weights(ElmoForPreTraining, folder, PreTrainingError, needs), vocabulary


def corpus_perplexity(
    model: str | os.PathLike,
    text: Sequence[str | os.PathLike] | str | os.PathLike,
    *,
    vocab: str | os.PathLike | None = None,
    batch_size: int = 32,
    max_words: int = 100,
    errors: str = "strict",
    threads: int | None = None,
    json_output: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> dict:
    """Each direction's perplexity of pretraining folder (or packaged model name) `model` on the text files.

    Returns `model_perplexity`'s result (`loss`, `forward_perplexity`, `backward_perplexity`, `predictions`) with the
    number of `words` and the `files`; `json_output` also gets it, written atomically (an existing file only with
    `overwrite`). Raises `PreTrainingError` (or `CorpusError`) for unusable input or options, before anything is
    computed or written, and `PreTrainingRunError` where `json_output` cannot be written.
    """
    for name, value in (("batch-size", batch_size), ("max-words", max_words)):
        check_positive_integer(name, value, PreTrainingError)
    check_threads(threads, PreTrainingError)
    if errors not in DECODING_ERRORS:
        raise PreTrainingError(f"--errors {errors!r}: must be one of {', '.join(DECODING_ERRORS)}.")
    json_output = None if json_output is None else through_link(Path(json_output))
    if json_output is not None:
        # The nearest folder that exists, where the file's folders would be made (none above `/`).
        existing = next((folder for folder in json_output.absolute().parents if folder.exists()), None)
        if json_output.is_dir() or existing is None or not existing.is_dir():
            raise PreTrainingError(f"--json {json_output} cannot be written: give a file path in a folder.")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise PreTrainingError(f"--json {json_output} cannot be written: {existing} is not writable.")
        # A name the folder cannot take failed only when the result was written, after the computation.
        staging, name_max = staging_name_bytes(json_output), os.pathconf(existing, "PC_NAME_MAX")
        if staging > name_max:
            raise PreTrainingError(
                f"--json {json_output} cannot be written: its name is too long ({staging} bytes with the temporary "
                f"file's additions, more than the {name_max} that {existing} takes); give a shorter name."
            )
    text = check_corpus(text)
    folder = Path(resolve_model_name(str(model)))
    if json_output is not None:
        inputs = [*text, folder, *([vocab] if vocab else [])]
        check_output_file(json_output, inputs, PreTrainingError, "--json")
        if json_output.exists() and not overwrite:
            raise PreTrainingError(f"--json {json_output} exists; pass --overwrite to replace it, or give a new path.")
    pretraining_model, vocabulary = load_pretraining_model(folder, vocab and Path(vocab))
    sentences = load_sentences(text, errors=errors)
    if threads is not None:
        torch.set_num_threads(threads)
    if torch.cuda.is_available():
        pretraining_model = pretraining_model.cuda()
    collator = DataCollatorForElmoPreTraining(vocabulary, load_tokenizer(folder, pretraining_model.config), max_words)
    # All sentences at most: DataLoader fails on a batch size above sys.maxsize (--batch-size 2**70).
    batches = DataLoader(sentences, batch_size=min(batch_size, len(sentences)), collate_fn=collator)
    result = model_perplexity(pretraining_model, batches)
    result["words"] = sum(len(sentence["words"]) for sentence in sentences)
    result["files"] = [str(path) for path in text]
    if json_output is not None:
        try:
            json_output.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomically(result, json_output)
        except OSError as error:
            raise PreTrainingRunError(f"--json {json_output} could not be written ({error}).") from None
    return result


__all__ = ["corpus_perplexity", "load_pretraining_model"]
