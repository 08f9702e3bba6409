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
"""`elmo-hf embed`: ELMo vectors for a corpus, one sentence a line, into an HDF5 file laid out as `allennlp elmo`'s.

    elmo-hf embed sentences.txt vectors.hdf5 --model elmo-demo                 # all layers, float32
    cat raw.txt | elmo-hf embed - vectors.hdf5 --model elmo-demo --split default --layers top --dtype float16
    torchrun --nproc_per_node 4 --no-python elmo-hf embed sentences.txt vectors.hdf5 --model elmo-demo

The file holds one dataset per input line, named by its 0-based line number: `(num_layers + 1, words, dim)` with
`--layers all`, `(words, dim)` otherwise (an empty line gives 0 words), and `sentence_to_index`, a one-element string
dataset holding the JSON object `{sentence: line number}` (the last line of a repeated sentence), as `allennlp elmo`
writes it. The root attribute `elmo_hf_settings` records the settings, which `--resume` checks.

Input is streamed: a reader thread splits and encodes lines and groups them by length into batches, the model runs in
the main thread, and a writer thread writes the vectors, so that reading and writing overlap the model's compute.
Vectors go to complete part files in `OUTPUT.partial/` (each written under a temporary name and renamed when closed),
which are merged into a temporary file renamed to OUTPUT at the end: OUTPUT is never partly written, and an
interrupted run loses at most one part (`--part-size` sentences), which `--resume` then completes.

Under `torchrun` or another launcher that sets `RANK` and `WORLD_SIZE`, process `rank` embeds the lines whose number
is `rank` modulo the number of processes into `OUTPUT.shard-RANK-of-N`; with a process group available (`MASTER_ADDR`
set) rank 0 merges the shards into OUTPUT when all are written, otherwise `elmo-hf merge-shards OUTPUT` does.
"""

import argparse
import contextlib
import datetime
import json
import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import h5py
import numpy as np
import torch

from ..packaged_elmo import DEFAULT_MODEL

INDEX_NAME = "sentence_to_index"  # the dataset allennlp writes the sentence -> key JSON object into
SETTINGS_ATTR = "elmo_hf_settings"
PARTIAL_SUFFIX = ".partial"
RUN_FILE = "run.json"  # marks a `.partial` folder as ours, with the settings of its run
MERGE_TEMPORARY = "merged.hdf5.tmp"
PART_SECONDS = 60.0  # a part is closed after this long even if it holds fewer than --part-size sentences
POOL_BATCHES = 32  # lines read ahead and sorted by length, in batches: longer pools pad less, hold more in memory
QUEUE_BATCHES = 4  # batches waiting between threads
ENCODER_CACHE_WORDS = 200_000
OUTPUT_DTYPES = {"float32": torch.float32, "float16": torch.float16}
MODEL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DISTRIBUTED_TIMEOUT = datetime.timedelta(days=7)  # ranks wait at a barrier for the slowest one


class EmbedError(ValueError):
    """The command cannot run as asked; the message says what is wrong and what to do."""


@dataclass
class Sentence:
    """One input line: its key (0-based line number), stripped text and words."""

    key: int
    text: str
    words: list[str]


def shard_path(output: Path, rank: int, world_size: int) -> Path:
    return output.with_name(f"{output.name}.shard-{rank}-of-{world_size}")


def partial_folder(target: Path) -> Path:
    return target.with_name(target.name + PARTIAL_SUFFIX)


def read_lines(stream: BinaryIO, name: str, errors: str) -> Iterator[tuple[int, str]]:
    """(key, stripped line) for every line of a binary stream, decoded as UTF-8."""
    for key, raw in enumerate(stream):
        try:
            text = raw.decode("utf-8", errors=errors)
        except UnicodeDecodeError as error:
            raise EmbedError(
                f"line {key + 1} of {name} is not valid UTF-8 (byte {raw[error.start]:#04x} at byte offset "
                f"{error.start} of the line); fix the input or pass --errors replace to read it as U+FFFD."
            ) from None
        yield key, text.strip()


def count_lines(path: Path, errors: str) -> int:
    """Lines of a file (for the progress bar); also finds undecodable bytes before any work starts."""
    with path.open("rb") as stream:
        return sum(1 for _ in read_lines(stream, str(path), errors))


class CharIdEncoder:
    """Words -> `input_ids` `(batch_size, sequence_length, max_characters_per_token)` and `attention_mask`, with the
    character ids of frequent words cached (`word_to_char_ids` is the mapping; this only batches it)."""

    def __init__(self, max_characters_per_token: int):
        from ..tokenization_elmo import word_to_char_ids

        self.word_to_char_ids = word_to_char_ids
        self.max_characters_per_token = max_characters_per_token
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, sentences: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        length = max(len(words) for words in sentences)
        input_ids = np.zeros((len(sentences), length, self.max_characters_per_token), dtype=np.int64)
        attention_mask = np.zeros((len(sentences), length), dtype=np.int64)
        if len(self.cache) > ENCODER_CACHE_WORDS:
            self.cache.clear()
        for row, words in enumerate(sentences):
            attention_mask[row, : len(words)] = 1
            for column, word in enumerate(words):
                ids = self.cache.get(word)
                if ids is None:
                    ids = self.cache[word] = np.array(self.word_to_char_ids(word, self.max_characters_per_token))
                input_ids[row, column] = ids
        return torch.from_numpy(input_ids), torch.from_numpy(attention_mask)


def length_grouped_batches(
    sentences: Iterable[Sentence], batch_size: int, max_tokens: int | None
) -> Iterator[list[Sentence]]:
    """Batches of similar length: `POOL_BATCHES` batches' worth of sentences at a time, sorted longest first and cut
    at `batch_size` sentences or `max_tokens` padded words (`sentences x longest`), whichever comes first."""

    def cut(pool: list[Sentence]) -> Iterator[list[Sentence]]:
        pool.sort(key=lambda sentence: len(sentence.words), reverse=True)
        batch: list[Sentence] = []
        for sentence in pool:
            longest = len(batch[0].words) if batch else len(sentence.words)
            if batch and (len(batch) == batch_size or (max_tokens and (len(batch) + 1) * longest > max_tokens)):
                yield batch
                batch = []
            batch.append(sentence)
        if batch:
            yield batch

    pool: list[Sentence] = []
    pool_words = 0
    for sentence in sentences:
        pool.append(sentence)
        pool_words += len(sentence.words)
        if len(pool) >= POOL_BATCHES * batch_size or (max_tokens and pool_words >= POOL_BATCHES * max_tokens):
            yield from cut(pool)
            pool, pool_words = [], 0
    if pool:
        yield from cut(pool)


@dataclass
class ExistingVectors:
    """Complete datasets already written (by an earlier run) that a `--resume` run keeps: key -> file, the shape of
    each, and the sentence each file's index names for a key."""

    files: dict[int, Path]
    shapes: dict[int, tuple[int, ...]]
    sentences: dict[int, str]


def read_settings(file: h5py.File, path: Path) -> dict:
    if SETTINGS_ATTR not in file.attrs:
        raise EmbedError(
            f"{path} was not written by elmo-hf embed (no {SETTINGS_ATTR}); use --overwrite to replace it."
        )
    return json.loads(file.attrs[SETTINGS_ATTR])


def read_index(file: h5py.File) -> dict[str, int]:
    if INDEX_NAME not in file:
        return {}
    text = file[INDEX_NAME][0]
    return json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)


def scan_existing(paths: list[Path], settings: dict) -> ExistingVectors:
    """Datasets of the files a resumed run starts from, later files overriding earlier ones; refuses a file written
    with other settings."""
    existing = ExistingVectors({}, {}, {})
    for path in paths:
        try:
            with h5py.File(path, "r") as file:
                found = read_settings(file, path)
                if found != settings:
                    changed = ", ".join(
                        f"{name}={found.get(name)!r}" for name in settings if found.get(name) != settings[name]
                    )
                    raise EmbedError(
                        f"{path} was written with other settings ({changed}); rerun with those settings, or use "
                        "--overwrite to start over."
                    )
                for name, dataset in file.items():
                    if name.isdigit():
                        existing.files[int(name)] = path
                        existing.shapes[int(name)] = dataset.shape
                existing.sentences.update({int(key): sentence for sentence, key in read_index(file).items()})
        except OSError as error:
            raise EmbedError(f"cannot read {path} ({error}); use --overwrite to start over.") from None
    return existing


def expected_shape(settings: dict, num_words: int, num_layers: int, dim: int) -> tuple[int, ...]:
    return (num_layers, num_words, dim) if settings["layers"] == "all" else (num_words, dim)


class PartWriter:
    """Writes vectors into part files `part-NNNNNN.hdf5` of a `.partial` folder: each is written as `*.tmp` and renamed
    once closed, so a part that exists is complete. Also keeps the index {sentence: last key} and where every key of
    the final file will come from."""

    def __init__(self, folder: Path, settings: dict, part_size: int):
        self.folder = folder
        self.settings = settings
        self.part_size = part_size
        self.number = max((int(path.stem.split("-")[1]) + 1 for path in folder.glob("part-*.hdf5")), default=0)
        self.file: h5py.File | None = None
        self.part_index: dict[str, int] = {}
        self.opened = 0.0
        self.index: dict[str, int] = {}
        self.sources: dict[int, Path] = {}

    def _path(self) -> Path:
        return self.folder / f"part-{self.number:06d}.hdf5"

    def add_index(self, sentence: Sentence):
        if sentence.key > self.index.get(sentence.text, -1):
            self.index[sentence.text] = sentence.key

    def keep(self, sentence: Sentence, source: Path):
        """A sentence whose vectors an earlier run wrote into `source`."""
        self.add_index(sentence)
        self.sources[sentence.key] = source

    def write(self, sentence: Sentence, vectors: np.ndarray):
        if self.file is None:
            self.file = h5py.File(self._path().with_suffix(".tmp"), "w")
            self.file.attrs[SETTINGS_ATTR] = json.dumps(self.settings)
            self.opened = time.monotonic()
        self.file.create_dataset(str(sentence.key), data=vectors)
        if sentence.key > self.part_index.get(sentence.text, -1):
            self.part_index[sentence.text] = sentence.key
        self.add_index(sentence)
        self.sources[sentence.key] = self._path()
        if len(self.file) >= self.part_size or time.monotonic() - self.opened > PART_SECONDS:
            self.close_part()

    def close_part(self):
        """Closes the open part and renames it into place."""
        if self.file is None:
            return
        write_index(self.file, self.part_index)
        self.file.flush()
        os.fsync(self.file.id.get_vfd_handle())
        self.file.close()
        os.replace(self._path().with_suffix(".tmp"), self._path())
        self.file, self.part_index = None, {}
        self.number += 1


def write_index(file: h5py.File, index: dict[str, int]):
    """`sentence_to_index` as allennlp writes it: one variable-length string holding the JSON object, keys as strings,
    in line order."""
    ordered = {sentence: str(key) for sentence, key in sorted(index.items(), key=lambda item: item[1])}
    dataset = file.create_dataset(INDEX_NAME, (1,), dtype=h5py.string_dtype())
    dataset[0] = json.dumps(ordered)


def merge_into(target: Path, sources: dict[int, Path], index: dict[str, int], settings: dict, staging: Path):
    """Copies every key's dataset from its source file into `staging/merged.hdf5.tmp` with the index and settings, then
    renames it to `target` (replacing it): `target` is complete or untouched."""
    temporary = staging / MERGE_TEMPORARY
    by_file: dict[Path, list[int]] = {}
    for key, path in sources.items():
        by_file.setdefault(path, []).append(key)
    with h5py.File(temporary, "w") as merged:
        merged.attrs[SETTINGS_ATTR] = json.dumps(settings)
        for path, keys in by_file.items():
            with h5py.File(path, "r") as source:
                for key in sorted(keys):
                    source.copy(source[str(key)], merged, name=str(key))
        write_index(merged, index)
        merged.flush()
        os.fsync(merged.id.get_vfd_handle())
    os.replace(temporary, target)


def remove_partial(folder: Path):
    """Removes a `.partial` folder, only if it is ours (it holds run.json)."""
    if not folder.exists():
        return
    if not (folder / RUN_FILE).is_file():
        raise EmbedError(f"{folder} exists but was not made by elmo-hf embed; move it away.")
    shutil.rmtree(folder)


def put(channel: queue.Queue, item: Any, stop: threading.Event):
    """`channel.put(item)` that gives up when `stop` is set (the consumer failed)."""
    while not stop.is_set():
        try:
            channel.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def get(channel: queue.Queue, stop: threading.Event) -> Any:
    """`channel.get()` that returns None when `stop` is set (the producer failed)."""
    while not stop.is_set():
        try:
            return channel.get(timeout=0.1)
        except queue.Empty:
            continue
    return None


class Failure:
    """Sent down a queue in place of data when the sending thread failed."""

    def __init__(self, error: BaseException):
        self.error = error


class EmbedRun:
    """One process's embedding of its lines into `target` (OUTPUT, or its shard): reader thread -> model -> writer
    thread, part files, merge."""

    def __init__(self, args: argparse.Namespace, settings: dict, target: Path, rank: int, world_size: int):
        self.args = args
        self.settings = settings
        self.target = target
        self.rank = rank
        self.world_size = world_size
        self.partial = partial_folder(target)
        self.stop = threading.Event()
        self.words_embedded = 0
        self.sentences_embedded = 0
        self.writer_error: BaseException | None = None

    def prepare(self) -> ExistingVectors:
        """Sets up the `.partial` folder (fresh, or resumed) and scans what earlier runs wrote."""
        args = self.args
        if args.overwrite:
            remove_partial(self.partial)
        resumed = [self.target] if self.target.exists() else []
        output = Path(args.output)
        if self.target != output and output.exists():
            resumed.append(output)
        if self.partial.exists():
            if not (self.partial / RUN_FILE).is_file():
                raise EmbedError(f"{self.partial} exists but was not made by elmo-hf embed; move it away.")
            run_settings = json.loads((self.partial / RUN_FILE).read_text())
            if run_settings != self.settings:
                raise EmbedError(
                    f"{self.partial} holds an interrupted run with other settings ({run_settings}); rerun with those "
                    "settings and --resume, or use --overwrite to start over."
                )
            resumed += sorted(self.partial.glob("part-*.hdf5"))
        existing = scan_existing(resumed, self.settings) if args.resume else ExistingVectors({}, {}, {})
        if self.partial.exists():
            for path in self.partial.glob("*.tmp"):  # a part or merge an interruption cut short
                path.unlink()
        else:
            self.partial.mkdir()
            (self.partial / RUN_FILE).write_text(json.dumps(self.settings))
        return existing

    def run(self, model, tokenizer, mix, device: torch.device, num_lines: int | None) -> float:
        """Embeds this process's lines into `target`; returns the seconds spent from the first line to the last
        write (model loading and the final merge excluded)."""
        from tqdm import tqdm

        args = self.args
        existing = self.prepare()
        config = model.config
        num_layers, dim = config.num_layers + 1, 2 * config.projection_dim
        writer = PartWriter(self.partial, self.settings, args.part_size)
        encoder = CharIdEncoder(tokenizer.max_characters_per_token)
        batches: queue.Queue = queue.Queue(QUEUE_BATCHES)
        results: queue.Queue = queue.Queue(QUEUE_BATCHES)
        total = None if num_lines is None else len(range(self.rank, num_lines, self.world_size))
        progress = tqdm(
            total=total,
            unit="sent",
            desc=f"embed rank {self.rank}" if self.world_size > 1 else "embed",
            disable=args.no_progress,
            dynamic_ncols=True,
        )
        start = time.perf_counter()

        def sentences() -> Iterator[Sentence]:
            """This process's lines; those complete from an earlier run and empty ones go straight to the writer."""
            with contextlib.ExitStack() as stack:
                stream = sys.stdin.buffer if args.input == "-" else stack.enter_context(open(args.input, "rb"))
                name = "standard input" if args.input == "-" else args.input
                for key, text in read_lines(stream, name, args.errors):
                    if self.stop.is_set():
                        return
                    if key % self.world_size != self.rank:
                        continue
                    words = text.split() if args.split == "whitespace" else tokenizer.tokenize(text)
                    sentence = Sentence(key, text, words)
                    if key in existing.files:
                        if existing.sentences.get(key, text) != text:
                            raise EmbedError(
                                f"line {key + 1} of {name} differs from the sentence {existing.files[key]} holds for "
                                "it: the input changed since that run; use --overwrite to start over."
                            )
                        if existing.shapes[key] == expected_shape(self.settings, len(words), num_layers, dim):
                            put(results, ("keep", sentence, existing.files[key]), self.stop)
                            continue
                    if not words:
                        put(results, ("empty", sentence, None), self.stop)
                        continue
                    yield sentence

        def read():
            try:
                for batch in length_grouped_batches(sentences(), args.batch_size, args.max_tokens):
                    put(batches, (batch, *encoder([sentence.words for sentence in batch])), self.stop)
                put(batches, None, self.stop)
            except BaseException as error:  # handed to the main thread, which reports it
                put(batches, Failure(error), self.stop)

        def write():
            empty = torch.zeros(expected_shape(self.settings, 0, num_layers, dim), dtype=OUTPUT_DTYPES[args.dtype])
            try:
                while (item := get(results, self.stop)) is not None:
                    kind, sentences_, payload = item
                    if kind == "keep":
                        writer.keep(sentences_, payload)
                        progress.update(1)
                        continue
                    if kind == "empty":
                        writer.write(sentences_, empty.numpy())
                        progress.update(1)
                        continue
                    for row, sentence in enumerate(sentences_):
                        length = len(sentence.words)
                        writer.write(sentence, payload[row, :, :length] if kind == "all" else payload[row, :length])
                        self.words_embedded += length
                    self.sentences_embedded += len(sentences_)
                    progress.update(len(sentences_))
                    rate = self.words_embedded / max(time.perf_counter() - start, 1e-9)
                    progress.set_postfix_str(f"{rate:,.0f} words/s", refresh=False)
                writer.close_part()  # also when stopped: what it holds is complete
            except BaseException as error:  # handed to the main thread, which reports it
                self.writer_error = error
                self.stop.set()

        reader_thread = threading.Thread(target=read, name="elmo-embed-reader", daemon=True)
        writer_thread = threading.Thread(target=write, name="elmo-embed-writer", daemon=True)
        reader_thread.start()
        writer_thread.start()
        try:
            with torch.inference_mode():
                while (item := get(batches, self.stop)) is not None:
                    if isinstance(item, Failure):
                        raise item.error
                    if self.writer_error is not None:
                        break
                    batch, input_ids, attention_mask = item
                    vectors = self.vectors(model, mix, input_ids.to(device), attention_mask.to(device), batch)
                    kind = "all" if self.settings["layers"] == "all" else "rows"
                    put(results, (kind, batch, vectors), self.stop)
            put(results, None, self.stop)
            writer_thread.join()
        except BaseException:
            self.stop.set()
            writer_thread.join(timeout=10)
            raise
        finally:
            progress.close()
        if self.writer_error is not None:
            raise self.writer_error
        seconds = time.perf_counter() - start
        merge_into(self.target, writer.sources, writer.index, self.settings, self.partial)
        shutil.rmtree(self.partial)
        return seconds

    def vectors(self, model, mix, input_ids, attention_mask, batch: list[Sentence]) -> np.ndarray:
        """The requested layers of a batch as a float32 or float16 array: `(batch_size, num_layers + 1,
        sequence_length, dim)` for `all`, `(batch_size, sequence_length, dim)` otherwise."""
        outputs = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        layers = self.settings["layers"]
        if layers == "all":
            selected = torch.stack(outputs.hidden_states, dim=1)
        elif layers == "top":
            selected = outputs.last_hidden_state
        else:
            selected = mix(outputs.hidden_states, attention_mask)
        selected = selected.to(OUTPUT_DTYPES[self.args.dtype])
        if not bool(torch.isfinite(selected).all()):
            keys = ", ".join(str(sentence.key + 1) for sentence in batch)
            hint = "; check the model"
            if self.args.dtype == "float16":
                hint = " beyond float16's range; use --dtype float32"
            raise EmbedError(f"non-finite vectors for a sentence among lines {keys}{hint}.")
        return selected.cpu().numpy()


def merge_shards(output: Path, world_size: int | None = None) -> int:
    """Merges `OUTPUT.shard-R-of-N` (all N of them) into OUTPUT, then removes them; returns the number of shards."""
    shards = sorted(output.parent.glob(f"{output.name}.shard-*-of-*"))
    counts = {path.name.rsplit("-of-", 1)[1] for path in shards}
    if world_size is None:
        if len(counts) != 1:
            found = ", ".join(path.name for path in shards) or "none"
            raise EmbedError(
                f"expected the shards of one run, {output.name}.shard-R-of-N for R = 0..N-1; found {found}."
            )
        world_size = int(counts.pop())
    expected = [shard_path(output, rank, world_size) for rank in range(world_size)]
    missing = [path.name for path in expected if not path.is_file()]
    if missing:
        raise EmbedError(f"missing shards: {', '.join(missing)}; finish those processes' runs (--resume) first.")
    settings, sources, index = None, {}, {}
    for path in expected:
        with h5py.File(path, "r") as file:
            found = read_settings(file, path)
            if settings is not None and found != settings:
                raise EmbedError(f"{path} was written with other settings than {expected[0]}; rerun it.")
            settings = found
            sources.update({int(name): path for name in file if name.isdigit()})
            for sentence, key in read_index(file).items():
                if int(key) > index.get(sentence, -1):
                    index[sentence] = int(key)
    staging = partial_folder(output)
    remove_partial(staging)
    staging.mkdir()
    (staging / RUN_FILE).write_text(json.dumps(settings))
    merge_into(output, sources, index, settings, staging)
    shutil.rmtree(staging)
    for path in expected:
        path.unlink()
    return world_size


def mix_for(args: argparse.Namespace, num_layers: int):
    """The `ElmoScalarMix` of `--layers average|mix`, or None."""
    from ..modeling_elmo import ElmoScalarMix

    if args.layers == "average":
        return ElmoScalarMix.average(num_layers)
    if args.layers == "mix":
        if len(args.mix_weights) != num_layers:
            raise EmbedError(
                f"--mix-weights needs {num_layers} weights (num_layers + 1 of this model), got "
                f"{len(args.mix_weights)}."
            )
        try:
            return ElmoScalarMix.from_weights(args.mix_weights, gamma=args.gamma)
        except ValueError as error:
            raise EmbedError(f"--mix-weights: {error}") from None
    return None


def check_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser):
    """Errors in the arguments alone, before any file or model is touched."""
    if args.resume and args.overwrite:
        parser.error("--resume and --overwrite exclude each other.")
    if args.layers == "mix" and args.mix_weights is None:
        parser.error("--layers mix needs --mix-weights w0,w1,... (one weight per layer, summing to 1).")
    if args.layers != "mix" and (args.mix_weights is not None or args.gamma != 1.0):
        parser.error("--mix-weights and --gamma apply to --layers mix only.")
    if args.batch_size < 1 or (args.max_tokens is not None and args.max_tokens < 1) or args.part_size < 1:
        parser.error("--batch-size, --max-tokens and --part-size must be positive.")


def check_paths(args: argparse.Namespace, targets: list[Path]):
    """Refuses a missing input, an output that is the input, and existing results without --resume/--overwrite."""
    output = Path(args.output)
    if args.input != "-":
        source = Path(args.input)
        if not source.is_file():
            raise EmbedError(f"input file not found: {source}" + (" (a folder)" if source.is_dir() else ""))
        if output.exists() and output.resolve() == source.resolve():
            raise EmbedError(f"OUTPUT {output} is the input file; give another output path.")
    if not output.parent.is_dir():
        raise EmbedError(f"folder {output.parent} of OUTPUT does not exist; create it first.")
    if output.is_dir():
        raise EmbedError(f"OUTPUT {output} is a folder; give a file path such as {output / 'vectors.hdf5'}.")
    if args.resume or args.overwrite:
        return
    for path in [output, *targets]:
        if path.exists():
            raise EmbedError(f"{path} exists; pass --resume to add what it lacks, or --overwrite to replace it.")
        if partial_folder(path).exists():
            raise EmbedError(
                f"{partial_folder(path)} holds an interrupted run; pass --resume to continue it, or --overwrite to "
                "start over."
            )


def load_model(name: str, model_dtype: str, device: torch.device):
    """The biLM and tokenizer of an ELMo folder or Hub id (a task head's folder gives its biLM); refuses others."""
    from transformers import PreTrainedConfig
    from transformers.utils import logging

    from .. import ElmoModel, ElmoTokenizer

    try:
        config_dict, _ = PreTrainedConfig.get_config_dict(name)
    except (OSError, ValueError) as error:
        raise EmbedError(
            f"cannot load a model from {name!r} ({str(error).splitlines()[0]}); give a folder made by "
            "`elmo-hf convert` or a Hub id of an ELMo model."
        ) from None
    if config_dict.get("model_type") != "elmo":
        model_type = config_dict.get("model_type") or "model without model_type"
        raise EmbedError(
            f"{name!r} holds a {model_type!r} model, not ELMo; give a folder made by `elmo-hf convert` or a Hub id "
            "of an ELMo model."
        )
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # a head's folder loads into ElmoModel with its head weights unused, as intended
    try:
        model = ElmoModel.from_pretrained(name, dtype=MODEL_DTYPES[model_dtype]).eval().to(device)
        tokenizer = ElmoTokenizer.from_pretrained(name)
    finally:
        logging.set_verbosity(verbosity)
    return model, tokenizer


def distributed_rank() -> tuple[int, int, int]:
    """(rank, world size, local rank) from the variables torchrun and accelerate set; (0, 1, 0) otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world_size < 1 or not 0 <= rank < world_size:
        raise EmbedError(f"RANK={rank} and WORLD_SIZE={world_size} are inconsistent; launch with torchrun.")
    return rank, world_size, int(os.environ.get("LOCAL_RANK", str(rank)))


def embed(args: argparse.Namespace) -> int:
    rank, world_size, local_rank = distributed_rank()
    output = Path(args.output)
    target = shard_path(output, rank, world_size) if world_size > 1 else output
    check_paths(args, [target])
    num_lines = count_lines(Path(args.input), args.errors) if args.input != "-" else None
    if args.device is None:
        device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    model, tokenizer = load_model(args.model, args.model_dtype, device)
    mix = mix_for(args, model.config.num_layers + 1)
    mix = mix.to(device) if mix is not None else None
    settings = {
        "model": args.model,
        "layers": args.layers,
        "mix_weights": args.mix_weights,
        "gamma": args.gamma,
        "dtype": args.dtype,
        "split": args.split,
        "model_dtype": args.model_dtype,
    }
    group = world_size > 1 and "MASTER_ADDR" in os.environ and not args.no_merge
    if group:
        torch.distributed.init_process_group("gloo", timeout=DISTRIBUTED_TIMEOUT)
    try:
        embedding = EmbedRun(args, settings, target, rank, world_size)
        try:
            seconds = embedding.run(model, tokenizer, mix, device, num_lines)
        except EmbedError as error:
            partial = embedding.partial
            if partial.exists() and not any(partial.glob("part-*.hdf5")):
                shutil.rmtree(partial)  # nothing done worth keeping
            elif partial.exists():
                raise EmbedError(f"{error} (The completed parts are kept in {partial} for --resume.)") from None
            raise
        words, sentences = embedding.words_embedded, embedding.sentences_embedded
        print(
            f"{target}: embedded {sentences:,} sentences, {words:,} words in {seconds:.1f} s "
            f"({words / max(seconds, 1e-9):,.0f} words/s, {sentences / max(seconds, 1e-9):,.1f} sentences/s)",
            file=sys.stderr,
        )
        if group:
            torch.distributed.barrier()
            if rank == 0:
                merge_shards(output, world_size)
                print(f"merged {world_size} shards into {output}", file=sys.stderr)
            torch.distributed.barrier()
        elif world_size > 1:
            print(f"wrote shard {target}; when all are written: elmo-hf merge-shards {output}", file=sys.stderr)
    finally:
        if group:
            torch.distributed.destroy_process_group()
    return 0
