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
"""`elmo-hf pretrain`: pretrain a biLM on text files, or adapt a model to a domain, with `Trainer`.

    elmo-hf pretrain --train train.txt --validation valid.txt --output elmo-ptb --architecture ptb
    elmo-hf pretrain --train domain.txt --validation held-out.txt --output elmo-adapted --model elmo-small
    torchrun --nproc_per_node=2 -m elmo_hf.cli pretrain ...        (one process per core or GPU; gloo on CPU)

In Python: `pretrain(["train.txt"], "elmo-ptb", validation="valid.txt", max_steps=100)`.

A run has an id, recorded in `OUTPUT/pretraining_run.json` and in each checkpoint. Checkpoints go to
`OUTPUT/checkpoint-STEP`; each gets the run's `vocab.txt` and, written last, a record of the run id and of its files'
sizes, so a checkpoint cut short (a kill while saving, a full disk) is recognised as incomplete. `resume=True`
continues from the newest complete checkpoint of this run with its vocabulary, with the same result as a run that was
never stopped. `overwrite=True` moves the previous run's checkpoints and model into `OUTPUT/previous-run-ID`. The
finished model (config, weights, tokenizer, `vocab.txt`, training curves; safetensors, JSON and text only) is
written into OUTPUT last, `config.json` after the weights, so a folder with `config.json` is complete;
`examples/plot_pretraining.py OUTPUT` draws its loss and perplexity curves.
"""

import contextlib
import json
import math
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError
from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, SchedulerType
from transformers.training_args import OptimizerNames
from transformers.utils import logging

from ..configuration_elmo import ElmoConfig
from ..conversion.convert import file_mode, load_model_weights, read_config, respect_umask
from ..errors import ElmoInputError, ElmoRunError, check_threads, config_error_message, is_whole
from ..modeling_elmo import ElmoForPreTraining, ElmoForPreTrainingOutput
from ..packaged_elmo import resolve_model_name
from ..tokenization_elmo import ElmoTokenizer
from .data import (
    DECODING_ERRORS,
    VOCABULARY_FILE,
    DataCollatorForElmoPreTraining,
    ElmoTextDataset,
    ElmoWordVocabulary,
    check_corpus,
    load_sentences,
    physical_memory,
)

logger = logging.get_logger(__name__)

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
DEFAULT_ARCHITECTURE = "ptb"
# Config fields that decide the weights' shapes: a checkpoint with other values belongs to another architecture.
ARCHITECTURE_FIELDS = (
    "char_embedding_dim", "filters", "activation", "num_highway_layers", "projection_dim", "lstm_dim", "num_layers",
    "cell_clip", "projection_clip", "use_skip_connections", "max_characters_per_token", "word_vocab_size",
)
LOG_FILE = "training_log.json"
# The run record: in OUTPUT, the run id and the model files the run wrote there; in a checkpoint, written last, the
# run id and the size of each of the checkpoint's files.
RUN_FILE = "pretraining_run.json"
PREVIOUS_RUN_PREFIX = "previous-run-"
_FINAL_STAGING_PREFIX = ".final."
_CHECKPOINT = re.compile(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)")
# What Trainer needs in a checkpoint to resume from it (beside the run record and the vocabulary).
_TRAINER_FILES = ("config.json", "model.safetensors", "trainer_state.json", "optimizer.pt", "scheduler.pt")
# Trainer's pickled arguments: kept in checkpoints (Trainer's own format), never in the finished model folder.
_TRAINING_ARGS_FILE = "training_args.bin"
# Names a finished model folder may hold (the remote code: the flat files of the package that travel with it); the
# files actually written are checked again before they are moved into OUTPUT.
_MODEL_FILE_NAMES = {
    RUN_FILE, "config.json", "model.safetensors", VOCABULARY_FILE, LOG_FILE, "tokenizer_config.json",
    "special_tokens_map.json", *(path.name for path in Path(__file__).resolve().parents[1].glob("*.py")),
}
OPTIMIZERS = tuple(name.value for name in OptimizerNames)
SCHEDULERS = tuple(name.value for name in SchedulerType)
# Trainer's schedules that take no warm-up: with them, --warmup-steps would be ignored without a word.
SCHEDULERS_WITHOUT_WARMUP = ("constant", "reduce_lr_on_plateau", "greedy")
# Options that decide how a run updates its weights, kept in its record with its number of processes (`world_size`,
# which decides each process's share of the text): `--resume` refuses other values, which Trainer would ignore without
# a word (the learning rate comes back from the saved optimizer and scheduler) or mix into one model whose
# config.json claims only the last (dropout, the softmax).
TRAINING_OPTIONS = ("learning_rate", "lr_scheduler", "warmup_steps", "batch_size", "gradient_accumulation_steps",
                    "max_grad_norm", "dropout", "softmax", "num_samples", "seed")
# Schedules whose learning rate does not depend on the run's length: a resumed run may then stop at another step.
SCHEDULERS_WITHOUT_LENGTH = ("constant", "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau")
# What torch.save (a RuntimeError) and safetensors (a SafetensorError) say where a write fails (a full disk, a
# file-size limit), in place of raising an OSError; any other error they raise is not a failed write.
WRITE_FAILURE_MESSAGES = ("file write failed", "unexpected pos", "PytorchStreamWriter failed", "I/O error")


class PreTrainingError(ElmoInputError):
    """The run cannot start: unusable input or options; the message says what is wrong and what to do."""


class PreTrainingRunError(ElmoRunError):
    """The run failed while training or saving (a diverging loss, a full disk); the message says what was kept."""


def finite_exp(loss: float) -> float:
    """`exp(loss)`: a perplexity, `inf` where it overflows (a diverging loss), NaN for NaN."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def direction_sums(output: ElmoForPreTrainingOutput) -> torch.Tensor:
    """`(3,)` float64: the batch's summed forward NLL, summed backward NLL and predictions per direction."""
    count = output.num_predictions.detach().double().cpu()
    losses = torch.stack([output.forward_loss, output.backward_loss]).detach().double().cpu()
    return torch.cat([losses * count, count.unsqueeze(0)])


def model_perplexity(model: ElmoForPreTraining, batches: DataLoader, reduce=None) -> dict[str, float]:
    """Fully normalised perplexity of each direction over all predictions of `batches` (dropout off).

    `reduce` sums a tensor over processes (each process passing its own share of the corpus). A loss too large for
    `exp` gives perplexity `inf`.
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
        "forward_perplexity": finite_exp(forward),
        "backward_perplexity": finite_exp(backward),
        "predictions": int(totals[2]),
    }


@contextlib.contextmanager
def write_failures_reported(what: str) -> Iterator[None]:
    """Within the block, torch.save's and safetensors' reports of a failed write of `what` (a full disk, a file-size
    limit, a failing device: `WRITE_FAILURE_MESSAGES`, raised as RuntimeError or SafetensorError) become the OSError a
    failed write is, so that it is reported as one: one line naming the checkpoint that was kept. Any other error (a
    bug, a refusal, our own `ElmoRunError`) propagates as itself."""
    try:
        yield
    except (RuntimeError, SafetensorError) as error:
        message = str(error)
        if isinstance(error, ElmoRunError) or not any(failure in message for failure in WRITE_FAILURE_MESSAGES):
            raise
        first_line = (message.splitlines() or [type(error).__name__])[0]
        raise OSError(
            f"{what} could not be written (a full disk, a file-size limit or a failing device): {first_line}"
        ) from error


def divergence_message(step: int, output: Path, run_id: str) -> str:
    """What a non-finite loss or weight at `step` means, what was kept and what to do: train again with other options
    (`--resume` takes only the run's own, with which it would diverge again at the same step)."""
    kept = newest_complete_checkpoint(output, run_id)[0]
    where = f"the last finite checkpoint, {kept}, was kept" if kept else "no checkpoint had been saved"
    return (
        f"the training diverged at step {step}: the loss or the weights became non-finite (NaN or inf), so nothing "
        f"was saved as the model; {where}. Lower --learning-rate (or --max-grad-norm), then train again with "
        "--overwrite."
    )


class ElmoPreTrainer(Trainer):
    """`Trainer` that logs each direction's training perplexity, evaluates exact corpus perplexities, and stops
    with a `PreTrainingRunError` at the first non-finite loss."""

    def __init__(self, *args, run_id: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.run_id = run_id
        self._direction_losses = torch.zeros(3, dtype=torch.float64)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        sums = direction_sums(outputs)  # on the CPU already: checking it costs no further synchronisation
        if not bool(torch.isfinite(sums).all()):
            raise PreTrainingRunError(divergence_message(self.state.global_step + 1, Path(self.args.output_dir),
                                                         self.run_id))
        self._direction_losses += sums
        return (loss, outputs) if return_outputs else loss

    def _save_checkpoint(self, model, trial) -> None:
        """Saves a checkpoint only of finite weights, so that no older checkpoint is rotated away for a NaN one."""
        if not all(bool(torch.isfinite(parameter).all()) for parameter in self.model.parameters()):
            raise PreTrainingRunError(divergence_message(self.state.global_step, Path(self.args.output_dir),
                                                         self.run_id))
        with write_failures_reported(f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"):
            super()._save_checkpoint(model, trial)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._direction_losses[2] > 0:
            forward, backward = (self._direction_losses[:2] / self._direction_losses[2]).tolist()
            logs["forward_perplexity"] = round(finite_exp(forward), 3)
            logs["backward_perplexity"] = round(finite_exp(backward), 3)
            self._direction_losses.zero_()
        super().log(logs, start_time)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """Each process scores its share of the held-out sentences (no sentence twice); the sums are added up."""
        sentences = self.eval_dataset if eval_dataset is None else eval_dataset
        share = sentences[self.args.process_index :: self.args.world_size]
        batches = DataLoader(share, batch_size=self.args.per_device_eval_batch_size, collate_fn=self.data_collator)
        model = self.accelerator.unwrap_model(self.model)
        reduce = (lambda tensor: self.accelerator.reduce(tensor, "sum")) if self.args.world_size > 1 else None
        result = model_perplexity(model, batches, reduce)
        metrics = {f"{metric_key_prefix}_{key}": value for key, value in result.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


class RunRecordCallback(TrainerCallback):
    """Completes each checkpoint that Trainer saved: the run's `vocab.txt`, then the run record (run id, files and
    sizes), last."""

    def __init__(self, run_id: str, vocabulary: ElmoWordVocabulary):
        self.run_id = run_id
        self.vocabulary = vocabulary

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        self.vocabulary.save(folder)
        sizes = {path.name: path.stat().st_size for path in sorted(folder.iterdir()) if path.is_file()}
        write_json_atomically({"run_id": self.run_id, "files": sizes}, folder / RUN_FILE)


def staging_name_bytes(path: Path) -> int:
    """Bytes of the name `write_json_atomically` stages `path` under (`.NAME.` and mkstemp's 8 random characters):
    a folder must take a name this long, which a command checks before its work."""
    return len(os.fsencode(path.name)) + 10


def write_json_atomically(value, path: Path) -> None:
    """Writes `value` as JSON to `path`: the complete file or none, with the umask's permissions (not mkstemp's
    0600, which hid a run record or a `--json` result from the user's group)."""
    descriptor, staging = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), file_mode())
            json.dump(value, file, indent=1)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict | None:
    """The JSON object in `path`, or None where it is missing or unreadable."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def load_tokenizer(folder: str | os.PathLike | None, config: ElmoConfig) -> ElmoTokenizer:
    """A model folder's own tokenizer (so a dictionary model keeps its ids), or the byte tokenizer for a new model
    (`folder=None`) or a folder without tokenizer files."""
    if folder is not None and (Path(folder) / "tokenizer_config.json").is_file():
        return ElmoTokenizer.from_pretrained(folder)
    return ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)


def checkpoint_problem(folder: Path, run_id: str) -> str | None:
    """Why checkpoint `folder` cannot be resumed as part of run `run_id` (None: it is complete and of this run)."""
    record = read_json(folder / RUN_FILE)
    if record is None:
        return "incomplete (no run record: the save was cut short, or it was written by another program)"
    if record.get("run_id") != run_id:
        return f"of another run ({record.get('run_id')})"
    sizes = record.get("files", {})
    for name in (*_TRAINER_FILES, VOCABULARY_FILE):
        if name not in sizes:
            return f"incomplete ({name} was not saved)"
    for name, size in sizes.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != size:
            return f"damaged ({name} is missing or of another size than when it was saved)"
    if read_json(folder / "trainer_state.json") is None:
        return "damaged (trainer_state.json is not readable)"
    weights_file = folder / "model.safetensors"
    with weights_file.open("rb") as weights:  # 8 bytes: the length of the JSON header that follows
        header = weights.read(min(int.from_bytes(weights.read(8), "little"), weights_file.stat().st_size))
    try:
        json.loads(header)
    except ValueError:
        return "damaged (model.safetensors has no readable header)"
    return None


def checkpoints(output: Path) -> list[Path]:
    """The `checkpoint-STEP` folders of `output`, newest (highest step) first."""
    found = [(int(match[1]), path) for path in output.iterdir() if path.is_dir()
             and (match := _CHECKPOINT.fullmatch(path.name))] if output.is_dir() else []
    return [path for _, path in sorted(found, reverse=True)]


def newest_complete_checkpoint(output: Path, run_id: str) -> tuple[Path | None, list[str]]:
    """The newest complete checkpoint of run `run_id` in `output` (or None), and a line for each newer one skipped."""
    skipped = []
    for folder in checkpoints(output):
        problem = checkpoint_problem(folder, run_id)
        if problem is None:
            return folder, skipped
        skipped.append(f"{folder.name}: {problem}")
    return None, skipped


def parse_filters(filters: str | Sequence[Sequence[int]]) -> list[list[int]]:
    """`"1:32,2:32"` or `[[1, 32], [2, 32]]` as `[[width, count], ...]` of positive integers."""
    try:
        banks = [[int(v) for v in bank.split(":")] for bank in filters.split(",")] if isinstance(filters, str) \
            else [[int(v) for v in bank] for bank in filters]
    except (ValueError, TypeError, AttributeError):
        banks = None
    if not banks or any(len(bank) != 2 or min(bank) < 1 for bank in banks):
        raise PreTrainingError(
            f"--filters {filters!r}: give the character CNN's banks as WIDTH:COUNT,... with positive integers, for "
            "example 1:32,2:32,3:64."
        )
    return banks


def build_config(
    architecture: str, vocabulary_size: int, overrides: dict, softmax: str, num_samples: int, dropout: float
) -> ElmoConfig:
    """The architecture preset `architecture` with `overrides` (`lstm_dim`, `filters`, ... where not None)."""
    fields = {**PRESETS[architecture], **{name: value for name, value in overrides.items() if value is not None}}
    try:
        config = ElmoConfig(**fields, word_vocab_size=vocabulary_size, softmax_type=softmax,
                            softmax_num_samples=num_samples, pretraining_dropout=dropout)
    except (ValueError, StrictDataclassError) as error:
        raise PreTrainingError(f"the architecture options cannot be used: {config_error_message(error)}") from None
    parameters = config.bilm_parameter_count(softmax=True)
    memory = physical_memory()
    if memory is not None and 8 * parameters > memory:  # float32 weights and their gradients, before any state
        raise PreTrainingError(
            f"the architecture holds {parameters:,} parameters, {8 * parameters / 2**30:,.1f} GiB for their float32 "
            f"weights and gradients alone, more than this machine's {memory / 2**30:,.1f} GiB of memory; give "
            "smaller --lstm-dim, --projection-dim, --num-layers or --filters, or a smaller vocabulary."
        )
    return config


def load_model(
    model: Path | None, vocabulary: ElmoWordVocabulary, config: ElmoConfig | None, options: dict
) -> ElmoForPreTraining:
    """A new model from `config`, or `model`'s biLM with its softmax (same vocabulary) or a new one."""
    if model is None:
        return ElmoForPreTraining(config)
    hint = "start from a folder as elmo-hf wrote it (elmo-hf convert or pretrain)"
    if (model / VOCABULARY_FILE).is_file() and ElmoWordVocabulary.load(model) == vocabulary:
        return load_model_weights(ElmoForPreTraining, model, PreTrainingError, hint, **options)
    # A new softmax over this vocabulary; the checkpoint's own softmax (if any) is left out.
    config = read_config(model, PreTrainingError, word_vocab_size=len(vocabulary), **options)
    return load_model_weights(ElmoForPreTraining, model, PreTrainingError, hint, ("softmax.",), config=config)


def choose_vocabulary(
    train: list[Path], vocab: Path | None, model: Path | None, new_softmax: bool, vocab_size: int | None,
    min_count: int, errors: str,
) -> ElmoWordVocabulary:
    """`vocab`, else the vocabulary of `model` if it has one, else one built from the training text.

    A given vocabulary that differs from the model's softmax is an error unless `new_softmax`.
    """
    model_vocabulary = None
    if model is not None and (model / VOCABULARY_FILE).is_file():
        model_vocabulary = ElmoWordVocabulary.load(model)
    if vocab is not None:
        vocabulary = ElmoWordVocabulary.load(vocab)
        if model_vocabulary is not None and vocabulary != model_vocabulary and not new_softmax:
            raise PreTrainingError(
                f"--vocab {vocab} ({len(vocabulary)} words) does not match the softmax of --model {model} "
                f"({len(model_vocabulary)} words); leave out --vocab to keep the model's softmax, or pass "
                "--new-softmax to train a new one."
            )
        return vocabulary
    if model_vocabulary is not None and not new_softmax:
        return model_vocabulary
    return ElmoWordVocabulary.build(train, max_size=vocab_size, min_count=min_count, errors=errors)


def check_architecture(checkpoint: Path, config: ElmoConfig) -> None:
    """Raises if `checkpoint` holds another architecture than `config`."""
    saved = json.loads((checkpoint / "config.json").read_text())
    wanted = config.to_dict()
    different = [name for name in ARCHITECTURE_FIELDS if saved.get(name) != wanted.get(name)]
    if different:
        details = ", ".join(f"{name} {saved.get(name)} vs {wanted.get(name)}" for name in different)
        raise PreTrainingError(
            f"--resume: {checkpoint} holds another architecture ({details}); give the options of that run, or a new "
            "--output."
        )


def check_options(values: dict) -> None:
    """Raises a `PreTrainingError` naming the first option whose value cannot be used."""
    rules = [
        ("batch_size", "a positive integer", lambda v: is_whole(v) and v >= 1),
        ("gradient_accumulation_steps", "a positive integer", lambda v: is_whole(v) and v >= 1),
        ("max_words", "a positive integer", lambda v: is_whole(v) and v >= 1),
        ("min_count", "a positive integer", lambda v: is_whole(v) and v >= 1),
        ("vocab_size", "an integer above 3 (the special words take 3)", lambda v: v is None or is_whole(v) and v > 3),
        ("num_samples", "a positive integer", lambda v: is_whole(v) and v >= 1),
        ("dropout", "in [0, 1)", lambda v: 0 <= v < 1),
        ("learning_rate", "finite and not negative", lambda v: math.isfinite(v) and v >= 0),
        ("max_grad_norm", "finite and not negative", lambda v: math.isfinite(v) and v >= 0),
        ("warmup_steps", "an integer not negative", lambda v: is_whole(v) and v >= 0),
        ("epochs", "finite and positive", lambda v: math.isfinite(v) and v > 0),
        ("max_steps", "a positive integer, or -1 for --epochs", lambda v: is_whole(v) and (v == -1 or v >= 1)),
        ("eval_steps", "an integer not negative (0: at the end only)", lambda v: is_whole(v) and v >= 0),
        ("save_steps", "a positive integer", lambda v: is_whole(v) and v >= 1),
        ("save_total_limit", "a positive integer", lambda v: v is None or is_whole(v) and v >= 1),
        ("logging_steps", "a positive integer", lambda v: is_whole(v) and v >= 1),
        ("seed", "an integer in [0, 2**32 - 1] (numpy's seeds)", lambda v: is_whole(v) and 0 <= v < 2**32),
        ("errors", f"one of {', '.join(DECODING_ERRORS)}", lambda v: v in DECODING_ERRORS),
        ("softmax", "full or sampled", lambda v: v in ("full", "sampled")),
        ("architecture", f"one of {', '.join(PRESETS)}", lambda v: v is None or v in PRESETS),
        ("optimizer", "a Trainer optimizer name (for example adamw_torch, adagrad, sgd)", lambda v: v in OPTIMIZERS),
        ("lr_scheduler", f"one of {', '.join(SCHEDULERS)}", lambda v: v in SCHEDULERS),
    ]
    for name, rule, holds in rules:
        try:
            valid = holds(values[name])
        except TypeError:  # a value of another type ("4" or None for a number)
            valid = False
        if not valid:
            raise PreTrainingError(f"--{name.replace('_', '-')} {values[name]!r}: must be {rule}.")
    check_threads(values["threads"], PreTrainingError)
    if values["warmup_steps"] and values["lr_scheduler"] in SCHEDULERS_WITHOUT_WARMUP:
        raise PreTrainingError(
            f"--warmup-steps {values['warmup_steps']}: --lr-scheduler {values['lr_scheduler']} does not warm up; use "
            f"constant_with_warmup (or another schedule with warm-up), or leave out --warmup-steps."
        )


class OutputFolder:
    """The `--output` folder and its run record: which run wrote it and which model files are that run's."""

    def __init__(self, path: Path):
        self.path = path
        self.record = read_json(path / RUN_FILE) if path.is_dir() else None

    def check_usable(self, resume: bool, overwrite: bool) -> None:
        """Refuses a folder that is a file, holds a run without `resume`/`overwrite`, or is not this command's."""
        path = self.path
        if path.exists() and not path.is_dir():
            raise PreTrainingError(f"--output {path} is a file; give a folder path.")
        contents = sorted(entry.name for entry in path.iterdir()) if path.is_dir() else []
        if resume:
            if self.record is None:
                what = "holds no run of elmo-hf pretrain" if not checkpoints(path) else (
                    "holds checkpoints but no run record (pretraining_run.json): written by an older elmo-hf or "
                    "another program")
                raise PreTrainingError(f"--resume: --output {path} {what}; give the --output of the run to continue.")
            return
        if self.record is not None:
            if not overwrite:
                raise PreTrainingError(
                    f"--output {path} holds a run of elmo-hf pretrain; pass --resume to continue it, or --overwrite "
                    f"to train again (its checkpoints and model are moved to {PREVIOUS_RUN_PREFIX}RUN_ID there)."
                )
            return
        if contents and not overwrite:
            raise PreTrainingError(
                f"--output {path} is not empty and was not made by elmo-hf pretrain; give a new or empty folder, or "
                "pass --overwrite to write the model beside its files (none of them is ever replaced)."
            )
        clashes = [name for name in contents if _CHECKPOINT.fullmatch(name) or name.startswith(PREVIOUS_RUN_PREFIX)
                   or name in _MODEL_FILE_NAMES]
        if clashes:
            raise PreTrainingError(
                f"--output {path} holds {', '.join(clashes)}, which elmo-hf pretrain would write, and was not made by "
                "it: give a new folder (--overwrite never replaces files this command did not write)."
            )

    def check_writable(self) -> None:
        """Raises a `PreTrainingError` where `--output` cannot be created or written."""
        existing = next(folder for folder in (self.path, *self.path.parents) if folder.exists())
        if not (existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)):
            raise PreTrainingError(f"--output {self.path} cannot be written ({existing} is not a writable folder).")

    def start(self, resume: bool, optimizer: str, training: dict, report: Callable[[str], None]) -> str:
        """Prepares the folder for this run and returns its run id (the recorded one where `resume`); the record
        keeps the optimizer, whose state a resumed run loads, and the `training` options (`training_options`) with
        the number of processes."""
        if resume:
            for leftover in self.path.glob(f"{_FINAL_STAGING_PREFIX}*"):  # a model save of this run cut short
                shutil.rmtree(leftover, ignore_errors=True)
            return self.record["run_id"]
        created = [folder for folder in (self.path, *self.path.parents) if not folder.exists()]
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if self.record is not None:
                self.set_aside(report)
            record = {"run_id": secrets.token_hex(8), "optimizer": optimizer, "training": training, "model_files": []}
            write_json_atomically(record, self.path / RUN_FILE)
        except OSError as error:
            for folder in created:
                shutil.rmtree(folder, ignore_errors=True)
            raise PreTrainingError(f"--output {self.path} cannot be written: {error}") from None
        self.record = record
        return record["run_id"]

    def set_aside(self, report: Callable[[str], None]) -> None:
        """Moves the previous run's checkpoints, model files and record into `previous-run-ID` (never deletes)."""
        aside = self.path / f"{PREVIOUS_RUN_PREFIX}{self.record.get('run_id', 'unknown')}"
        aside.mkdir(exist_ok=True)
        names = [path.name for path in checkpoints(self.path)]
        names += [name for name in self.record.get("model_files", []) if (self.path / name).exists()]
        names += [path.name for path in self.path.glob(f"{_FINAL_STAGING_PREFIX}*")]
        for name in [*names, RUN_FILE]:
            os.replace(self.path / name, aside / name)
        report(f"--overwrite: the previous run's checkpoints and model are now in {aside}")

    def save_model(self, trainer: ElmoPreTrainer, tokenizer: ElmoTokenizer, vocabulary: ElmoWordVocabulary) -> None:
        """Writes the model folder into a staging folder, then moves its files into OUTPUT, `config.json` last.

        Safetensors, JSON and text files (the model's own tokenizer among them) and the remote code, with the umask's
        permissions (no pickle); a file of OUTPUT that this run's record does not list as its own is never replaced.
        """
        staging = Path(tempfile.mkdtemp(prefix=_FINAL_STAGING_PREFIX, dir=self.path))
        try:
            with write_failures_reported("the model"):
                trainer.save_model(str(staging))
            (staging / _TRAINING_ARGS_FILE).unlink(missing_ok=True)
            tokenizer.save_pretrained(staging)
            vocabulary.save(staging)
            (staging / LOG_FILE).write_text(json.dumps(trainer.state.log_history, indent=1))
            respect_umask(staging)  # safetensors writes its file 0600 whatever the umask
            names = sorted((path.name for path in staging.iterdir()), key=lambda name: name == "config.json")
            ours = set(self.record.get("model_files", []))
            foreign = [name for name in names if name not in ours and (self.path / name).exists()]
            if foreign:
                raise PreTrainingRunError(
                    f"{', '.join(foreign)} appeared in --output {self.path} during the run; they are not replaced, "
                    f"and the model was not saved (the run's checkpoints are kept: move those files, then --resume)."
                )
            for name in names:
                os.replace(staging / name, self.path / name)
            self.record = {**self.record, "model_files": names}
            write_json_atomically(self.record, self.path / RUN_FILE)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def training_options(values: dict) -> dict:
    """The `TRAINING_OPTIONS` of a run, and its length (`max_steps`, else `epochs`) where its schedule needs it."""
    training = {name: values[name] for name in TRAINING_OPTIONS}
    if values["lr_scheduler"] not in SCHEDULERS_WITHOUT_LENGTH:
        length = "max_steps" if values["max_steps"] > 0 else "epochs"
        training[length] = values[length]
    return training


def check_training_options(folder: OutputFolder, training: dict) -> None:
    """Refuses `--resume` with training options or a number of processes (`world_size`) other than the recorded
    run's (a record written before they were recorded is not checked for them)."""
    recorded = folder.record.get("training")
    if not isinstance(recorded, dict):
        return
    processes = recorded.get("world_size", training["world_size"])
    if processes != training["world_size"]:
        raise PreTrainingError(
            f"--resume: the run in {folder.path} was trained with {processes} as its number of processes "
            f"(WORLD_SIZE), this command with {training['world_size']}; each process trains on its share of the "
            "text, so another number would train on other text than the run's and mix two schedules into one model. "
            f"Resume with the run's number of processes (torchrun --nproc_per_node={processes}), or train again "
            "with --overwrite."
        )
    names = (set(recorded) | set(training)) - {"world_size"}
    different = [name for name in sorted(names) if recorded.get(name) != training.get(name)]
    if different:
        options = ", ".join(f"--{name.replace('_', '-')} {recorded.get(name, 'not given')} (now {training.get(name)})"
                            for name in different)
        raise PreTrainingError(
            f"--resume: the run in {folder.path} was trained with {options}; its checkpoints continue only with "
            "the run's values, which a resumed run would otherwise ignore or mix into one model. Give the run's "
            "values, or train again with --overwrite."
        )


def pretrain(
    train: Sequence[str | os.PathLike] | str | os.PathLike,
    output: str | os.PathLike,
    *,
    validation: str | os.PathLike | None = None,
    vocab: str | os.PathLike | None = None,
    vocab_size: int | None = None,
    min_count: int = 1,
    max_words: int = 100,
    errors: str = "strict",
    streaming: bool = False,
    architecture: str | None = None,
    model: str | os.PathLike | None = None,
    new_softmax: bool = False,
    lstm_dim: int | None = None,
    projection_dim: int | None = None,
    num_layers: int | None = None,
    num_highway_layers: int | None = None,
    filters: str | Sequence[Sequence[int]] | None = None,
    softmax: str = "full",
    num_samples: int = 8192,
    dropout: float = 0.1,
    batch_size: int = 32,
    gradient_accumulation_steps: int = 1,
    learning_rate: float = 2e-3,
    optimizer: str = "adamw_torch",
    lr_scheduler: str = "constant",
    warmup_steps: int = 0,
    max_grad_norm: float = 1.0,
    epochs: float = 10.0,
    max_steps: int = -1,
    eval_steps: int = 500,
    save_steps: int = 500,
    save_total_limit: int | None = 2,
    logging_steps: int = 50,
    seed: int = 42,
    threads: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    report: Callable[[str], None] = logger.warning,
) -> tuple[ElmoPreTrainer, dict[str, float]]:
    """Pretrains (or continues) a biLM with its word softmax; returns the trainer and the final held-out metrics
    (empty without `validation`). The options are `elmo-hf pretrain`'s (see `elmo-hf pretrain --help`).

    `model` is a model folder or a packaged model's name to continue from (domain adaptation); `architecture` (a
    `PRESETS` name, default `ptb`) and the size options build a new one. `report` receives what a user should read
    (checkpoints skipped by `resume`, a previous run set aside by `overwrite`).

    Raises `PreTrainingError` (or `CorpusError`) for unusable input or options, before anything is written, and
    `PreTrainingRunError` for a failure while running (a non-finite loss, a full disk), keeping every complete
    checkpoint.
    """
    check_options(locals())
    world_size = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's number of processes
    training = {**training_options(locals()), "world_size": world_size}
    if resume and overwrite:
        raise PreTrainingError("--resume and --overwrite exclude each other: continue the run, or start it again.")
    if streaming and max_steps <= 0:
        raise PreTrainingError("--streaming reads the text as a stream of unknown length: give --max-steps.")
    sizes = dict(lstm_dim=lstm_dim, projection_dim=projection_dim, num_layers=num_layers,
                 num_highway_layers=num_highway_layers, filters=None if filters is None else parse_filters(filters))
    given = [f"--{name.replace('_', '-')}" for name, value in sizes.items() if value is not None]
    if model is not None and (architecture is not None or given):
        raise PreTrainingError(
            f"{', '.join(given or ['--architecture'])} and --model exclude each other: the model fixes the "
            "architecture."
        )
    train = check_corpus(train)
    validation = check_corpus([validation])[0] if validation is not None else None
    model = Path(resolve_model_name(str(model))) if model is not None else None
    if model is not None and not (model / "config.json").is_file():
        raise PreTrainingError(f"--model {model} is not a model folder (no config.json); convert first.")
    folder = OutputFolder(Path(output))
    folder.check_usable(resume, overwrite)
    folder.check_writable()
    resume_from = None
    if resume:
        resume_from, skipped = newest_complete_checkpoint(folder.path, folder.record.get("run_id"))
        if resume_from is None:
            raise PreTrainingError(
                f"--resume: --output {folder.path} holds no complete checkpoint of its run "
                f"{folder.record.get('run_id')}" + (f" (skipped {'; '.join(skipped)})" if skipped else "")
                + "; train again with --overwrite."
            )
        if folder.record.get("optimizer", optimizer) != optimizer:
            raise PreTrainingError(
                f"--resume: the run in {folder.path} trains with --optimizer {folder.record['optimizer']}, whose "
                f"state its checkpoints hold; --optimizer {optimizer} cannot continue it. Give --optimizer "
                f"{folder.record['optimizer']}, or train again with --overwrite."
            )
        check_training_options(folder, training)
        for line in skipped:
            report(f"--resume: skipped {line}")
        vocabulary = ElmoWordVocabulary.load(resume_from)
        if vocab is not None and ElmoWordVocabulary.load(vocab) != vocabulary:
            raise PreTrainingError(
                f"--vocab {vocab} differs from the vocabulary of the run being resumed "
                f"({resume_from / VOCABULARY_FILE}); leave out --vocab to resume, or train again with --overwrite."
            )
    else:
        vocabulary = choose_vocabulary(train, vocab and Path(vocab), model, new_softmax, vocab_size, min_count, errors)
    if softmax == "sampled" and num_samples > len(vocabulary):
        raise PreTrainingError(
            f"--num-samples {num_samples}: more than the {len(vocabulary)} words of the vocabulary, which the full "
            "softmax scores exactly; give at most that many, or --softmax full."
        )

    if threads is not None:
        torch.set_num_threads(threads)
    set_seed(seed)  # the same initial weights in every process and every run with this seed
    options = dict(softmax_type=softmax, softmax_num_samples=num_samples, pretraining_dropout=dropout)
    config = None if model is not None else build_config(architecture or DEFAULT_ARCHITECTURE, len(vocabulary),
                                                         sizes, softmax, num_samples, dropout)
    pretraining_model = load_model(model, vocabulary, config, options)
    if resume_from is not None:
        check_architecture(resume_from, pretraining_model.config)
    # One batch for each process at least; of a stream, one optimizer step's batches, without which Trainer reads it
    # over and over and never steps (a stream is read only that far here).
    needed, unit, remedy = world_size * batch_size, "batch", "a smaller --batch-size"
    if streaming:
        train_dataset = ElmoTextDataset(train, errors=errors)
        needed *= gradient_accumulation_steps
        unit, remedy = "optimizer step", f"{remedy}, fewer --gradient-accumulation-steps"
        found = sum(1 for _ in zip(range(needed), train_dataset))
    else:
        train_dataset = load_sentences(train, errors=errors)
        found = len(train_dataset)
    if found < needed:
        accumulation = f" x --gradient-accumulation-steps {gradient_accumulation_steps}" if streaming else ""
        raise PreTrainingError(
            f"the training text has {found} sentences, fewer than one {unit} for each of the {world_size} processes "
            f"({world_size} x --batch-size {batch_size}{accumulation}); use fewer processes, {remedy} or more text."
        )
    eval_sentences = load_sentences([validation], errors=errors) if validation is not None else None
    if eval_sentences is not None and len(eval_sentences) < world_size:
        raise PreTrainingError(
            f"--validation has {len(eval_sentences)} sentences, fewer than the {world_size} processes."
        )

    evaluating = eval_sentences is not None and eval_steps > 0
    training_args = TrainingArguments(
        output_dir=str(folder.path),
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps,
        learning_rate=learning_rate,
        optim="adamw_torch" if optimizer == "adagrad" else optimizer,
        lr_scheduler_type=lr_scheduler,
        warmup_steps=warmup_steps,
        weight_decay=0.0,
        max_grad_norm=max_grad_norm,
        num_train_epochs=epochs,
        max_steps=max_steps,
        logging_steps=logging_steps,
        eval_strategy="steps" if evaluating else "no",
        eval_steps=eval_steps if evaluating else None,
        save_strategy="steps",
        save_steps=save_steps,
        save_total_limit=save_total_limit,
        seed=seed,
        data_seed=seed,
        remove_unused_columns=False,
        report_to=[],
        disable_tqdm=not progress,
        dataloader_num_workers=0,
        ddp_backend="gloo" if world_size > 1 and not torch.cuda.is_available() else None,
        ddp_find_unused_parameters=False,  # every parameter takes part in the loss (tested)
        accelerator_config={"dispatch_batches": False},
        use_cpu=not torch.cuda.is_available(),
    )
    with training_args.main_process_first(local=False):  # process 0 prepares OUTPUT, the others then read its id
        run_id = folder.start(resume, optimizer, training, report) if training_args.process_index == 0 else None
    run_id = run_id or OutputFolder(folder.path).record["run_id"]
    tokenizer = load_tokenizer(model, pretraining_model.config)
    collator = DataCollatorForElmoPreTraining(vocabulary, tokenizer, max_words)
    # The original's Adagrad starts every accumulator at 1, which Trainer's "adagrad" cannot set.
    optimizer_instance = None
    if optimizer == "adagrad":
        optimizer_instance = torch.optim.Adagrad(pretraining_model.parameters(), lr=learning_rate,
                                                 initial_accumulator_value=1.0)
    trainer = ElmoPreTrainer(
        model=pretraining_model,
        optimizers=(optimizer_instance, None),
        args=training_args,
        train_dataset=train_dataset,
        data_collator=collator,
        eval_dataset=eval_sentences,
        callbacks=[RunRecordCallback(run_id, vocabulary)],
        run_id=run_id,
    )
    try:
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        metrics = trainer.evaluate() if eval_sentences is not None else {}
        if not all(bool(torch.isfinite(parameter).all()) for parameter in pretraining_model.parameters()):
            raise PreTrainingRunError(divergence_message(trainer.state.global_step, folder.path, run_id))
        if trainer.is_world_process_zero():
            folder.save_model(trainer, tokenizer, vocabulary)
    except OSError as error:
        kept = newest_complete_checkpoint(folder.path, run_id)[0]
        raise PreTrainingRunError(
            f"writing into --output {folder.path} failed ({error}); "
            + (f"the last complete checkpoint, {kept}, was kept: free space, then --resume." if kept
               else "no complete checkpoint was saved: free space, then train again with --overwrite.")
        ) from None
    return trainer, metrics


__all__ = [
    "ElmoPreTrainer",
    "PRESETS",
    "PreTrainingError",
    "PreTrainingRunError",
    "load_tokenizer",
    "model_perplexity",
    "pretrain",
]
