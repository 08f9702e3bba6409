"""The experiments of docs/results.md: does a frozen biLM help a tagger, and what do its layers carry?

    python experiments/elmo_experiments.py corpus --data ../shared/data --output runs/corpus
    python experiments/elmo_experiments.py tagger --task pos --elmo frozen --fraction 0.1 --seed 0
    python experiments/elmo_experiments.py adapt --task ner --output runs/experiments/adapted-ner
    python experiments/elmo_experiments.py probe --layer 1
    python experiments/elmo_experiments.py grid            # every run of docs/results.md not yet in --results
    python experiments/elmo_experiments.py report          # tables (printed) and plots (docs/results_*.png)

Tasks: Brown part-of-speech tags (`pos`, base tags, word accuracy) and WNUT-16 named entities (`ner`, exact-span
entity F1 by seqeval), split as the data README says (examples/train_token_classification.py reads both). The
tagger is the paper's baseline shape: trainable word embeddings and a character CNN, a biLSTM, a linear layer; with
`--elmo frozen` the biLM's layers, mixed by a learned `ElmoScalarMix`, are concatenated to its inputs and, by a
second mix, to the biLSTM's outputs (`--no-output-mix`: to its inputs only). The biLM stays frozen, so its layers
are computed once per model and split and cached (`--cache`); a run only trains the tagger. Each run appends one JSON
line to `--results`, with the command that reproduces it; `grid` skips runs already there, so it resumes where it
stopped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import random
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.train_token_classification import read_brown, read_conll  # noqa: E402
from experiments.corpus import build_corpus  # noqa: E402

from elmo_hf import DEFAULT_MODEL, ElmoModel, ElmoScalarMix, ElmoTokenizer, packaged_model_path  # noqa: E402
from elmo_hf.tokenization_elmo import CHAR_VOCAB_SIZE  # noqa: E402

Sentence = tuple[list[str], list[str]]
SCRIPT = "python experiments/elmo_experiments.py"
FRACTIONS = (0.01, 0.1, 1.0)
SEEDS = (0, 1, 2)
# Epochs by training fraction: fewer sentences get more passes, so small fractions are not merely undertrained.
EPOCHS = {0.01: 40, 0.1: 10, 1.0: 2}
NER_EPOCHS = {0.01: 100, 0.1: 60, 1.0: 30}
# The tagger's character CNN reads at most this many characters of a word (begin and end marks included).
TAGGER_CHARS = 20
TAGGER_TOKENIZER = ElmoTokenizer(max_characters_per_token=TAGGER_CHARS)  # the baseline tagger's character ids
# The L2 comparison (lambda = 1 instead of 0.001): training fraction and seeds per task. POS runs it on 10% with one
# seed, the most its CPU budget allowed (a 100% POS run with ELMo takes about 15 minutes on one busy core).
L2_RUNS = {"ner": (1.0, SEEDS), "pos": (0.1, (0,))}
SUBSET_SEED = 1234  # the training subsets are the same for every run seed: seeds vary initialisation and order


def load_task(task: str, data: Path) -> dict[str, list[Sentence]]:
    """train / dev / test sentences of a task from the shared data folder."""
    path = data / "brown" if task == "pos" else data / "wnut16" / "train.conll"
    if not path.exists():
        raise SystemExit(f"error: {path} not found: --data must be the folder holding brown/ and wnut16/train.conll")
    return read_brown(path) if task == "pos" else read_conll(path)


def tag_list(splits: dict[str, list[Sentence]]) -> list[str]:
    """Every tag of the task, sorted: the classifier's output order."""
    return sorted({tag for sentences in splits.values() for _, sentence_tags in sentences for tag in sentence_tags})


def training_subset(sentences: list[Sentence], fraction: float) -> list[Sentence]:
    """A fixed random `fraction` of the training sentences (at least one)."""
    order = random.Random(SUBSET_SEED).sample(range(len(sentences)), len(sentences))
    return [sentences[index] for index in sorted(order[: max(1, math.ceil(fraction * len(sentences)))])]


def model_folder(model: str) -> Path:
    """A model name shipped with elmo-hf, or a folder."""
    path = Path(model)
    if path.is_dir():
        return path
    try:
        return Path(packaged_model_path(model))
    except ValueError as error:
        raise SystemExit(f"error: --model {model} is neither a model folder nor a packaged model: {error}") from None


def model_digest(model: str) -> str:
    """A short hash of the model's weights: the cache key of its layers."""
    return hashlib.sha256((model_folder(model) / "model.safetensors").read_bytes()).hexdigest()[:12]


def bilm_layers(model: str, task: str, split: str, sentences: list[Sentence], cache: Path, threads: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Every layer of the frozen biLM for every word of `sentences`, cached.

    Returns `(layers, offsets)`: `layers` `(total_words, num_layers + 1, 2 * projection_dim)` float16, and sentence i's
    words at `layers[offsets[i]:offsets[i + 1]]`.
    """
    file = cache / f"{task}-{split}-{model_digest(model)}.safetensors"
    if file.is_file():
        tensors = load_file(file)
        return tensors["layers"], tensors["offsets"]
    torch.set_num_threads(threads)
    folder = model_folder(model)
    bilm, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    by_length = sorted(range(len(sentences)), key=lambda index: len(sentences[index][0]))
    per_sentence: list[torch.Tensor | None] = [None] * len(sentences)
    started = time.perf_counter()
    with torch.no_grad():
        for start in range(0, len(by_length), 64):
            batch = by_length[start:start + 64]
            encoded = tokenizer([sentences[index][0] for index in batch], is_split_into_words=True, padding=True,
                                return_tensors="pt")
            hidden = torch.stack(bilm(**encoded, output_hidden_states=True).hidden_states, dim=2)
            for row, index in enumerate(batch):
                per_sentence[index] = hidden[row, : len(sentences[index][0])].to(torch.float16)
    words = sum(len(words) for words, _ in sentences)
    print(f"biLM layers of {task} {split}: {words:,} words in {time.perf_counter() - started:.0f} s")
    lengths = torch.tensor([0] + [len(words) for words, _ in sentences])
    tensors = {"layers": torch.cat(per_sentence), "offsets": lengths.cumsum(0)}
    cache.mkdir(parents=True, exist_ok=True)
    partial = file.with_suffix(".partial")
    save_file(tensors, partial)
    partial.replace(file)
    return tensors["layers"], tensors["offsets"]


class Tagger(nn.Module):
    """Word embeddings + character CNN -> biLSTM -> linear; optionally ELMo at the input and at the output.

    `elmo_layers` `(batch, words, num_layers + 1, dim)` are mixed by `mixes["input"]` (concatenated to the word
    features) and, unless `output_mix` is False, by `mixes["output"]` (concatenated to the biLSTM's outputs), each
    with its own learned weights (paper §3.3).
    """

    def __init__(self, num_words: int, num_tags: int, elmo_shape: tuple[int, int] | None, l2_coefficient: float,
                 output_mix: bool = True, word_dim: int = 100, char_dim: int = 16, char_filters: int = 50,
                 lstm_dim: int = 128, dropout: float = 0.5):
        super().__init__()
        self.word_embedding = nn.Embedding(num_words, word_dim, padding_idx=0)
        self.char_embedding = nn.Embedding(CHAR_VOCAB_SIZE, char_dim, padding_idx=0)
        self.char_cnn = nn.Conv1d(char_dim, char_filters, kernel_size=3, padding=1)
        self.mixes = nn.ModuleDict()
        elmo_dim = output_dim = 0
        if elmo_shape is not None:
            num_representations, elmo_dim = elmo_shape
            output_dim = elmo_dim if output_mix else 0
            for name in ("input", "output") if output_mix else ("input",):
                self.mixes[name] = ElmoScalarMix(num_representations, "token", dropout=0.2,
                                                 l2_coefficient=l2_coefficient)
        self.lstm = nn.LSTM(word_dim + char_filters + elmo_dim, lstm_dim, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * lstm_dim + output_dim, num_tags)

    def forward(self, word_ids: torch.Tensor, char_ids: torch.Tensor, lengths: torch.Tensor,
                elmo_layers: torch.Tensor | None = None) -> torch.Tensor:
        """`word_ids` `(batch, words)`, `char_ids` `(batch, words, TAGGER_CHARS)`, `lengths` `(batch,)` -> logits
        `(batch, words, num_tags)`."""
        batch_size, num_words, num_chars = char_ids.shape
        chars = self.char_embedding(char_ids.view(-1, num_chars)).transpose(1, 2)
        char_features = torch.relu(self.char_cnn(chars)).max(dim=-1).values.view(batch_size, num_words, -1)
        features = [self.word_embedding(word_ids), char_features]
        mask = word_ids.ne(0)
        if elmo_layers is not None:
            layers = elmo_layers.unbind(dim=2)
            features.append(self.mixes["input"](layers, mask))
        packed = pack_padded_sequence(self.dropout(torch.cat(features, -1)), lengths, batch_first=True,
                                      enforce_sorted=False)
        hidden, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=num_words)
        outputs = [self.dropout(hidden)]
        if "output" in self.mixes:
            outputs.append(self.mixes["output"](layers, mask))
        return self.classifier(torch.cat(outputs, -1))

    def l2_penalty(self) -> torch.Tensor:
        """The mixes' `lambda * ||s||^2` (zero without ELMo)."""
        return sum((mix.l2_penalty() for mix in self.mixes.values()), torch.zeros(()))

    def mix_weights(self) -> dict[str, list[float]]:
        """The normalised layer weights softmax(s) of each mix, and their gammas."""
        return {name: [round(value, 4) for value in mix.weights().tolist()] + [round(mix.gamma.item(), 4)]
                for name, mix in self.mixes.items()}


class Encoded:
    """A split as tensors: word and character ids per sentence, tag ids, and the biLM layers if any."""

    def __init__(self, sentences: list[Sentence], word_index: dict[str, int], tag_index: dict[str, int],
                 layers: tuple[torch.Tensor, torch.Tensor] | None):
        self.lengths = [len(words) for words, _ in sentences]
        self.words = [torch.tensor([word_index.get(word, 1) for word in words]) for words, _ in sentences]
        self.chars = [
            TAGGER_TOKENIZER(words, is_split_into_words=True, return_tensors="pt")["input_ids"][0]
            for words, _ in sentences
        ]
        self.tags = [torch.tensor([tag_index[tag] for tag in tags]) for _, tags in sentences]
        self.layers = layers

    def batches(self, batch_size: int, generator: torch.Generator | None) -> Iterator[tuple[list[int], dict]]:
        """Batches of similar lengths, shuffled by `generator` (in order without one)."""
        order = torch.randperm(len(self.lengths), generator=generator).tolist() if generator else list(
            range(len(self.lengths)))
        chunk = 50 * batch_size
        for start in range(0, len(order), chunk):
            block = sorted(order[start:start + chunk], key=self.lengths.__getitem__)
            groups = [block[index:index + batch_size] for index in range(0, len(block), batch_size)]
            if generator is not None:
                groups = [groups[index] for index in torch.randperm(len(groups), generator=generator).tolist()]
            for group in groups:
                yield group, self.batch(group)

    def batch(self, indices: list[int]) -> dict:
        pad = nn.utils.rnn.pad_sequence
        batch = {
            "word_ids": pad([self.words[i] for i in indices], batch_first=True),
            "char_ids": pad([self.chars[i] for i in indices], batch_first=True),
            "lengths": torch.tensor([self.lengths[i] for i in indices]),
            "tags": pad([self.tags[i] for i in indices], batch_first=True, padding_value=-100),
        }
        if self.layers is not None:
            layers, offsets = self.layers
            batch["elmo_layers"] = pad([layers[offsets[i]:offsets[i + 1]].float() for i in indices], batch_first=True)
        return batch


def evaluate(model: Tagger, data: Encoded, tags: list[str], task: str) -> float:
    """Word accuracy (pos) or exact-span entity F1 (ner, seqeval's default CoNLL scheme), in percent."""
    from seqeval.metrics import f1_score

    model.eval()
    gold, predicted = [], []
    with torch.no_grad():
        for indices, batch in data.batches(128, None):
            logits = model(batch["word_ids"], batch["char_ids"], batch["lengths"], batch.get("elmo_layers"))
            for row, length in enumerate(batch["lengths"].tolist()):
                gold.append([tags[i] for i in batch["tags"][row, :length].tolist()])
                predicted.append([tags[i] for i in logits[row, :length].argmax(-1).tolist()])
    model.train()
    if task == "ner":
        return 100 * f1_score(gold, predicted)
    pairs = [(g, p) for gold_row, predicted_row in zip(gold, predicted) for g, p in zip(gold_row, predicted_row)]
    return 100 * sum(g == p for g, p in pairs) / len(pairs)


def run_config(args: argparse.Namespace) -> dict:
    """The fields that identify a tagger run (what `grid` compares to skip runs already made); `epochs_option` is
    the `--epochs` given, None for the task's default."""
    use_elmo = args.elmo != "none"
    return {"task": args.task, "elmo": args.elmo, "model": args.model if use_elmo else None,
            "fraction": args.fraction, "seed": args.seed, "l2": args.l2 if use_elmo else None,
            "output_mix": args.output_mix if use_elmo else None, "epochs_option": args.epochs}


def tagger_command(args: argparse.Namespace) -> str:
    """The command line that repeats this run."""
    parts = ["tagger", "--task", args.task, "--elmo", args.elmo, "--fraction", str(args.fraction),
             "--seed", str(args.seed)]
    if args.epochs:
        parts += ["--epochs", str(args.epochs)]
    if args.elmo != "none":
        parts += ["--model", args.model, "--l2", str(args.l2)] + ([] if args.output_mix else ["--no-output-mix"])
    return " ".join([SCRIPT, *map(shlex.quote, parts)])


def train_tagger(args: argparse.Namespace) -> dict:
    """Train one tagger, pick the epoch with the best dev score, and return its record (test score included)."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    splits = load_task(args.task, args.data)
    keep = training_subset(list(range(len(splits["train"]))), args.fraction)
    train = [splits["train"][index] for index in keep]
    tags = tag_list(splits)
    tag_index = {tag: index for index, tag in enumerate(tags)}
    vocabulary = sorted({word for words, _ in train for word in words})
    word_index = {word: index for index, word in enumerate(vocabulary, start=2)}  # 0 padding, 1 unknown
    use_elmo = args.elmo != "none"
    data = {}
    for split, sentences in (("train", train), ("dev", splits["dev"]), ("test", splits["test"])):
        layers = None
        if use_elmo:
            layers = bilm_layers(args.model, args.task, split, splits[split], args.cache, args.threads)
            if split == "train":
                layers = subset_layers(layers, keep)
        data[split] = Encoded(sentences, word_index, tag_index, layers)
    elmo_shape = tuple(data["train"].layers[0].shape[1:]) if use_elmo else None
    model = Tagger(len(word_index) + 2, len(tags), elmo_shape, args.l2, args.output_mix)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    epochs = args.epochs or (NER_EPOCHS if args.task == "ner" else EPOCHS)[args.fraction]
    generator = torch.Generator().manual_seed(args.seed)
    best = (-1.0, 0, None, {})
    started = time.perf_counter()
    for epoch in range(1, epochs + 1):
        for _, batch in data["train"].batches(args.batch_size, generator):
            logits = model(batch["word_ids"], batch["char_ids"], batch["lengths"], batch.get("elmo_layers"))
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch["tags"].flatten(), ignore_index=-100)
            optimizer.zero_grad()
            (loss + model.l2_penalty()).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
        dev = evaluate(model, data["dev"], tags, args.task)
        if dev > best[0]:
            best = (dev, epoch, {name: value.clone() for name, value in model.state_dict().items()},
                    model.mix_weights())
    seconds = time.perf_counter() - started
    model.load_state_dict(best[2])
    record = {
        **run_config(args), "dev": round(best[0], 2), "test": round(evaluate(model, data["test"], tags, args.task), 2),
        "best_epoch": best[1], "epochs": epochs, "train_sentences": len(train),
        "train_words": sum(len(words) for words, _ in train), "seconds": round(seconds, 1),
        "mix_weights": best[3], "threads": args.threads, "cpu": cpu_name(), "command": tagger_command(args),
    }
    return record


def subset_layers(layers: tuple[torch.Tensor, torch.Tensor], keep: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The cached layers of the sentences `keep` only, in that order."""
    all_layers, offsets = layers
    parts = [all_layers[offsets[i]:offsets[i + 1]] for i in keep]
    lengths = torch.tensor([0] + [len(part) for part in parts])
    return torch.cat(parts), lengths.cumsum(0)


def cpu_name() -> str:
    """The CPU model, for every number this script records."""
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def append_record(results: Path, record: dict) -> None:
    """One JSON line per run, appended and flushed, so an interrupted grid keeps every finished run."""
    results.parent.mkdir(parents=True, exist_ok=True)
    with results.open("a", encoding="utf-8") as file:
        file.write(json.dumps(record) + "\n")
        file.flush()


def read_records(results: Path) -> list[dict]:
    """Every record of `results` (none if it does not exist); a line that is not JSON is a clear error."""
    records = []
    for number, line in enumerate(results.read_text().splitlines() if results.is_file() else [], start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise SystemExit(f"error: line {number} of {results} is not a JSON record ({error.msg}): a run stopped "
                             "while writing it? Remove that line (the other records stay valid) and run again.")
    return records


def probe(args: argparse.Namespace) -> dict:
    """A linear classifier of Brown POS tags on one biLM layer alone (paper Table 6), test accuracy in percent."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    splits = load_task("pos", args.data)
    tags = tag_list(splits)
    tag_index = {tag: index for index, tag in enumerate(tags)}

    def vectors(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        layers, _ = bilm_layers(args.model, "pos", split, splits[split], args.cache, args.threads)
        targets = torch.tensor([tag_index[tag] for _, sentence_tags in splits[split] for tag in sentence_tags])
        return layers[:, args.layer], targets

    train, test = vectors("train"), vectors("test")
    classifier = nn.Linear(train[0].shape[1], len(tags))
    optimizer = torch.optim.Adam(classifier.parameters(), lr=args.learning_rate)
    generator = torch.Generator().manual_seed(args.seed)
    started = time.perf_counter()
    epochs = args.epochs or 3
    for _ in range(epochs):
        for indices in torch.randperm(len(train[1]), generator=generator).split(1024):
            loss = nn.functional.cross_entropy(classifier(train[0][indices].float()), train[1][indices])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        predicted = torch.cat([classifier(part.float()).argmax(-1) for part in test[0].split(8192)])
    command = f"{SCRIPT} probe --layer {args.layer} --model {shlex.quote(args.model)} --seed {args.seed}"
    command += f" --epochs {args.epochs}" if args.epochs else ""
    return {"probe": "pos", "model": args.model, "layer": args.layer, "seed": args.seed, "epochs": epochs,
            "test": round(100 * (predicted == test[1]).float().mean().item(), 2),
            "seconds": round(time.perf_counter() - started, 1), "cpu": cpu_name(), "command": command}


def adapt(args: argparse.Namespace) -> None:
    """Paper §2.4: continue the biLM's language-model training on the task's unlabelled training text.

    The task's words go to `OUTPUT-train.txt` and `OUTPUT-dev.txt` beside `--output` (a file of that name holding
    other text is never overwritten); `elmo-hf pretrain` refuses an `--output` that already holds a model unless
    `--overwrite` or `--resume` is passed on to it.
    """
    splits = load_task(args.task, args.data)
    texts = {split: args.output.parent / f"{args.output.name}-{split}.txt" for split in ("train", "dev")}
    contents = {split: "".join(" ".join(words) + "\n" for words, _ in splits[split]) for split in texts}
    for split, path in texts.items():
        if path.is_file() and path.read_text(encoding="utf-8") != contents[split]:
            raise SystemExit(f"error: {path} exists and holds other text than the task's {split} words; choose "
                             "another --output, or move that file.")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for split, path in texts.items():
        partial = path.with_suffix(".partial")
        partial.write_text(contents[split], encoding="utf-8")
        partial.replace(path)
    command = ["elmo-hf", "pretrain", "--model", args.model, "--train", str(texts["train"]),
               "--validation", str(texts["dev"]), "--output", str(args.output),
               "--learning-rate", str(args.learning_rate), "--lr-scheduler", "linear", "--warmup-steps", "50",
               "--dropout", "0.1", "--batch-size", "32", "--threads", str(args.threads), "--no-progress",
               "--eval-steps", "100000", "--save-steps", "100000", *args.pretrain_args]
    print(" ".join(shlex.quote(part) for part in command), flush=True)
    returncode = subprocess.run(command).returncode
    if returncode:
        raise SystemExit(f"error: elmo-hf pretrain stopped with exit status {returncode} (its message is above).")


def grid_runs(tasks: list[str], adapted: dict[str, str]) -> list[dict]:
    """Every tagger run of docs/results.md, in the order they are made: for each task and training fraction three
    seeds without and with ELMo (the default model), then with the model adapted to the task where `adapted` names
    one, then the L2 comparison (lambda = 1 instead of 0.001, `L2_RUNS`)."""
    runs = []
    for task in tasks:
        for fraction in sorted(FRACTIONS, reverse=True):
            for seed in SEEDS:
                runs += [dict(task=task, elmo="none", fraction=fraction, seed=seed),
                         dict(task=task, elmo="frozen", model=DEFAULT_MODEL, fraction=fraction, seed=seed, l2=0.001)]
        if task in adapted:
            runs += [dict(task=task, elmo="frozen", model=adapted[task], fraction=fraction, seed=seed, l2=0.001)
                     for fraction in sorted(FRACTIONS, reverse=True) for seed in SEEDS]
        fraction, seeds = L2_RUNS[task]
        runs += [dict(task=task, elmo="frozen", model=DEFAULT_MODEL, fraction=fraction, seed=seed, l2=1.0)
                 for seed in seeds]
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common = argparse.ArgumentParser(add_help=False)  # options every subcommand takes, after its name
    common.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="the shared data folder")
    common.add_argument("--cache", type=Path, default=ROOT / "runs" / "experiments" / "cache",
                        help="where the frozen biLM's layers are cached")
    common.add_argument("--results", type=Path, default=ROOT / "experiments" / "results.jsonl")
    common.add_argument("--threads", type=int, default=1)
    commands = parser.add_subparsers(dest="command", required=True)
    corpus = commands.add_parser("corpus", parents=[common], help="the default model's pretraining corpus")
    corpus.add_argument("--output", type=Path, required=True)
    tagger = commands.add_parser("tagger", parents=[common], help="train and test one tagger")
    for command in (tagger,
                    commands.add_parser("probe", parents=[common], help="a linear POS probe on one biLM layer"),
                    commands.add_parser("adapt", parents=[common], help="continue pretraining the biLM on task text"),
                    commands.add_parser("grid", parents=[common], help="every tagger and probe run not in --results")):
        command.add_argument("--model", default=DEFAULT_MODEL, help="the biLM: a packaged name or a folder")
        command.add_argument("--seed", type=int, default=0)
        command.add_argument("--epochs", type=int, help="training epochs (default: by task and fraction)")
        command.add_argument("--learning-rate", type=float, default=2e-3)
        command.add_argument("--batch-size", type=int, default=32)
    tagger.add_argument("--task", choices=["pos", "ner"], required=True)
    tagger.add_argument("--elmo", choices=["none", "frozen"], default="frozen")
    tagger.add_argument("--fraction", type=float, choices=FRACTIONS, default=1.0)
    tagger.add_argument("--l2", type=float, default=0.001, help="lambda of the mixes' L2 penalty")
    tagger.add_argument("--output-mix", action=argparse.BooleanOptionalAction, default=True,
                        help="also concatenate a second mix of the biLM's layers to the biLSTM's outputs")
    commands.choices["probe"].add_argument("--layer", type=int, required=True)
    commands.choices["adapt"].add_argument("--task", choices=["pos", "ner"], required=True)
    commands.choices["adapt"].add_argument("--output", type=Path, required=True)
    commands.choices["adapt"].add_argument("pretrain_args", nargs="*", help="more `elmo-hf pretrain` options")
    commands.choices["grid"].add_argument("--adapted", nargs="*", default=[], metavar="TASK=FOLDER",
                                          help="models adapted by `adapt`, e.g. ner=runs/experiments/adapted-ner")
    commands.choices["grid"].add_argument("--tasks", nargs="+", choices=["ner", "pos"], default=["ner", "pos"])
    commands.choices["grid"].add_argument("--probe-layers", type=int, default=3, help="probe layers 0 .. N-1")
    commands.add_parser("report", parents=[common], help="tables and plots of --results")
    args = parser.parse_args(argv)

    if args.command == "corpus":
        print(build_corpus(args.data, args.output))
    elif args.command == "tagger":
        record = train_tagger(args)
        append_record(args.results, record)
        print(json.dumps(record))
    elif args.command == "probe":
        record = probe(args)
        append_record(args.results, record)
        print(json.dumps(record))
    elif args.command == "adapt":
        adapt(args)
    elif args.command == "grid":
        adapted = dict(item.split("=", 1) for item in args.adapted)
        records = read_records(args.results)
        done_probes = {(record["model"], record["layer"]) for record in records if "probe" in record}
        for layer in range(args.probe_layers):
            if (args.model, layer) not in done_probes:
                append_record(args.results, probe(argparse.Namespace(**{**vars(args), "layer": layer})))
        for run in grid_runs(args.tasks, adapted):
            run_args = argparse.Namespace(**{**vars(args), "model": DEFAULT_MODEL, "l2": 0.001, "output_mix": True,
                                             **run})
            config = run_config(run_args)
            if any(all(record.get(key) == value for key, value in config.items()) for record in records):
                continue
            record = train_tagger(run_args)
            append_record(args.results, record)
            print(json.dumps({key: record[key] for key in ("task", "elmo", "model", "fraction", "seed", "dev",
                                                           "test", "seconds")}), flush=True)
    else:
        from experiments.report import report

        report(read_records(args.results), ROOT / "docs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
