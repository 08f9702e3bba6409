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

The model is a pretraining folder (`elmo-hf pretrain` writes one): the biLM, its word softmax and `vocab.txt`. The text
is read as `elmo-hf pretrain` reads it (one sentence per line, empty lines skipped, long lines split).
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from ..configuration_elmo import ElmoConfig
from .data import (
    DECODING_ERRORS,
    VOCABULARY_FILE,
    CorpusError,
    DataCollatorForElmoPreTraining,
    ElmoWordVocabulary,
    check_corpus,
    load_sentences,
)
from ..modeling_elmo import ElmoForPreTraining
from .pretraining import PreTrainingError, corpus_perplexity


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
    config = ElmoConfig.from_pretrained(folder)
    vocabulary_file = vocabulary_file or folder / VOCABULARY_FILE
    if config.word_vocab_size is None:
        raise PreTrainingError(
            f"--model {folder} has no word softmax (a converted checkpoint, a plain ElmoModel or a task head): "
            f"{needs}. Train one with `elmo-hf pretrain` (--from-pretrained {folder} to start from this biLM)."
        )
    if not vocabulary_file.is_file():
        raise PreTrainingError(f"no vocabulary {vocabulary_file}: {needs}; give its vocab.txt with --vocab.")
    vocabulary = ElmoWordVocabulary.load(vocabulary_file)
    if len(vocabulary) != config.word_vocab_size:
        raise PreTrainingError(
            f"{vocabulary_file} has {len(vocabulary)} words but the softmax of {folder} has {config.word_vocab_size}: "
            "give the vocab.txt this model was trained with (--vocab)."
        )
    model, loading = ElmoForPreTraining.from_pretrained(folder, output_loading_info=True)
    missing = [name for name in loading["missing_keys"] if name.startswith("softmax.")]
    if missing:
        raise PreTrainingError(f"--model {folder} has no trained softmax weights ({', '.join(missing)}): {needs}.")
    return model, vocabulary


def write_json(result: dict, path: Path) -> None:
    """Writes `result` to `path` atomically: a complete file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, staging = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w") as file:
            json.dump(result, file, indent=1)
        os.replace(staging, path)
    except BaseException:
        os.unlink(staging)
        raise


def perplexity(args: argparse.Namespace) -> dict:
    """Runs `elmo-hf perplexity`: `corpus_perplexity` of the model on the text, with the number of words."""
    check_corpus(args.text)
    model, vocabulary = load_pretraining_model(Path(args.model), args.vocab and Path(args.vocab))
    sentences = load_sentences(args.text, errors=args.errors)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if torch.cuda.is_available():
        model = model.cuda()
    collator = DataCollatorForElmoPreTraining(vocabulary, model.config.max_characters_per_token, args.max_words)
    batches = DataLoader(sentences, batch_size=args.batch_size, collate_fn=collator)
    result = corpus_perplexity(model, batches)
    result["words"] = sum(len(sentence["words"]) for sentence in sentences)
    result["files"] = [str(path) for path in args.text]
    return result


__all__ = ["load_pretraining_model", "perplexity"]
