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
"""`elmo-hf pretrain`: pretrain a biLM on text files, or adapt a converted one to a domain, with `Trainer`.

    elmo-hf pretrain --train train.txt --validation valid.txt --output elmo-ptb --architecture ptb
    elmo-hf pretrain --train domain.txt --validation held-out.txt --output elmo-adapted --from-pretrained elmo-small
    torchrun --nproc_per_node=2 -m elmo_hf.cli pretrain ...        (one process per core or GPU; gloo on CPU)

Checkpoints go to `OUTPUT/checkpoint-STEP`; `--resume` continues from the last one with the same result as a run
that was never stopped. The finished model (config, weights, tokenizer, `vocab.txt`, training curves) is written
into OUTPUT last, so a folder with `config.json` is complete; `examples/plot_pretraining.py OUTPUT` draws its
loss and perplexity curves.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainingArguments, set_seed
from transformers.trainer_utils import get_last_checkpoint

from ..configuration_elmo import ElmoConfig
from .data import (
    DECODING_ERRORS,
    VOCABULARY_FILE,
    CorpusError,
    DataCollatorForElmoPreTraining,
    ElmoTextDataset,
    ElmoWordVocabulary,
    check_corpus,
    load_sentences,
)
from ..modeling_elmo import ElmoForPreTraining, ElmoForPreTrainingOutput
from ..packaged_elmo import resolve_model_name
from ..tokenization_elmo import ElmoTokenizer

_PUBLISHED_CNN = {"filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]}
# Architectures by name: the three published ones, and `ptb`, small enough to train on Penn Treebank in hours of CPU.
PRESETS: dict[str, dict] = {
    "small": dict(_PUBLISHED_CNN, lstm_dim=1024, projection_dim=128, num_highway_layers=1),
    "medium": dict(_PUBLISHED_CNN, lstm_dim=2048, projection_dim=256, num_highway_layers=1),
    "original": dict(_PUBLISHED_CNN, lstm_dim=4096, projection_dim=512, num_highway_layers=2),
    "ptb": dict(
        filters=[[1, 25], [2, 50], [3, 75], [4, 100], [5, 125], [6, 150]],
        char_embedding_dim=16,
        lstm_dim=512,
        projection_dim=256,
        num_highway_layers=1,
    ),
}
# Config fields that decide the weights' shapes: a checkpoint with other values belongs to another architecture.
ARCHITECTURE_FIELDS = (
    "char_embedding_dim", "filters", "activation", "num_highway_layers", "projection_dim", "lstm_dim", "num_layers",
    "cell_clip", "projection_clip", "use_skip_connections", "max_characters_per_token", "word_vocab_size",
)
LOG_FILE = "training_log.json"


class PreTrainingError(ValueError):
    """The run cannot start; the message says what is wrong and what to do."""


def direction_sums(output: ElmoForPreTrainingOutput) -> torch.Tensor:
    """`(3,)` float64: the batch's summed forward NLL, summed backward NLL and predictions per direction."""
    count = output.num_predictions.detach().double().cpu()
    losses = torch.stack([output.forward_loss, output.backward_loss]).detach().double().cpu()
    return torch.cat([losses * count, count.unsqueeze(0)])


def corpus_perplexity(
    model: ElmoForPreTraining, batches: DataLoader, reduce=None
) -> dict[str, float]:
    """Fully normalised perplexity of each direction over all predictions of `batches` (dropout off).

    `reduce` sums a tensor over processes (each process passing its own share of the corpus).
    """
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64)
    device = next(model.parameters()).device
    with torch.no_grad():
        for batch in batches:
            totals += direction_sums(model(**{key: value.to(device) for key, value in batch.items()}))
    model.train(was_training)
    if reduce is not None:
        totals = reduce(totals.to(device)).cpu()
    forward, backward = (totals[:2] / totals[2]).tolist()
    return {
        "loss": (forward + backward) / 2,
        "forward_perplexity": math.exp(forward),
        "backward_perplexity": math.exp(backward),
        "predictions": int(totals[2]),
    }


class ElmoPreTrainer(Trainer):
    """`Trainer` that logs each direction's training perplexity and evaluates exact corpus perplexities."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._direction_losses = torch.zeros(3, dtype=torch.float64)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        self._direction_losses += direction_sums(outputs)
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._direction_losses[2] > 0:
            forward, backward = (self._direction_losses[:2] / self._direction_losses[2]).tolist()
            logs["forward_perplexity"] = round(math.exp(forward), 3)
            logs["backward_perplexity"] = round(math.exp(backward), 3)
            self._direction_losses.zero_()
        super().log(logs, start_time)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """Each process scores its share of the held-out sentences (no sentence twice); the sums are added up."""
        sentences = self.eval_dataset if eval_dataset is None else eval_dataset
        share = sentences[self.args.process_index :: self.args.world_size]
        batches = DataLoader(share, batch_size=self.args.per_device_eval_batch_size, collate_fn=self.data_collator)
        model = self.accelerator.unwrap_model(self.model)
        reduce = (lambda tensor: self.accelerator.reduce(tensor, "sum")) if self.args.world_size > 1 else None
        result = corpus_perplexity(model, batches, reduce)
        metrics = {f"{metric_key_prefix}_{key}": value for key, value in result.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


def build_config(args: argparse.Namespace, vocabulary_size: int) -> ElmoConfig:
    """The architecture from `--architecture` and the flags that override it."""
    fields = dict(PRESETS[args.architecture])
    for name in ("lstm_dim", "projection_dim", "num_layers", "num_highway_layers"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    if args.filters is not None:
        fields["filters"] = [[int(v) for v in bank.split(":")] for bank in args.filters.split(",")]
    return ElmoConfig(
        **fields,
        word_vocab_size=vocabulary_size,
        softmax_type=args.softmax,
        softmax_num_samples=args.num_samples,
        pretraining_dropout=args.dropout,
    )


def load_model(args: argparse.Namespace, vocabulary: ElmoWordVocabulary) -> ElmoForPreTraining:
    """A new model (`--architecture`) or a checkpoint's biLM with its softmax (same vocabulary) or a new one."""
    options = dict(softmax_type=args.softmax, softmax_num_samples=args.num_samples, pretraining_dropout=args.dropout)
    if args.from_pretrained is None:
        return ElmoForPreTraining(build_config(args, len(vocabulary)))
    source = Path(args.from_pretrained)
    if not (source / "config.json").is_file():
        raise PreTrainingError(f"--from-pretrained {source} is not a model folder (no config.json); convert first.")
    if (source / VOCABULARY_FILE).is_file() and ElmoWordVocabulary.load(source) == vocabulary:
        return ElmoForPreTraining.from_pretrained(source, **options)
    # A new softmax over this vocabulary; the checkpoint's own softmax (if any) is left out.
    config = ElmoConfig.from_pretrained(source, word_vocab_size=len(vocabulary), **options)
    model = ElmoForPreTraining.from_pretrained(source, config=config, ignore_mismatched_sizes=True)
    return model


def choose_vocabulary(args: argparse.Namespace) -> ElmoWordVocabulary:
    """`--vocab`, else the vocabulary of `--from-pretrained` if it has one, else one built from the training text.

    A given vocabulary that differs from the checkpoint's softmax is an error unless `--new-softmax`.
    """
    checkpoint_vocabulary = None
    if args.from_pretrained is not None and (Path(args.from_pretrained) / VOCABULARY_FILE).is_file():
        checkpoint_vocabulary = ElmoWordVocabulary.load(args.from_pretrained)
    if args.vocab is not None:
        vocabulary = ElmoWordVocabulary.load(args.vocab)
        if checkpoint_vocabulary is not None and vocabulary != checkpoint_vocabulary and not args.new_softmax:
            raise PreTrainingError(
                f"--vocab {args.vocab} ({len(vocabulary)} words) does not match the softmax of --from-pretrained "
                f"{args.from_pretrained} ({len(checkpoint_vocabulary)} words); leave out --vocab to keep the "
                "checkpoint's softmax, or pass --new-softmax to train a new one."
            )
        return vocabulary
    if checkpoint_vocabulary is not None and not args.new_softmax:
        return checkpoint_vocabulary
    return ElmoWordVocabulary.build(args.train, max_size=args.vocab_size, min_count=args.min_count, errors=args.errors)


def check_resume(output: Path, config: ElmoConfig) -> str | None:
    """The last checkpoint in `output` to resume from; raises if it holds another architecture."""
    checkpoint = get_last_checkpoint(str(output)) if output.is_dir() else None
    if checkpoint is None:
        raise PreTrainingError(f"--resume: no checkpoint-STEP folder in {output} to resume from.")
    saved = json.loads((Path(checkpoint) / "config.json").read_text())
    wanted = config.to_dict()
    different = [name for name in ARCHITECTURE_FIELDS if saved.get(name) != wanted.get(name)]
    if different:
        details = ", ".join(f"{name} {saved.get(name)} vs {wanted.get(name)}" for name in different)
        raise PreTrainingError(
            f"--resume: {checkpoint} holds another architecture ({details}); give the flags of that run, or a new "
            "--output."
        )
    return checkpoint


def save_log(log_history: list[dict], folder: Path) -> None:
    """The loss and perplexity curves as `training_log.json` (`examples/plot_pretraining.py` draws them)."""
    (folder / LOG_FILE).write_text(json.dumps(log_history, indent=1))


def save_model(trainer: ElmoPreTrainer, vocabulary: ElmoWordVocabulary, output: Path) -> None:
    """Writes the model folder into a staging folder, then moves its files into `output`, `config.json` last."""
    staging = Path(tempfile.mkdtemp(prefix=".final.", dir=output))
    try:
        trainer.save_model(str(staging))
        ElmoTokenizer(max_characters_per_token=trainer.model.config.max_characters_per_token).save_pretrained(staging)
        vocabulary.save(staging)
        save_log(trainer.state.log_history, staging)
        for path in sorted(staging.iterdir(), key=lambda path: path.name == "config.json"):
            os.replace(path, output / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def pretrain(args: argparse.Namespace) -> tuple[ElmoPreTrainer, dict[str, float]]:
    """Runs `elmo-hf pretrain`; returns the trainer and the final held-out metrics (empty without `--validation`)."""
    output = Path(args.output)
    check_corpus(args.train)
    if args.validation is not None:
        check_corpus([args.validation])
    if output.is_dir() and (output / "config.json").exists() and not (args.resume or args.overwrite):
        raise PreTrainingError(f"--output {output} already holds a model; pass --resume to continue or --overwrite.")
    if args.from_pretrained is not None and args.architecture_given:
        raise PreTrainingError("--architecture and --from-pretrained exclude each other: the checkpoint fixes it.")

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    vocabulary = choose_vocabulary(args)
    set_seed(args.seed)  # the same initial weights in every process and every run with this seed
    model = load_model(args, vocabulary)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if args.streaming:
        train_dataset = ElmoTextDataset(args.train, errors=args.errors)
    else:
        train_dataset = load_sentences(args.train, errors=args.errors)
        if len(train_dataset) < world_size * args.batch_size:
            raise PreTrainingError(
                f"the training text has {len(train_dataset)} sentences, fewer than one batch for each of the "
                f"{world_size} processes ({world_size} x --batch-size {args.batch_size}); use fewer processes, a "
                "smaller --batch-size or more text."
            )
    eval_sentences = load_sentences([args.validation], errors=args.errors) if args.validation else None
    if eval_sentences is not None and len(eval_sentences) < world_size:
        raise PreTrainingError(
            f"--validation has {len(eval_sentences)} sentences, fewer than the {world_size} processes."
        )
    resume = check_resume(output, model.config) if args.resume else None
    output.mkdir(parents=True, exist_ok=True)

    evaluating = eval_sentences is not None and args.eval_steps > 0
    training_args = TrainingArguments(
        output_dir=str(output),
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        learning_rate=args.learning_rate,
        optim="adamw_torch" if args.optimizer == "adagrad" else args.optimizer,
        lr_scheduler_type=args.lr_scheduler,
        warmup_steps=args.warmup_steps,
        weight_decay=0.0,
        max_grad_norm=args.max_grad_norm,
        num_train_epochs=args.epochs,
        max_steps=args.max_steps,
        logging_steps=args.logging_steps,
        eval_strategy="steps" if evaluating else "no",
        eval_steps=args.eval_steps if evaluating else None,
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        seed=args.seed,
        data_seed=args.seed,
        remove_unused_columns=False,
        report_to=[],
        disable_tqdm=args.no_progress,
        dataloader_num_workers=0,
        ddp_backend="gloo" if world_size > 1 and not torch.cuda.is_available() else None,
        ddp_find_unused_parameters=False,  # every parameter takes part in the loss (tested)
        accelerator_config={"dispatch_batches": False},
        use_cpu=not torch.cuda.is_available(),
    )
    collator = DataCollatorForElmoPreTraining(vocabulary, model.config.max_characters_per_token, args.max_words)
    # The original's Adagrad starts every accumulator at 1, which Trainer's "adagrad" cannot set.
    optimizer = None
    if args.optimizer == "adagrad":
        optimizer = torch.optim.Adagrad(model.parameters(), lr=args.learning_rate, initial_accumulator_value=1.0)
    trainer = ElmoPreTrainer(
        model=model,
        optimizers=(optimizer, None),
        args=training_args,
        train_dataset=train_dataset,
        data_collator=collator,
        eval_dataset=eval_sentences,
    )
    trainer.train(resume_from_checkpoint=resume)
    metrics = trainer.evaluate() if eval_sentences is not None else {}
    if trainer.is_world_process_zero():
        save_model(trainer, vocabulary, output)
    return trainer, metrics


__all__ = ["ElmoPreTrainer", "PRESETS", "corpus_perplexity", "pretrain"]
