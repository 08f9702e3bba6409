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
"""ELMo vectors for a corpus, one sentence a line, into an HDF5 file laid out as `allennlp elmo`'s: `embed_corpus` and
`merge_shards`, which `elmo-hf embed` and `elmo-hf merge-shards` wrap.

    embed_corpus("sentences.txt", "vectors.hdf5", model="elmo-en-mini")             # all layers, float32
    embed_corpus(sys.stdin.buffer, "top.hdf5", split="default", layers="top", dtype="float16")

The file holds one dataset per input line, named by its 0-based line number: `(num_layers + 1, words, dim)` with
`layers="all"`, `(words, dim)` otherwise (an empty line gives 0 words), and `sentence_to_index`, a one-element string
dataset holding the JSON object `{sentence: line number}` (the last line of a repeated sentence), as `allennlp elmo`
writes it. The run's identity is stored with it: the root attribute `elmo_hf_settings` (the settings and a
fingerprint of the model's config and weights), `elmo_hf_input` (a hash of the whole input) and, on every line's
dataset, `elmo_hf_line_sha256` (a hash of that line's text). `resume=True` keeps a line's vectors only where the
settings, the model and that line's text are the same, and embeds every other line again.

Input is streamed: a reader thread splits and encodes lines and groups them by length into batches, the model runs in
the main thread, and a writer thread writes the vectors, so that reading and writing overlap the model's compute.
Where the machine has cores to spare (`default_writers`, or `writers=N`), the writer thread hands the vectors to
writer processes that write the part files (`parts.py`), batches taking turns: h5py holds Python's lock through every
HDF5 call, which in the model's process leaves the model's thread too little of it at a GPU's rates.
Vectors go to part files in `OUTPUT.partial/` (each written under a temporary name, read back and checked, then
renamed), which are merged into a temporary file, checked the same way and renamed to OUTPUT at the end: OUTPUT is
never partly written, and an interrupted or failed run loses at most one part (`part_size` sentences), which
`resume=True` then completes. A lock on `OUTPUT.partial/lock` refuses a second run on the same output.

Under `torchrun` or another launcher that sets `RANK` and `WORLD_SIZE`, process `rank` embeds the lines whose number
is `rank` modulo the number of processes into `OUTPUT.shard-RANK-of-N`; with a process group available (`MASTER_ADDR`
set) rank 0 merges the shards into OUTPUT when all are written, otherwise `merge_shards(OUTPUT)` does. Every process
reads the input file itself, so standard input is refused under several processes.
"""

import contextlib
import datetime
import fcntl
import glob
import hashlib
import io
import itertools
import json
import math
import numbers
import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

import h5py
import numpy as np
import torch

from ..conversion.convert import check_output_file
from ..cpu_kernels import available_cores
from ..errors import ElmoInputError, ElmoRunError, check_positive_integer, check_threads, is_whole
from ..packaged_elmo import DEFAULT_MODEL, resolve_model_name
from .data import DECODING_ERRORS, decode_line, device_memory, through_link
from .parts import (
    LINE_ATTR, SETTINGS_ATTR, GuardedFile, Part, ReadBackError, WriterError, WriterProcess, fsync_folder,
    read_index, verify_written, write_index,
)

INPUT_ATTR = "elmo_hf_input"  # root attribute: {"sha256": hash of the input's bytes, "lines": its line count}
PARTIAL_SUFFIX = ".partial"
RUN_FILE = "run.json"  # marks a `.partial` folder as ours, with the settings of its run
LOCK_FILE = "lock"  # in a `.partial` folder: held (flock) by the run writing it
MERGE_TEMPORARY = "merged.hdf5.tmp"
MISSING_SHOWN = 10  # missing shards merge-shards names
PART_SECONDS = 60.0  # a part is closed after this long even if it holds fewer than `part_size` sentences
POOL_BATCHES = 32  # lines read ahead and sorted by length, in batches: longer pools pad less, hold more in memory
QUEUE_BATCHES = 4  # batches waiting between threads
# `default_writers`: a writer process writes about 60,000 words a second of the top layer in float16 (on a 2-vCPU EPYC,
# 25-word lines), and a GPU embeds 150,000 or more
CORES_PER_WRITER, MOST_WRITERS = 2, 4
OUTPUT_DTYPES = {"float32": torch.float32, "float16": torch.float16}
MODEL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LAYER_CHOICES = ("all", "top", "average", "mix")
SPLIT_CHOICES = ("whitespace", "default")
DISTRIBUTED_TIMEOUT = datetime.timedelta(days=7)  # ranks wait at a barrier for the slowest one


class EmbedError(ElmoInputError):
    """Input or options that `embed_corpus` / `merge_shards` cannot use; the message says what is wrong and what to
    do. Nothing was written (exit status 2)."""


class EmbedRunError(ElmoRunError):
    """A failure while embedding or merging (a full disk, a write error, a failing model); the completed parts are
    kept for `resume=True`, as the message says (exit status 1)."""


@dataclass
class Sentence:
    """One input line: its key (0-based line number), stripped text and words."""

    key: int
    text: str
    words: list[str]


@dataclass
class EmbedSummary:
    """What a call of `embed_corpus` did: `target` is OUTPUT, or this process's shard under several processes."""

    target: Path
    sentences: int  # sentences embedded by this run (not those kept from an earlier one)
    words: int
    seconds: float  # from the first line read to the last written (model loading and the merge excluded)
    rank: int
    world_size: int
    merged: bool  # OUTPUT holds every line (one process, or rank 0 merged the shards)
    # CPU seconds of the run's "reader" and "writer" threads and of its "main" thread (the model and the gathering of
    # the vectors; torch's own compute threads not counted) from the first line read to the last written: one near
    # `seconds` is what bounds the run; and of its "writer processes" together (0 without).
    thread_seconds: dict[str, float] = field(default_factory=dict)


def shard_path(output: Path, rank: int, world_size: int) -> Path:
    """The shard of `output` that process `rank` of `world_size` writes, beside it (`with_name` would raise for a
    path without a name, `.` or `/`, which `check_paths` refuses by name)."""
    return output.parent / f"{output.name}.shard-{rank}-of-{world_size}"


def partial_folder(target: Path) -> Path:
    """The folder of `target`'s parts while it is written, beside it (any path, as `shard_path`)."""
    return target.parent / (target.name + PARTIAL_SUFFIX)


def line_hash(text: str) -> str:
    """The identity of a line's text, stored on its dataset."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def model_fingerprint(model: torch.nn.Module) -> str:
    """A hash of the model's config (without its path and version) and of every weight's name, dtype, shape and
    bytes: two folders holding the same model have the same fingerprint, a re-converted or retrained one another."""
    config = {
        name: value
        for name, value in model.config.to_dict().items()
        if name not in ("_name_or_path", "transformers_version", "dtype")
    }
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().reshape(-1).contiguous().cpu()
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()


def describe(error: BaseException) -> str:
    """The first line of an error's message (an OSError's strerror where it has one)."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return (str(error).splitlines() or [type(error).__name__])[0]


def read_lines(stream: BinaryIO, name: str, errors: str) -> Iterator[tuple[int, bytes, str]]:
    """(key, raw bytes, stripped line) for every line of a binary stream, decoded as UTF-8 (`decode_line`)."""
    for key, raw in enumerate(stream):
        yield key, raw, decode_line(raw, key + 1, name, errors, EmbedError).strip()


def count_lines(path: Path, errors: str) -> int:
    """Lines of a file (for the progress bar); also finds undecodable bytes before any work starts."""
    with path.open("rb") as stream:
        return sum(1 for _ in read_lines(stream, str(path), errors))


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
    """Complete datasets already written (by an earlier run) that a resumed run may keep: key -> file, the shape of
    each, and the hash of the line each was computed from."""

    files: dict[int, Path]
    shapes: dict[int, tuple[int, ...]]
    hashes: dict[int, str]


def read_settings(file: h5py.File, path: Path) -> dict:
    if SETTINGS_ATTR not in file.attrs:
        raise EmbedError(
            f"{path} was not written by elmo-hf embed (no {SETTINGS_ATTR}); use --overwrite to replace it."
        )
    return json.loads(file.attrs[SETTINGS_ATTR])


def settings_difference(found: dict, settings: dict) -> str:
    """The settings that differ, as `name=value found` (the model as `model (its config or weights)`)."""
    names = sorted(set(found) | set(settings))
    return ", ".join(
        "model (its config or weights)" if name == "model" else f"{name}={found.get(name)!r}"
        for name in names
        if found.get(name) != settings.get(name)
    )


def scan_existing(paths: list[Path], settings: dict) -> ExistingVectors:
    """Datasets of the files a resumed run starts from, later files overriding earlier ones; refuses a file written
    with other settings or by another model."""
    existing = ExistingVectors({}, {}, {})
    for path in paths:
        try:
            with h5py.File(path, "r") as file:
                found = read_settings(file, path)
                if found != settings:
                    raise EmbedError(
                        f"{path} was written with other settings ({settings_difference(found, settings)}); rerun "
                        "with those settings and that model, or use --overwrite to start over."
                    )
                for name, dataset in file.items():
                    if not name.isdigit():
                        continue
                    if LINE_ATTR not in dataset.attrs:
                        raise EmbedError(
                            f"{path} was written by an older elmo-hf, without line hashes; use --overwrite."
                        )
                    existing.files[int(name)] = path
                    existing.shapes[int(name)] = dataset.shape
                    existing.hashes[int(name)] = str(dataset.attrs[LINE_ATTR])
        except (OSError, json.JSONDecodeError) as error:
            hint = (
                "delete that part and rerun with --resume (its lines are embedded again)"
                if path.parent.name.endswith(PARTIAL_SUFFIX)
                else "use --overwrite to start over"
            )
            raise EmbedError(f"cannot read {path} ({describe(error)}); {hint}.") from None
    return existing


def expected_shape(settings: dict, num_words: int, num_layers: int, dim: int) -> tuple[int, ...]:
    return (num_layers, num_words, dim) if settings["layers"] == "all" else (num_words, dim)


def index_last(index: dict[str, int], sentence: Sentence) -> None:
    """`index` {sentence: key} takes `sentence`'s key where it is the last so far of its text (allennlp's index keeps a
    repeated sentence's last line)."""
    if sentence.key > index.get(sentence.text, -1):
        index[sentence.text] = sentence.key


@dataclass
class OpenPart:
    """A part being written: where it is written (`parts.Part` in this process, or a `parts.WriterProcess`), its
    path, its index {sentence: last key} and when it was opened."""

    writer: Part | WriterProcess
    path: Path
    index: dict[str, int] = field(default_factory=dict)
    lines: int = 0
    opened: float = field(default_factory=time.monotonic)


class PartWriter:
    """Writes vectors into part files `part-NNNNNN.hdf5` of a `.partial` folder (`parts.Part`: each written as
    `*.tmp`, read back and checked once closed, then renamed, so a part that exists is complete), in this process, or
    in `processes` writer processes (`parts.WriterProcess`) that each write a part of their own, batches taking turns.
    Also keeps the index {sentence: last key} and where every key of the final file will come from."""

    def __init__(self, folder: Path, settings: dict, part_size: int, processes: int = 0):
        self.folder = folder
        self.settings = json.dumps(settings)
        self.part_size = part_size
        self.number = max((int(path.stem.split("-")[1]) + 1 for path in folder.glob("part-*.hdf5")), default=0)
        self.processes: list[WriterProcess] = []
        try:
            for _ in range(processes):
                self.processes.append(WriterProcess())
        except BaseException:  # one could not start: the others end too
            for process in self.processes:
                with contextlib.suppress(Exception):
                    process.stop()
            raise
        self.open: list[OpenPart | None] = [None] * max(1, processes)
        self.turn = 0  # the writer of the next batch
        self.index: dict[str, int] = {}
        self.sources: dict[int, Path] = {}
        self.completed = 0  # parts this run closed (renamed into place, or being renamed by a writer process)

    def keep(self, sentence: Sentence, source: Path):
        """A sentence whose vectors an earlier run wrote into `source`."""
        index_last(self.index, sentence)
        self.sources[sentence.key] = source

    def write(self, sentences: list[Sentence], vectors: Sequence[np.ndarray]):
        """A batch's vectors, into the part of the writer whose turn it is."""
        slot, self.turn = self.turn, (self.turn + 1) % len(self.open)
        lines = []
        for sentence, array in zip(sentences, vectors):
            if self.open[slot] is None:
                path = self.folder / f"part-{self.number:06d}.hdf5"
                self.number += 1
                if self.processes:
                    self.processes[slot].open(path, self.settings)
                    self.open[slot] = OpenPart(self.processes[slot], path)
                else:
                    self.open[slot] = OpenPart(Part(path, self.settings), path)
            part = self.open[slot]
            lines.append((sentence.key, array, line_hash(sentence.text)))
            part.lines += 1
            index_last(part.index, sentence)
            index_last(self.index, sentence)
            self.sources[sentence.key] = part.path
            if part.lines >= self.part_size or time.monotonic() - part.opened > PART_SECONDS:
                part.writer.add(lines)
                lines = []
                self.close_part(slot)
        if lines:
            self.open[slot].writer.add(lines)

    def close_part(self, slot: int):
        """Closes writer `slot`'s part: it is read back and renamed into place (by the writer process, after this
        returns, where there is one)."""
        part, self.open[slot] = self.open[slot], None
        part.writer.close(part.index)
        self.completed += 1

    def close(self):
        """Closes every part and ends the writer processes, raising the first error any reports."""
        try:
            for slot, part in enumerate(self.open):
                if part is not None:
                    self.close_part(slot)
            for process in self.processes:
                process.stop()
        except BaseException:
            self.abort()
            raise

    def abort(self):
        """Drops the open parts after a failure (their sentences are embedded again on --resume) and ends the writer
        processes."""
        dropped = {part.path for part in self.open if part is not None}
        for part in self.open:
            if part is not None:
                part.writer.abort()
        self.open = [None] * len(self.open)
        self.sources = {key: path for key, path in self.sources.items() if path not in dropped}
        for process in self.processes:
            process.abort()
            with contextlib.suppress(Exception):
                process.stop()

    def cpu_seconds(self) -> float:
        """CPU seconds of the writer processes that have ended."""
        return sum(process.cpu_seconds for process in self.processes)


def copy_dataset(source: h5py.File, target: h5py.File, name: bytes) -> None:
    """Copies a line's dataset, its line hash included, inside HDF5 (no array or attribute passes through Python)."""
    h5py.h5o.copy(source.id, name, target.id, name)


def merge_into(
    target: Path, sources: dict[int, Path], index: dict[str, int], settings: dict, input_identity: dict, staging: Path
):
    """Copies every key's dataset from its source file into `staging/merged.hdf5.tmp` with the index, settings and
    input identity, reads it back, then renames it to `target` (replacing it): `target` is complete or untouched.
    Raises EmbedRunError naming the file that could not be read or written."""
    temporary = staging / MERGE_TEMPORARY
    by_file: dict[Path, list[int]] = {}
    for key, path in sources.items():
        by_file.setdefault(path, []).append(key)
    shapes: dict[int, tuple[int, ...]] = {}
    guard = None
    try:
        guard = GuardedFile(temporary)
        with h5py.File(guard, "w") as merged:
            merged.attrs[SETTINGS_ATTR] = json.dumps(settings)
            merged.attrs[INPUT_ATTR] = json.dumps(input_identity)
            for path, keys in by_file.items():
                try:
                    source = h5py.File(path, "r")
                except OSError as error:
                    raise EmbedRunError(f"cannot read {path} ({describe(error)})") from None
                with source:
                    for key in sorted(keys):
                        name = str(key).encode()
                        try:
                            shapes[key] = h5py.h5d.open(source.id, name).shape
                        except (OSError, KeyError) as error:
                            raise EmbedRunError(f"cannot read line {key}'s vectors in {path} ({describe(error)})")
                        copy_dataset(source, merged, name)
                        guard.check()
            write_index(merged, index)
        guard.close()
        verify_written(temporary, shapes, index)
        os.replace(temporary, target)
        fsync_folder(target.parent)
    except BaseException as error:
        cause = guard.error if guard is not None and guard.error is not None else error
        if guard is not None:
            with contextlib.suppress(OSError):
                guard.close()
        with contextlib.suppress(OSError):
            temporary.unlink()
        if isinstance(cause, OSError) or (isinstance(cause, RuntimeError) and not isinstance(cause, ElmoRunError)):
            raise EmbedRunError(f"cannot write {target} ({describe(cause)})") from None
        if isinstance(cause, ReadBackError):
            raise EmbedRunError(str(cause)) from None
        raise


def lock_held(folder: Path) -> bool:
    """Whether another process holds the lock of a `.partial` folder (is writing into it now)."""
    try:
        handle = open(folder / LOCK_FILE, "rb")
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:  # a file system without locks: `take_lock` says so
            return False
    return False


def take_lock(folder: Path, target: Path) -> IO[bytes]:
    """Takes the lock of a `.partial` folder for this process (released when the returned file is closed); refuses
    when another process holds it."""
    handle = open(folder / LOCK_FILE, "ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise EmbedError(
            f"another elmo-hf run is writing {target} now (it holds {folder / LOCK_FILE}); wait for it to end, or "
            "stop it and rerun with --resume."
        ) from None
    except OSError as error:  # ENOLCK, ENOSYS: no run could tell whether another writes the same output
        handle.close()
        raise EmbedError(
            f"cannot lock {folder / LOCK_FILE} ({describe(error)}): the file system of {target} does not support "
            "file locks; write OUTPUT on a local file system, then move it."
        ) from None
    return handle


def make_partial(folder: Path, target: Path, settings: dict) -> IO[bytes]:
    """Creates a `.partial` folder with its run file, locked by this process."""
    try:
        folder.mkdir()
    except FileExistsError:
        raise EmbedError(f"another elmo-hf run just created {folder}; wait for it to end.") from None
    except OSError as error:
        raise EmbedError(
            f"cannot create {folder} ({describe(error)}); OUTPUT's folder {target.parent} must be writable."
        ) from None
    try:
        lock = take_lock(folder, target)
        (folder / RUN_FILE).write_text(json.dumps(settings))
    except (OSError, EmbedError) as error:
        shutil.rmtree(folder, ignore_errors=True)
        if isinstance(error, EmbedError):
            raise
        raise EmbedRunError(f"cannot write in {folder} ({describe(error)}); nothing was written.") from None
    return lock


def delete_partial(folder: Path):
    """Deletes a `.partial` folder of ours, its run file last: a deletion cut short (a kill) leaves a folder that
    holds the run file, which a rerun takes as ours, or an empty one (`partial_exists`)."""
    for path in folder.iterdir():
        if path.name != RUN_FILE:
            path.unlink()
    (folder / RUN_FILE).unlink(missing_ok=True)
    folder.rmdir()


def partial_exists(folder: Path) -> bool:
    """Whether a `.partial` folder exists; an empty one, all that a deletion cut short (`delete_partial`) can leave
    without its run file, is removed first."""
    with contextlib.suppress(OSError):
        folder.rmdir()  # only where it is empty
    return folder.exists()


def remove_partial(folder: Path):
    """Removes a `.partial` folder, only if it is ours (it holds run.json)."""
    if not partial_exists(folder):
        return
    if not (folder / RUN_FILE).is_file():
        raise EmbedError(f"{folder} exists but was not made by elmo-hf embed; move it away.")
    delete_partial(folder)


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


class PendingVectors:
    """A batch's vectors on their way to the host (`gather_vectors`): `result()` waits for the copy, checks the
    vectors and cuts them into one array per sentence. Until then the host is free to queue the next batch, so that
    the device computes it while this one is copied and written.

    Args:
        host: `(sum of planes * words, dim)` the vectors, sentence after sentence (each sentence's planes in turn).
        finite: a boolean scalar on the host, whether every vector is finite.
        copied: a CUDA event recorded after both copies, or None where they are done.
        shapes: each sentence's array shape, `(planes, words, dim)` or `(words, dim)`.
    """

    def __init__(
        self, host: torch.Tensor, finite: torch.Tensor, copied: torch.cuda.Event | None, shapes: list[tuple[int, ...]]
    ):
        self.host, self.finite, self.copied, self.shapes = host, finite, copied, shapes

    def result(self) -> list[np.ndarray]:
        """One array per sentence, `(planes, words, dim)` or `(words, dim)`, each a contiguous view of the one copy;
        raises NonFiniteVectors where a vector is not finite in the dtype asked for."""
        if self.copied is not None:
            self.copied.synchronize()
        if not bool(self.finite):
            raise NonFiniteVectors("non-finite vectors")
        host, arrays, start = self.host.numpy(), [], 0
        for shape in self.shapes:
            rows = math.prod(shape[:-1])
            arrays.append(host[start : start + rows].reshape(shape))
            start += rows
        return arrays


@dataclass(frozen=True)
class EmbedJob:
    """What one process reads and how it batches and writes (the options of `embed_corpus` that are not settings)."""

    source: Path | BinaryIO  # a file, or an open binary stream
    source_name: str
    output: Path
    errors: str
    batch_size: int
    max_tokens: int | None
    part_size: int
    writers: int  # writer processes (0: the writer thread writes)
    resume: bool
    overwrite: bool
    progress: bool


class EmbedRun:
    """One process's embedding of its lines into `target` (OUTPUT, or its shard): reader thread -> model -> writer
    thread, part files, merge."""

    def __init__(self, job: EmbedJob, settings: dict, target: Path, rank: int, world_size: int):
        self.job = job
        self.settings = settings
        self.target = target
        self.rank = rank
        self.world_size = world_size
        self.partial = partial_folder(target)
        self.lock: IO[bytes] | None = None  # held while this run owns `partial`
        self.stop = threading.Event()
        self.words_embedded = 0
        self.sentences_embedded = 0
        self.writer_error: BaseException | None = None
        self.failed = False  # the run failed (not interrupted): the writer drops its open part rather than keep it
        self.input_digest = hashlib.sha256()
        self.input_lines = 0
        self.thread_seconds: dict[str, float] = {}  # `EmbedSummary.thread_seconds`
        self.device_memory: int | None = None  # bytes of the run's device (`device_memory`), read once in `run`

    def prepare(self) -> ExistingVectors:
        """Takes the `.partial` folder (fresh, or resumed) under this process's lock and scans what earlier runs
        wrote."""
        job = self.job
        if partial_exists(self.partial):
            if not (self.partial / RUN_FILE).is_file():
                raise EmbedError(f"{self.partial} exists but was not made by elmo-hf embed; move it away.")
            self.lock = take_lock(self.partial, self.target)
            if job.overwrite:
                delete_partial(self.partial)
                self.lock.close()
                self.lock = None
        if self.lock is None:
            self.lock = make_partial(self.partial, self.target, self.settings)
            resumed_parts = []
        else:
            try:
                run_settings = json.loads((self.partial / RUN_FILE).read_text())
            except (OSError, json.JSONDecodeError) as error:
                raise EmbedError(
                    f"{self.partial / RUN_FILE} is damaged ({describe(error)}); use --overwrite to start over."
                ) from None
            if run_settings != self.settings:
                raise EmbedError(
                    f"{self.partial} holds an interrupted run with other settings "
                    f"({settings_difference(run_settings, self.settings)}); rerun with those settings and --resume, "
                    "or use --overwrite to start over."
                )
            for path in self.partial.glob("*.tmp"):  # a part or merge an interruption cut short
                path.unlink()
            resumed_parts = sorted(self.partial.glob("part-*.hdf5"))
        if not job.resume:
            return ExistingVectors({}, {}, {})
        resumed = [self.target] if self.target.exists() else []
        if self.target != job.output and job.output.exists():
            resumed.append(job.output)
        return scan_existing(resumed + resumed_parts, self.settings)

    def release(self) -> int:
        """After a failure: removes the `.partial` folder when it holds no completed part (so that a plain rerun is
        not refused) and releases the lock; returns the number of completed parts kept."""
        if self.lock is None:
            return 0  # the folder is another run's, or was never made
        kept = len(list(self.partial.glob("part-*.hdf5"))) if self.partial.exists() else 0
        if not kept:
            with contextlib.suppress(OSError):
                delete_partial(self.partial)
        self.lock.close()
        self.lock = None
        return kept

    def run(self, model, tokenizer, mix, device: torch.device, num_lines: int | None) -> float:
        """Embeds this process's lines into `target`; returns the seconds spent from the first line to the last
        write (model loading and the final merge excluded)."""
        from tqdm import tqdm

        job = self.job
        existing = self.prepare()
        config = model.config
        num_layers, dim = config.num_layers + 1, 2 * config.projection_dim
        self.device_memory = device_memory(device)
        try:
            writer = PartWriter(self.partial, self.settings, job.part_size, job.writers)
        except WriterError as error:
            raise EmbedRunError(str(error)) from None
        batches: queue.Queue = queue.Queue(QUEUE_BATCHES)
        results: queue.Queue = queue.Queue(QUEUE_BATCHES)
        total = None if num_lines is None else len(range(self.rank, num_lines, self.world_size))
        progress = tqdm(
            total=total,
            unit="sent",
            desc=f"embed rank {self.rank}" if self.world_size > 1 else "embed",
            disable=not job.progress,
            dynamic_ncols=True,
        )
        start, main_start = time.perf_counter(), time.thread_time()

        def sentences() -> Iterator[Sentence]:
            """This process's lines; those complete from an earlier run (same line, same shape) and empty ones go
            straight to the writer. Every line, this process's or not, goes into the input's hash."""
            with contextlib.ExitStack() as stack:
                stream = job.source if not isinstance(job.source, Path) else stack.enter_context(job.source.open("rb"))
                for key, raw, text in read_lines(stream, job.source_name, job.errors):
                    self.input_digest.update(raw)
                    self.input_lines = key + 1
                    if self.stop.is_set():
                        return
                    if key % self.world_size != self.rank:
                        continue
                    words = text.split() if self.settings["split"] == "whitespace" else tokenizer.tokenize(text)
                    sentence = Sentence(key, text, words)
                    if (
                        key in existing.hashes
                        and existing.hashes[key] == line_hash(text)
                        and existing.shapes[key] == expected_shape(self.settings, len(words), num_layers, dim)
                    ):
                        put(results, ("keep", sentence, existing.files[key]), self.stop)
                        continue
                    if not words:
                        put(results, ("empty", sentence, None), self.stop)
                        continue
                    yield sentence

        def read():
            try:
                for batch in length_grouped_batches(sentences(), job.batch_size, job.max_tokens):
                    inputs = tokenizer(
                        [sentence.words for sentence in batch], is_split_into_words=True, add_special_tokens=False,
                        padding=True, padding_side="right", return_tensors="pt",
                    )
                    put(batches, (batch, inputs["input_ids"], inputs["attention_mask"]), self.stop)
                put(batches, None, self.stop)
            except BaseException as error:  # handed to the main thread, which reports it
                put(batches, Failure(error), self.stop)

        def write():
            shape = expected_shape(self.settings, 0, num_layers, dim)
            empty = torch.zeros(shape, dtype=OUTPUT_DTYPES[self.settings["dtype"]]).numpy()
            try:
                while (item := get(results, self.stop)) is not None:
                    kind, sentences_, payload = item
                    if kind == "keep":
                        writer.keep(sentences_, payload)
                        progress.update(1)
                        continue
                    if kind == "empty":
                        writer.write([sentences_], [empty])
                        progress.update(1)
                        continue
                    writer.write(sentences_, payload)
                    self.words_embedded += sum(len(sentence.words) for sentence in sentences_)
                    self.sentences_embedded += len(sentences_)
                    progress.update(len(sentences_))
                    rate = self.words_embedded / max(time.perf_counter() - start, 1e-9)
                    progress.set_postfix_str(f"{rate:,.0f} words/s", refresh=False)
                if self.failed:
                    writer.abort()
                else:
                    writer.close()  # also when interrupted: what the parts hold is complete
            except BaseException as error:  # handed to the main thread, which reports it
                writer.abort()
                if isinstance(error, OSError):
                    error = EmbedRunError(
                        f"cannot write {error.filename or self.partial} ({describe(error)}); free space in (or fix) "
                        f"{self.partial.parent.absolute()}"
                    )
                elif isinstance(error, (ReadBackError, WriterError)):
                    error = EmbedRunError(str(error))
                self.writer_error = error
                self.stop.set()
            finally:
                self.thread_seconds["writer processes"] = writer.cpu_seconds()

        reader_thread = threading.Thread(target=self.timed("reader", read), name="elmo-embed-reader", daemon=True)
        writer_thread = threading.Thread(target=self.timed("writer", write), name="elmo-embed-writer", daemon=True)
        reader_thread.start()
        writer_thread.start()
        try:
            # One batch in flight: the model reads the tokenizer's host tensors and its next batch is queued before
            # the last one's vectors are awaited, so that a GPU computes while the host prepares and hands on.
            pending: tuple[list[Sentence], PendingVectors, str] | None = None

            def hand_on(batch: list[Sentence], vectors: PendingVectors, keys: str):
                put(results, ("vectors", batch, self.finish(vectors, keys)), self.stop)

            with torch.inference_mode():
                while (item := get(batches, self.stop)) is not None:
                    if isinstance(item, Failure):
                        raise item.error
                    if self.writer_error is not None:
                        break
                    batch, input_ids, attention_mask = item
                    launched = self.vectors(model, mix, input_ids, attention_mask, batch, device)
                    if pending is not None:
                        hand_on(*pending)
                    pending = launched
                if pending is not None and not self.stop.is_set():
                    hand_on(*pending)
            put(results, None, self.stop)
            writer_thread.join()
        except BaseException as error:
            self.failed = not isinstance(error, KeyboardInterrupt)
            self.stop.set()
            writer_thread.join(timeout=10)
            raise
        finally:
            progress.close()
        if self.writer_error is not None:
            raise self.writer_error
        seconds = time.perf_counter() - start
        self.thread_seconds["main"] = time.thread_time() - main_start
        input_identity = {"sha256": self.input_digest.hexdigest(), "lines": self.input_lines}
        merge_into(self.target, writer.sources, writer.index, self.settings, input_identity, self.partial)
        try:
            delete_partial(self.partial)
        except OSError as error:  # the output is complete and checked: the run succeeded
            print(f"warning: {self.target} is complete, but {self.partial} could not be removed ({describe(error)}); "
                  "remove it by hand.", file=sys.stderr)
        self.lock.close()
        self.lock = None
        return seconds

    def timed(self, name: str, function: Callable[[], None]) -> Callable[[], None]:
        """`function`, recording the CPU seconds of the thread it runs in as `thread_seconds[name]`."""

        def run():
            start = time.thread_time()
            try:
                function()
            finally:
                self.thread_seconds[name] = time.thread_time() - start

        return run

    def check_memory(
        self, config, dtype: torch.dtype, device: torch.device, input_ids: torch.Tensor, batch: list[Sentence],
        keys: str,
    ) -> None:
        """Refuses a batch whose layers alone, `(num_layers + 1, batch, longest, 2 * projection_dim)` in the model's
        dtype, need more than all the memory of the device: its allocation could pass (memory is handed out as it is
        touched) and the system kill the run hours later, without a word."""
        memory = self.device_memory
        layer_bytes = (config.num_layers + 1) * 2 * config.projection_dim * dtype.itemsize
        needed = input_ids.shape[0] * input_ids.shape[1] * layer_bytes
        if memory is None or needed <= memory:
            return
        gib = f"{memory / 2**30:.1f} GiB of {device.type} memory"
        longest = max(batch, key=lambda sentence: len(sentence.words))
        if len(longest.words) * layer_bytes > memory:
            raise EmbedRunError(
                f"line {longest.key + 1} has {len(longest.words):,} words, whose layers alone need "
                f"{len(longest.words) * layer_bytes / 2**30:.1f} GiB, more than the {gib}; the input holds one "
                "sentence a line: split that line into sentences"
            )
        raise EmbedRunError(
            f"the batch of lines {keys} needs {needed / 2**30:.1f} GiB for its layers alone, more than the {gib}; "
            "lower --max-tokens or --batch-size"
        )

    def vectors(
        self, model, mix, input_ids, attention_mask, batch: list[Sentence], device: torch.device
    ) -> tuple[list[Sentence], PendingVectors, str]:
        """Queues the model on a batch (the tokenizer's host tensors, which the model reads where they are) and the
        requested layers' way to the host (`gather_vectors`): the batch, its pending vectors and its lines' numbers,
        for `finish`."""
        keys = ", ".join(str(sentence.key + 1) for sentence in batch)
        self.check_memory(model.config, next(model.parameters()).dtype, device, input_ids, batch, keys)
        try:
            outputs = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        except (RuntimeError, ValueError, MemoryError) as error:
            raise EmbedRunError(f"the model failed on the batch of lines {keys} ({describe(error)})") from error
        lengths = [len(sentence.words) for sentence in batch]
        dtype = OUTPUT_DTYPES[self.settings["dtype"]]
        pending = gather_vectors(outputs, attention_mask, lengths, self.settings["layers"], mix, dtype, True)
        return batch, pending, keys

    def finish(self, pending: PendingVectors, keys: str) -> list[np.ndarray]:
        """A batch's vectors as a float32 or float16 array per sentence, once on the host and checked (`keys`: its
        lines' numbers, for the error)."""
        try:
            return pending.result()
        except NonFiniteVectors:
            hint = "; check the model"
            if self.settings["dtype"] == "float16":
                hint = " beyond float16's range; use --dtype float32"
            raise EmbedRunError(f"non-finite vectors for a sentence among lines {keys}{hint}") from None


def merge_shards(output: str | os.PathLike, world_size: int | None = None, overwrite: bool = False) -> int:
    """Merges `OUTPUT.shard-R-of-N` (all N of them, from one input and one model with one set of settings) into
    OUTPUT, then removes them; returns the number of shards. Refuses (EmbedError) a missing, unreadable or foreign
    shard, naming the rank to rerun; raises EmbedRunError when OUTPUT cannot be written (the shards are kept)."""
    output = through_link(Path(output))
    if world_size is not None:
        check_positive_integer("world-size", world_size, EmbedError)
    check_output_file(output, [], EmbedError)
    if output.exists() and not overwrite:
        raise EmbedError(f"{output} exists; pass --overwrite to replace it.")
    shards = sorted(output.parent.glob(f"{glob.escape(output.name)}.shard-*-of-*"))
    counts = {path.name.rsplit("-of-", 1)[1] for path in shards}
    if world_size is None:
        count = next(iter(counts)) if len(counts) == 1 else ""
        if not (count.isascii() and count.isdigit() and not count.startswith("0")):  # N as shard_path writes it
            found = ", ".join(path.name for path in shards) or "none"
            raise EmbedError(
                f"expected the shards of one run, {output.name}.shard-R-of-N for R = 0..N-1; found {found}."
            )
        world_size = int(count)
    # Looked for lazily, at most MISSING_SHOWN named: listing every rank of a stray `OUTPUT.shard-0-of-99999999999`
    # took all memory.
    paths = (shard_path(output, rank, world_size) for rank in range(world_size))
    absent = (path.name for path in paths if not path.is_file())
    missing = list(itertools.islice(absent, MISSING_SHOWN + 1))
    if missing:
        shown = ", ".join(missing[:MISSING_SHOWN]) + (" and more" if len(missing) > MISSING_SHOWN else "")
        raise EmbedError(f"missing shards: {shown}; finish those processes' runs (--resume) first.")
    expected = [shard_path(output, rank, world_size) for rank in range(world_size)]  # all exist: as many as found
    settings, identity, sources, index = None, None, {}, {}
    for rank, path in enumerate(expected):
        rerun = f"delete it and rerun rank {rank} (RANK={rank} WORLD_SIZE={world_size} elmo-hf embed ... --resume)"
        try:
            with h5py.File(path, "r") as file:
                if SETTINGS_ATTR not in file.attrs:  # `read_settings` would advise embed's --overwrite
                    raise EmbedError(f"shard {path} was not written by elmo-hf embed (no {SETTINGS_ATTR}); {rerun}.")
                found = read_settings(file, path)
                found_identity = json.loads(file.attrs[INPUT_ATTR]) if INPUT_ATTR in file.attrs else None
                keys = [int(name) for name in file if name.isdigit()]
                shard_index = read_index(file)
        except (OSError, json.JSONDecodeError) as error:
            raise EmbedError(
                f"shard {path} cannot be read ({describe(error)}): it is cut short or not a shard; {rerun}."
            ) from None
        if found_identity is None:
            raise EmbedError(f"shard {path} was written by an older elmo-hf (no {INPUT_ATTR}); {rerun}.")
        if settings is not None and found != settings:
            raise EmbedError(
                f"shard {path} was written with other settings than {expected[0].name} "
                f"({settings_difference(found, settings)}); {rerun} with the same settings and model."
            )
        if identity is not None and found_identity != identity:
            raise EmbedError(
                f"shard {path} was written from another input than {expected[0].name} ({found_identity['lines']} "
                f"lines, hash {found_identity['sha256'][:12]}, against {identity['lines']} lines, hash "
                f"{identity['sha256'][:12]}); {rerun} on the same input."
            )
        if any(key % world_size != rank for key in keys):
            raise EmbedError(f"shard {path} holds lines of another rank; {rerun}.")
        settings, identity = found, found_identity
        sources.update({key: path for key in keys})
        for sentence, key in shard_index.items():
            if int(key) > index.get(sentence, -1):
                index[sentence] = int(key)
    if len(sources) != identity["lines"]:
        raise EmbedError(
            f"the shards hold {len(sources)} lines of an input of {identity['lines']}; a shard is incomplete: rerun "
            "each rank with --resume."
        )
    staging = partial_folder(output)
    if partial_exists(staging):
        if lock_held(staging):
            raise EmbedError(f"another elmo-hf run is writing {output} now ({staging} is locked); wait for it.")
        remove_partial(staging)
    lock = make_partial(staging, output, settings)
    try:
        merge_into(output, sources, index, settings, identity, staging)
    except EmbedRunError as error:
        raise EmbedRunError(f"{error}; the shards are kept: free space and run merge-shards again.") from None
    finally:
        with contextlib.suppress(OSError):
            delete_partial(staging)
        lock.close()
    for path in expected:
        path.unlink()
    return world_size


def select_layers(outputs, attention_mask: torch.Tensor, layers: str, mix) -> torch.Tensor:
    """The layers asked for (`LAYER_CHOICES`) from `ElmoModel`'s outputs, called with `output_hidden_states=True`:
    `(batch_size, num_layers + 1, sequence_length, dim)` for `"all"`, `(batch_size, sequence_length, dim)` otherwise
    (`mix`, an `ElmoScalarMix`, for `"average"` and `"mix"`)."""
    if layers == "all":
        return torch.stack(outputs.hidden_states, dim=1)
    if layers == "top":
        return outputs.last_hidden_state
    return mix(outputs.hidden_states, attention_mask)


class NonFiniteVectors(ValueError):
    """A vector `gather_vectors` gathered is not finite in the dtype asked for (float16's range exceeded, or a broken
    model)."""


def gather_vectors(
    outputs,
    attention_mask: torch.Tensor,
    lengths: Sequence[int],
    layers: str,
    mix,
    dtype: torch.dtype,
    page_locked: bool = False,
) -> PendingVectors:
    """The layers asked for (`select_layers`) of a right-padded batch, cut to each row's `lengths[row]` words, on
    their way to the host: `.result()` gives one array per sentence, `(num_layers + 1, words, dim)` for `"all"`,
    `(words, dim)` otherwise, in `dtype`.

    Only the sentences' words are gathered, in the order the arrays are laid out (one concatenation on the model's
    device, without stacking the layers first), then converted, checked and copied to the host at once: the padding
    never leaves the device, and every array is a contiguous view of that one copy, which writers take as it is.
    `page_locked`: from a GPU, into page-locked memory without waiting for the device (the copy and the finiteness
    flag are queued behind the model's work; `result()` waits), for arrays written and dropped soon (the embed
    command's; arrays a caller keeps would keep that memory locked). Elsewhere the copy is done on return."""
    planes = outputs.hidden_states if layers == "all" else (select_layers(outputs, attention_mask, layers, mix),)
    packed = torch.cat([plane[row, :words] for row, words in enumerate(lengths) for plane in planes]).to(dtype)
    # The extremes are finite exactly when every value is (aminmax propagates NaN): one pass that reads the vectors,
    # where `isfinite(packed).all()` also writes and reads a mask as large as them (25x slower here).
    finite = torch.stack(torch.aminmax(packed)).isfinite().all() if packed.numel() else torch.tensor(True)
    dim = packed.shape[-1]
    shapes = [(len(planes), words, dim) if layers == "all" else (words, dim) for words in lengths]
    if not (page_locked and packed.device.type == "cuda"):
        return PendingVectors(packed.cpu(), finite.cpu(), None, shapes)
    # Page-locked memory takes one DMA transfer, where a copy into pageable memory goes through the driver's staging
    # buffers and waits; torch's host allocator keeps the blocks later batches free, so each size is locked once.
    host = torch.empty(packed.shape, dtype=packed.dtype, pin_memory=True).copy_(packed, non_blocking=True)
    flag = torch.empty((), dtype=torch.bool, pin_memory=True).copy_(finite, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record()
    return PendingVectors(host, flag, copied, shapes)


def mix_for(layers: str, mix_weights: Sequence[float] | None, gamma: float, num_layers: int):
    """The `ElmoScalarMix` of `layers="average"` or `"mix"`, or None."""
    from ..modeling_elmo import ElmoScalarMix

    if layers == "average":
        return ElmoScalarMix.average(num_layers)
    if layers == "mix":
        if len(mix_weights) != num_layers:
            raise EmbedError(
                f"--mix-weights needs {num_layers} weights (num_layers + 1 of this model), got {len(mix_weights)}."
            )
        try:
            return ElmoScalarMix.from_weights(list(mix_weights), gamma=gamma)
        except ValueError as error:
            raise EmbedError(f"--mix-weights: {error}") from None
    return None


def check_options(
    layers: str,
    mix_weights: Sequence[float] | None,
    gamma: float,
    dtype: str,
    split: str,
    errors: str,
    batch_size: int,
    max_tokens: int | None,
    model_dtype: str,
    resume: bool,
    overwrite: bool,
    part_size: int,
    writers: int | None,
    threads: int | None,
):
    """Errors in the options alone, before any file or model is touched."""
    for name, value, choices in (
        ("layers", layers, LAYER_CHOICES),
        ("dtype", dtype, OUTPUT_DTYPES),
        ("split", split, SPLIT_CHOICES),
        ("errors", errors, DECODING_ERRORS),
        ("model-dtype", model_dtype, MODEL_DTYPES),
    ):
        if value not in choices:
            raise EmbedError(f"--{name} {value!r} is not one of {', '.join(choices)}.")
    if resume and overwrite:
        raise EmbedError("--resume and --overwrite exclude each other.")
    if layers == "mix" and mix_weights is None:
        raise EmbedError("--layers mix needs --mix-weights w0,w1,... (one weight per layer, summing to 1).")
    if layers != "mix" and (mix_weights is not None or gamma != 1.0):
        raise EmbedError("--mix-weights and --gamma apply to --layers mix only.")
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not math.isfinite(gamma):
        raise EmbedError(f"--gamma must be a finite number, got {gamma!r}.")
    for name, value in (("batch-size", batch_size), ("part-size", part_size)):
        check_positive_integer(name, value, EmbedError)
    if max_tokens is not None:  # None: no limit
        check_positive_integer("max-tokens", max_tokens, EmbedError)
    most = os.cpu_count() or 1
    if writers is not None and (not is_whole(writers) or not 0 <= writers <= most):  # None: `default_writers`
        raise EmbedError(
            f"--writers must be a whole number from 0 (the writer thread writes) to {most} (this machine's CPUs), "
            f"got {writers!r}."
        )
    check_threads(threads, EmbedError)


def default_writers() -> int:
    """Writer processes for a run that is not told: one for every `CORES_PER_WRITER` cores this process may run on
    beyond the two that the model's thread and the reader take, at most `MOST_WRITERS`; none on a machine of two
    cores, where a writer process would take a core from the model (measured on a 2-vCPU EPYC: a writer process ran
    no faster than the writer thread, `benchmarks/README.md`). Under torchrun, the processes of a machine
    (`LOCAL_WORLD_SIZE`) share its cores."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    cores = available_cores() // (int(local) if local.isdigit() and int(local) > 0 else 1)
    return min(MOST_WRITERS, max(0, cores - 2) // CORES_PER_WRITER)


def check_paths(
    source: Path | None, output: Path, target: Path, resume: bool, overwrite: bool, model_folder: Path | None = None
):
    """Refuses a missing input, an output that is the input, a file of the model's folder or not a regular file, or
    cannot be written, an output another run is writing now, and existing results without resume/overwrite."""
    if source is not None:
        if not source.exists():
            raise EmbedError(f"input file not found: {source}")
        if source.is_dir():
            raise EmbedError(f"input {source} is a folder; give a text file.")
        if not source.is_file():  # read twice (counted, then embedded), which a pipe or a device cannot be
            raise EmbedError(f"input {source} is not a regular file (a pipe or a device); give a file, or - to read "
                             "standard input.")
    if output.is_dir():  # first: `.` and `/` have no name to check below
        raise EmbedError(f"OUTPUT {output} is a folder; give a file path such as {output / 'vectors.hdf5'}.")
    if output.parent.exists() and not output.parent.is_dir():
        raise EmbedError(f"OUTPUT {output} lies under {output.parent}, which is a file; give a path in a folder.")
    if not output.parent.is_dir():
        raise EmbedError(f"folder {output.parent} of OUTPUT does not exist; create it first.")
    longest, name_max = os.fsencode(partial_folder(target).name), os.pathconf(output.parent, "PC_NAME_MAX")
    if len(longest) > name_max:  # also the name of OUTPUT's shard and of the folder of its parts
        raise EmbedError(
            f"OUTPUT's name is too long: {os.fsdecode(longest)}, written beside it, would be {len(longest)} bytes, "
            f"more than the {name_max} that {output.parent} takes; give a shorter name."
        )
    check_output_file(output, [path for path in (source, model_folder) if path is not None], EmbedError)
    if not os.access(output.parent, os.W_OK | os.X_OK):
        raise EmbedError(f"OUTPUT's folder {output.parent} is not writable; give an OUTPUT in a folder you can write.")
    if lock_held(partial_folder(target)):
        raise EmbedError(
            f"another elmo-hf run is writing {target} now ({partial_folder(target)} is locked); wait for it to end."
        )
    if resume or overwrite:
        return
    for path in [output, target]:
        if path.exists():
            raise EmbedError(f"{path} exists; pass --resume to add what it lacks, or --overwrite to replace it.")
        if partial_exists(partial_folder(path)):
            raise EmbedError(
                f"{partial_folder(path)} holds an interrupted run; pass --resume to continue it, or --overwrite to "
                "start over."
            )


def resolve_device(device: str | torch.device | None, local_rank: int) -> torch.device:
    """The device to run on: cuda:LOCAL_RANK when a GPU is available and none is asked for, else cpu; refuses a
    device this machine does not have."""
    if device is None:
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        message = f"--device {device!r} is not a device ({describe(error)}); use cpu, cuda or cuda:N."
        raise EmbedError(message) from None
    if resolved.type == "meta":
        raise EmbedError(f"--device {device} holds no data, so no vectors can be computed on it; use cpu or cuda.")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise EmbedError(f"--device {device}: torch sees no CUDA GPU on this machine; use --device cpu.")
    try:
        torch.empty(0, device=resolved)
    except (RuntimeError, AssertionError) as error:
        raise EmbedError(f"--device {device} cannot be used here ({describe(error)}); use --device cpu.") from None
    return resolved


def load_model(name: str, model_dtype: str, device: torch.device):
    """The biLM and tokenizer of a packaged model's name, an ELMo folder or a Hub id (a task head's folder gives its
    biLM); refuses others."""
    from transformers import PreTrainedConfig

    from .. import ElmoModel, ElmoTokenizer
    from ..conversion.convert import check_config_file, load_model_weights

    path = resolve_model_name(name)
    hint = f"give a packaged model's name ({DEFAULT_MODEL}), a folder made by `elmo-hf convert` or an ELMo Hub id"
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise EmbedError(f"--model {name}: the folder has no config.json; {hint}.")
    check_config_file(Path(path), EmbedError)
    try:
        config_dict, _ = PreTrainedConfig.get_config_dict(path)
    except (OSError, ValueError) as error:
        raise EmbedError(f"cannot load a model from {name!r} ({describe(error)}); {hint}.") from None
    if config_dict.get("model_type") != "elmo":
        model_type = config_dict.get("model_type") or "model without model_type"
        raise EmbedError(f"{name!r} holds a {model_type!r} model, not ELMo; {hint}.")
    # A head's folder loads into ElmoModel with its head weights left out, as intended.
    model = load_model_weights(ElmoModel, path, EmbedError, hint, dtype=MODEL_DTYPES[model_dtype])
    try:
        tokenizer = ElmoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise EmbedError(f"cannot load the tokenizer in {name!r} ({describe(error)}); {hint}.") from None
    if tokenizer.row_width != model.config.row_width:
        raise EmbedError(
            f"the tokenizer of {name!r} writes {tokenizer.row_width} ids per word but its model reads "
            f"{model.config.row_width} (config.json's max_characters_per_token and word ids); {hint}."
        )
    return model.eval().to(device), tokenizer


def distributed_rank() -> tuple[int, int, int]:
    """(rank, world size, local rank) from the variables torchrun and accelerate set; (0, 1, 0) otherwise."""
    try:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise EmbedError("RANK, WORLD_SIZE and LOCAL_RANK must be integers; launch with torchrun.") from None
    if world_size < 1 or not 0 <= rank < world_size:
        raise EmbedError(f"RANK={rank} and WORLD_SIZE={world_size} are inconsistent; launch with torchrun.")
    return rank, world_size, local_rank


def embed_corpus(
    source: str | os.PathLike | BinaryIO,
    output: str | os.PathLike,
    *,
    model: str | os.PathLike | tuple[torch.nn.Module, Any] = DEFAULT_MODEL,
    layers: str = "all",
    mix_weights: Sequence[float] | None = None,
    gamma: float = 1.0,
    dtype: str = "float32",
    split: str = "whitespace",
    errors: str = "strict",
    batch_size: int = 64,
    max_tokens: int | None = None,
    device: str | torch.device | None = None,
    model_dtype: str = "float32",
    resume: bool = False,
    overwrite: bool = False,
    part_size: int = 1000,
    writers: int | None = None,
    merge: bool = True,
    progress: bool = True,
    threads: int | None = None,
) -> EmbedSummary:
    """Embeds every line of `source` (a text file, `"-"` for standard input, or an open stream, whose bytes are read
    as UTF-8) into the HDF5 file `output` (see the module's docstring for the layout).

    `model`: a packaged model's name, a converted folder or Hub id (loaded in `model_dtype` onto `device`), or an
    `(ElmoModel, ElmoTokenizer)` pair used as it is. `layers`: `all`, `top`, `average` or `mix` (`gamma * sum_j
    mix_weights[j] * layer_j`). `dtype`: of the stored vectors. `split`: `whitespace` (tokenized lines) or `default`
    (the tokenizer's splitting). `errors`: undecodable bytes stop the run (`strict`) or read as U+FFFD (`replace`).
    Batches hold at most `batch_size` sentences and `max_tokens` padded words. `resume` keeps what an earlier run
    completed where settings, model and line match; `overwrite` replaces OUTPUT. `part_size`: sentences per part
    file, the most work a failure loses. Under several processes (`RANK`, `WORLD_SIZE`), `merge=False` leaves the
    shards for `merge_shards`. `threads`: torch's CPU threads for this process (default: torch's choice).

    Raises EmbedError (nothing written) for unusable input or options, EmbedRunError (completed parts kept) for a
    failure while running.
    """
    check_options(
        layers, mix_weights, gamma, dtype, split, errors, batch_size, max_tokens, model_dtype, resume, overwrite,
        part_size, writers, threads,
    )
    rank, world_size, local_rank = distributed_rank()
    output = through_link(Path(output))
    target = shard_path(output, rank, world_size) if world_size > 1 else output
    if source == "-":
        source = sys.stdin
    source = getattr(source, "buffer", source)  # the bytes under a text stream: lines are decoded here
    if isinstance(source, io.TextIOBase):
        raise EmbedError(
            f"the input is a {type(source).__name__}, text without bytes under it, and lines are read as UTF-8 "
            "bytes; give a file, a binary stream, or the text encoded: io.BytesIO(text.encode())."
        )
    path = None if hasattr(source, "read") else Path(source)
    if path is None and world_size > 1:
        raise EmbedError(
            f"standard input cannot be shared by {world_size} processes (each would read other lines); write it to a "
            "file and give that file."
        )
    model_folder = None if isinstance(model, tuple) else Path(resolve_model_name(str(model)))
    if model_folder is not None and not model_folder.is_dir():  # a Hub id
        model_folder = None
    check_paths(path, output, target, resume, overwrite, model_folder)
    num_lines = count_lines(path, errors) if path is not None else None
    if threads is not None:
        torch.set_num_threads(threads)
    if isinstance(model, tuple):
        model, tokenizer = model
        if model.training:
            raise EmbedError("the model given is in training mode (dropout is on); call model.eval() first.")
        if device is not None:
            model = model.to(resolve_device(device, local_rank))
        device = next(model.parameters()).device
        model_dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    else:
        device = resolve_device(device, local_rank)
        model, tokenizer = load_model(str(model), model_dtype, device)
    mix = mix_for(layers, mix_weights, gamma, model.config.num_layers + 1)
    mix = mix.to(device) if mix is not None else None
    settings = {
        "model": model_fingerprint(model),
        "layers": layers,
        "mix_weights": None if mix_weights is None else [float(weight) for weight in mix_weights],
        "gamma": float(gamma),
        "dtype": dtype,
        "split": split,
        "model_dtype": model_dtype,
    }
    job = EmbedJob(
        path if path is not None else source,
        str(path) if path is not None else "standard input",
        output, errors, batch_size, max_tokens, part_size, default_writers() if writers is None else writers, resume,
        overwrite, progress,
    )
    group = world_size > 1 and "MASTER_ADDR" in os.environ and merge
    if group:
        torch.distributed.init_process_group("gloo", timeout=DISTRIBUTED_TIMEOUT)
    try:
        embedding = EmbedRun(job, settings, target, rank, world_size)
        try:
            seconds = embedding.run(model, tokenizer, mix, device, num_lines)
        except BaseException as error:
            kept = embedding.release()
            if kept and isinstance(error, (EmbedError, EmbedRunError)):
                raise type(error)(
                    f"{str(error).rstrip('.')}; the {kept} completed parts are kept in {embedding.partial}: "
                    "rerun with --resume."
                ) from None
            if isinstance(error, EmbedRunError):
                raise EmbedRunError(f"{str(error).rstrip('.')}; no part was complete, nothing was kept.") from None
            raise
        if group:
            torch.distributed.barrier()
            if rank == 0:
                merge_shards(output, world_size, overwrite=True)
            torch.distributed.barrier()
    finally:
        if group:
            torch.distributed.destroy_process_group()
    return EmbedSummary(
        target, embedding.sentences_embedded, embedding.words_embedded, seconds, rank, world_size,
        merged=world_size == 1 or group, thread_seconds=embedding.thread_seconds,
    )


__all__ = ["EmbedError", "EmbedRunError", "EmbedSummary", "embed_corpus", "merge_shards", "model_fingerprint"]
