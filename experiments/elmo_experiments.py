"""The experiments of docs/results.md: does a frozen biLM help a tagger, and what do its layers carry?

    python experiments/elmo_experiments.py corpus --data ../shared/data --output runs/corpus
    python experiments/elmo_experiments.py tagger --task pos --elmo frozen --fraction 0.1 --seed 0
    python experiments/elmo_experiments.py adapt --task ner --output runs/experiments/adapted-ner
    python experiments/elmo_experiments.py probe --layer 1
    python experiments/elmo_experiments.py layers --corpus runs/corpus/train.txt   # degenerate layers? neighbours
    python experiments/elmo_experiments.py senses  # nearest-neighbour word senses of experiments/senses.tsv
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
`layers` and `senses` (and `probe`) ask what the vectors mean, per layer, and record their numbers the same way.
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
    """The fields that identify a tagger run (what `grid` compares to skip runs already made); `weights` is the
    biLM's digest (a retrained model of the same name is another run), `epochs_option` the `--epochs` given, None
    for the task's default."""
    use_elmo = args.elmo != "none"
    return {"task": args.task, "elmo": args.elmo, "model": args.model if use_elmo else None,
            "weights": model_digest(args.model) if use_elmo else None,
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
    return {"probe": "pos", "model": args.model, "weights": model_digest(args.model), "layer": args.layer,
            "seed": args.seed, "epochs": epochs,
            "test": round(100 * (predicted == test[1]).float().mean().item(), 2),
            "seconds": round(time.perf_counter() - started, 1), "cpu": cpu_name(), "command": command}


# Words whose per-layer nearest neighbours `layers` prints: parts of speech, meanings, and unrelated words that a
# degenerate token layer puts together (bit / Bible / able / nine). Case counts: "Bible" is the usual form.
PROBE_WORDS = ("walked", "river", "money", "bank", "king", "said", "nine", "able", "Bible", "bit", "war", "ship",
               "whale", "good")
# "bank" in three made-up sentences: is the river bank farther from the two money banks than they are from each
# other? (The first two end alike, so their backward halves agree; the third has other words after "bank".)
BANK_EXAMPLE = {"river": "I sat on the river bank .", "money": "she deposited money at the bank .",
                "money again": "he took a loan from the bank to buy a house ."}
TIE = 1e-4  # cosines this close count as equally near (a context-free layer gives every use of a word one vector)


def sentence_layers(name: str, sentences: list[list[str]], args: argparse.Namespace) -> list[torch.Tensor]:
    """`bilm_layers` of plain sentences, cached under a hash of their words: one `(words, num_layers + 1, dim)`
    float16 tensor per sentence."""
    digest = hashlib.sha256("\n".join(" ".join(words) for words in sentences).encode()).hexdigest()[:12]
    plain = [(words, []) for words in sentences]
    layers, offsets = bilm_layers(args.model, name, digest, plain, args.cache, args.threads)
    return [layers[offsets[index]:offsets[index + 1]] for index in range(len(sentences))]


def frequent_words(counts: dict[str, int], number: int) -> list[str]:
    """The `number` most frequent tokens that hold a letter (punctuation and numbers left out), most frequent first,
    ties in order of first appearance."""
    words = [word for word, _ in sorted(counts.items(), key=lambda item: -item[1]) if any(c.isalpha() for c in word)]
    return words[:number]


def spread_uses(corpus: Path, number: int, probe_words: tuple[str, ...], uses: int
                ) -> tuple[list[str], list[list[str]], dict[str, list[tuple[int, int]]]]:
    """The `number` most frequent words of `corpus` (one tokenised sentence a line), and for them and `probe_words`
    `m = min(uses, n)` of their n occurrences, spread evenly over the whole file (occurrences k * n // m, k < m).

    Returns `(words, sentences, positions)`: `positions[word]` lists `(sentence, token)` indices into `sentences`.
    """
    if not corpus.is_file():
        raise SystemExit(f"error: {corpus} not found: --corpus must be the corpus's train.txt, made by "
                         f"`{SCRIPT} corpus --output runs/corpus`.")
    lines = corpus.read_text(encoding="utf-8").splitlines()
    counts: dict[str, int] = {}
    for line in lines:
        for token in line.split():
            counts[token] = counts.get(token, 0) + 1
    words = frequent_words(counts, number)
    missing = [word for word in probe_words if word not in counts]
    if missing:
        raise SystemExit(f"error: the probe words {', '.join(missing)} never occur in {corpus}: choose others.")
    taken = {word: min(uses, counts[word]) for word in dict.fromkeys([*words, *probe_words])}
    wanted = {word: {k * counts[word] // m for k in range(m)} for word, m in taken.items()}
    seen = dict.fromkeys(wanted, 0)
    sentences: list[list[str]] = []
    positions: dict[str, list[tuple[int, int]]] = {word: [] for word in wanted}
    for line in lines:
        tokens = line.split()
        kept = False
        for position, token in enumerate(tokens):
            if token in wanted:
                if seen[token] in wanted[token]:
                    positions[token].append((len(sentences), position))
                    kept = True
                seen[token] += 1
        if kept:
            sentences.append(tokens)
    return words, sentences, positions


def top_components_share(vectors: np.ndarray, components: int = 3) -> float:
    """The fraction of the variance of `vectors` `(n, dim)` (about their mean) that its top `components` principal
    components hold: near 1 for a degenerate set, about components / dim for an isotropic one."""
    singular = np.linalg.svd(vectors - vectors.mean(axis=0), compute_uv=False)
    return float((singular[:components] ** 2).sum() / (singular ** 2).sum())


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of every row of `a` `(n, dim)` with every row of `b` `(m, dim)`: `(n, m)`."""
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    return a @ (b / np.linalg.norm(b, axis=1, keepdims=True)).T


def word_layers(args: argparse.Namespace) -> dict:
    """Per layer: how much of the variance of frequent words' vectors lies in 3 directions, their mean pairwise
    cosine, and the nearest neighbours of `PROBE_WORDS` (a word's vector at a layer: the mean over its spread uses,
    `spread_uses`; the token layer is context-free, so there every use gives the same vector)."""
    started = time.perf_counter()
    words, sentences, positions = spread_uses(args.corpus, args.words, PROBE_WORDS, args.uses)
    layers = sentence_layers("words", sentences, args)
    vectors = {word: torch.stack([layers[sentence][token] for sentence, token in uses]).float().mean(0).numpy()
               for word, uses in positions.items()}
    frequent = np.stack([vectors[word] for word in words])  # (words, num_layers + 1, dim)
    probes = np.stack([vectors[word] for word in PROBE_WORDS])
    share, mean_cosine, neighbours = [], [], {word: [] for word in PROBE_WORDS}
    for layer in range(frequent.shape[1]):
        share.append(round(top_components_share(frequent[:, layer]), 4))
        similarity = cosines(frequent[:, layer], frequent[:, layer])
        mean_cosine.append(round(float(similarity[~np.eye(len(words), dtype=bool)].mean()), 4))
        for word, row in zip(PROBE_WORDS, cosines(probes[:, layer], frequent[:, layer])):
            order = [index for index in np.argsort(-row, kind="stable") if words[index] != word][: args.neighbours]
            neighbours[word].append([[words[index], round(float(row[index]), 3)] for index in order])
    command = (f"{SCRIPT} layers --model {shlex.quote(args.model)} --corpus {shlex.quote(str(args.corpus))} "
               f"--words {args.words} --uses {args.uses} --neighbours {args.neighbours}")
    return {"check": "layers", "model": args.model, "weights": model_digest(args.model), "words": len(words),
            "uses": args.uses, "sentences": len(sentences), "top3_variance": share, "mean_cosine": mean_cosine,
            "neighbours": neighbours, "seconds": round(time.perf_counter() - started, 1), "threads": args.threads,
            "cpu": cpu_name(), "command": command}


def read_senses(path: Path) -> list[dict]:
    """The labelled uses of `path` (tab-separated word, sense, index, source, sentence under a header line of those
    names; `#` lines are comments), each checked: the sentence's token at `index` is the word; every word has at
    least two uses."""
    if not path.is_file():
        raise SystemExit(f"error: {path} not found: --senses must be a file like experiments/senses.tsv.")
    rows = [(number, line.split("\t")) for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if line.strip() and not line.startswith("#")]
    header = ["word", "sense", "index", "source", "sentence"]
    if not rows or rows[0][1] != header:
        raise SystemExit(f"error: {path} does not start with the tab-separated header line {' '.join(header)} (after "
                         "its # comments): see experiments/senses.tsv.")
    uses = []
    for number, row in rows[1:]:
        use = dict(zip(header, row))
        tokens = use.get("sentence", "").split()
        if len(row) != len(header) or not use["index"].isdigit() or int(use["index"]) >= len(tokens) \
                or tokens[int(use["index"])].lower() != use["word"]:
            raise SystemExit(f"error: line {number} of {path} is not word, sense, index, source, sentence with the "
                             "word at token `index` (0-based) of the sentence: fix that line.")
        uses.append({**use, "index": int(use["index"]), "tokens": tokens})
    alone = sorted(word for word in {use["word"] for use in uses} if sum(use["word"] == word for use in uses) < 2)
    if alone or not uses:
        raise SystemExit(f"error: {path} has {'one use only of ' + ', '.join(alone) if alone else 'no uses'}: a "
                         "use's sense is read off the other uses of its word, so give each word two or more.")
    return uses


def nearest_sense_accuracy(vectors: np.ndarray, senses: list[str]) -> float:
    """Leave-one-out 1-nearest-neighbour sense accuracy of the uses `vectors` `(n, dim)` of one word, by cosine.

    A use scores the share of its nearest other uses (cosines within `TIE` of the highest) that have its sense:
    1-NN with ties broken at random, in expectation. So a layer that gives every use the same vector scores chance,
    `(uses of the sense - 1) / (n - 1)`, not whatever the order of the file would decide.
    """
    similarity = cosines(vectors, vectors)
    np.fill_diagonal(similarity, -np.inf)
    scores = []
    for index, row in enumerate(similarity):
        nearest = np.flatnonzero(row >= row.max() - TIE)
        scores.append(np.mean([senses[other] == senses[index] for other in nearest]))
    return float(np.mean(scores))


def nearest_mean_accuracy(vectors: np.ndarray, senses: list[str]) -> float:
    """Leave-one-out sense accuracy of the uses `vectors` `(n, dim)` of one word by the nearest sense mean, the
    paper's word-sense check (§5.3): a sense is the mean of its labelled uses' vectors, the use left out, and a use
    takes the sense whose mean is nearest by cosine. Ties within `TIE` share the vote, so one vector for every use
    scores 1 / (number of senses)."""
    scores = []
    for index, sense in enumerate(senses):
        others = {label: [row for row, other in enumerate(senses) if other == label and row != index]
                  for label in dict.fromkeys(senses)}
        labels = [label for label, rows in others.items() if rows]
        similarity = cosines(vectors[None, index], np.stack([vectors[others[label]].mean(0) for label in labels]))[0]
        nearest = [labels[row] for row in np.flatnonzero(similarity >= similarity.max() - TIE)]
        scores.append(nearest.count(sense) / len(nearest))
    return float(np.mean(scores))


def sense_check(args: argparse.Namespace) -> dict:
    """The paper's word-sense checks in small: leave-one-out sense accuracy per layer over the labelled uses of
    `--senses` (each use against the other uses of its word), by the nearest use and by the nearest sense mean, and
    the cosines of `BANK_EXAMPLE`'s banks per layer."""
    started = time.perf_counter()
    uses = read_senses(args.senses)
    bank = {name: sentence.split() for name, sentence in BANK_EXAMPLE.items()}
    layers = sentence_layers("senses", [use["tokens"] for use in uses] + list(bank.values()), args)
    targets = torch.stack([layers[row][use["index"]] for row, use in enumerate(uses)]).float().numpy()
    accuracy: dict[str, list[float]] = {}
    by_mean: dict[str, list[float]] = {}
    chance: dict[str, float] = {}
    for word in dict.fromkeys(use["word"] for use in uses):
        rows = [row for row, use in enumerate(uses) if use["word"] == word]
        senses = [uses[row]["sense"] for row in rows]
        accuracy[word] = [round(nearest_sense_accuracy(targets[rows, layer], senses), 4)
                          for layer in range(targets.shape[1])]
        by_mean[word] = [round(nearest_mean_accuracy(targets[rows, layer], senses), 4)
                         for layer in range(targets.shape[1])]
        chance[word] = round(float(np.mean([(senses.count(sense) - 1) / (len(senses) - 1) for sense in senses])), 4)
    words = list(chance)
    counts = [sum(use["word"] == word for use in uses) for word in words]  # "all": the mean over every use
    for scores in (accuracy, by_mean):
        scores["all"] = [round(float(np.average([scores[word][layer] for word in words], weights=counts)), 4)
                         for layer in range(targets.shape[1])]
    chance["all"] = round(float(np.average([chance[word] for word in words], weights=counts)), 4)
    banks = {name: layers[len(uses) + row][tokens.index("bank")].float().numpy()
             for row, (name, tokens) in enumerate(bank.items())}
    pairs = [("river", "money"), ("river", "money again"), ("money", "money again")]
    bank_cosines = {f"{a} / {b}": [round(float(cosines(banks[a][None, layer], banks[b][None, layer])[0, 0]), 4)
                                   for layer in range(targets.shape[1])] for a, b in pairs}
    command = f"{SCRIPT} senses --model {shlex.quote(args.model)} --senses {shlex.quote(str(args.senses))}"
    return {"check": "senses", "model": args.model, "weights": model_digest(args.model),
            "senses_file": hashlib.sha256(args.senses.read_bytes()).hexdigest()[:12], "uses": len(uses),
            "accuracy": accuracy, "chance": chance, "accuracy_sense_mean": by_mean, "bank_cosines": bank_cosines,
            "seconds": round(time.perf_counter() - started, 1), "threads": args.threads, "cpu": cpu_name(),
            "command": command}


def print_check(record: dict) -> None:
    """A check's record as markdown tables (the layers' columns: 0 the token layer, 1 and 2 the biLSTM layers)."""
    if record["check"] == "layers":
        columns = range(len(record["top3_variance"]))
        print("| | " + " | ".join(f"layer {layer}" for layer in columns) + " |\n|---|" + "---|" * len(columns))
        print(f"| variance in the top 3 components of {record['words']:,} frequent words | "
              + " | ".join(f"{share:.1%}" for share in record["top3_variance"]) + " |")
        print("| mean cosine of two of them | " + " | ".join(f"{value:.2f}" for value in record["mean_cosine"]) + " |")
        print("\n| word | " + " | ".join(f"layer {layer} nearest" for layer in columns) + " |\n|---|"
              + "---|" * len(columns))
        for word, by_layer in record["neighbours"].items():
            print(f"| {word} | " + " | ".join(", ".join(f"{other} {cosine:.2f}" for other, cosine in nearest)
                                            for nearest in by_layer) + " |")
    else:
        columns = range(len(record["accuracy"]["all"]))
        print("| word | chance (nearest use) | " + " | ".join(f"layer {layer}, nearest use" for layer in columns)
              + " | " + " | ".join(f"layer {layer}, nearest sense mean" for layer in columns) + " |\n|---|---|"
              + "---|" * 2 * len(columns))
        for word, by_layer in record["accuracy"].items():
            print(f"| {word} | {record['chance'][word]:.2f} | "
                  + " | ".join(f"{value:.2f}" for value in by_layer + record["accuracy_sense_mean"][word]) + " |")
        print("\n| cosine of bank in | " + " | ".join(f"layer {layer}" for layer in columns) + " |\n|---|"
              + "---|" * len(columns))
        for pair, by_layer in record["bank_cosines"].items():
            print(f"| {pair} | " + " | ".join(f"{value:.3f}" for value in by_layer) + " |")


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
    common_model = argparse.ArgumentParser(add_help=False)
    common_model.add_argument("--model", default=DEFAULT_MODEL, help="the biLM: a packaged name or a folder")
    commands = parser.add_subparsers(dest="command", required=True)
    corpus = commands.add_parser("corpus", parents=[common], help="the default model's pretraining corpus")
    corpus.add_argument("--output", type=Path, required=True)
    model = [common, common_model]
    tagger = commands.add_parser("tagger", parents=model, help="train and test one tagger")
    for command in (tagger,
                    commands.add_parser("probe", parents=model, help="a linear POS probe on one biLM layer"),
                    commands.add_parser("adapt", parents=model, help="continue pretraining the biLM on task text"),
                    commands.add_parser("grid", parents=model, help="every tagger and probe run not in --results")):
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
    layers = commands.add_parser("layers", parents=model,
                                 help="per layer: variance in 3 components, nearest neighbours of probe words")
    layers.add_argument("--corpus", type=Path, default=ROOT / "runs" / "corpus" / "train.txt",
                        help="the pretraining corpus's train.txt (made by `corpus`)")
    layers.add_argument("--words", type=int, default=2000, help="how many of its most frequent words")
    layers.add_argument("--uses", type=int, default=5, help="uses in context averaged into a word's vector")
    layers.add_argument("--neighbours", type=int, default=5, help="nearest neighbours printed per probe word")
    commands.add_parser("senses", parents=model, help="nearest-neighbour word senses per layer").add_argument(
        "--senses", type=Path, default=ROOT / "experiments" / "senses.tsv", help="labelled uses of ambiguous words")
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
    elif args.command in ("layers", "senses"):
        record = (word_layers if args.command == "layers" else sense_check)(args)
        append_record(args.results, record)
        print_check(record)
    elif args.command == "adapt":
        adapt(args)
    elif args.command == "grid":
        adapted = dict(item.split("=", 1) for item in args.adapted)
        records = read_records(args.results)
        done_probes = {(record.get("weights"), record["layer"]) for record in records if "probe" in record}
        weights = model_digest(args.model)  # a retrained model of the same name is probed again
        for layer in range(args.probe_layers):
            if (weights, layer) not in done_probes:
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
