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
"""The part files of `elmo-hf embed` (`embed.py`): HDF5 files of line datasets, each written under a temporary name,
read back and checked, then renamed into place (`Part`), by the embedding process's writer thread or by writer
processes (`WriterProcess`).

h5py holds Python's global lock through every HDF5 call, so a writer thread's 100-150 us of HDF5 a line are time in
which the model's thread runs no Python; writer processes take the writing out of the model's process. A writer
process runs this file as a script (`serve`), which is why it imports nothing of the package (numpy, h5py and the
standard library only): it starts in a fraction of a second, without torch.
"""

import contextlib
import errno
import functools
import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

try:
    import h5py
    import numpy as np
except Exception as error:
    if __name__ != "__main__":
        raise
    # A writer process whose interpreter (`sys.executable`) lacks them: its one reply says so, in place of a traceback.
    pickle.dump(("error", f"{sys.executable} cannot import numpy and h5py ({type(error).__name__}: {error})"),
                sys.stdout.buffer)
    sys.exit(1)

INDEX_NAME = "sentence_to_index"  # the dataset allennlp writes the sentence -> key JSON object into
SETTINGS_ATTR = "elmo_hf_settings"
LINE_ATTR = "elmo_hf_line_sha256"  # attribute of each line's dataset: a hash of the line's stripped text


class ReadBackError(Exception):
    """A file closed after writing does not read back as written (a write the file system lost)."""


class GuardedFile:
    """The file under an HDF5 file being written (through h5py's file-object driver). The first write error (a full
    disk, a failing device) is kept in `error` and later writes are dropped, so that HDF5 never meets a failed write
    (it then prints errors without end and can crash the process) and the writer reports the error once."""

    def __init__(self, path: Path):
        self.raw = open(path, "w+b", buffering=0)
        self.error: OSError | None = None

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        size = len(view)
        while self.error is None and view:
            try:
                written = self.raw.write(view)
                if not written:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
            except OSError as error:
                self.error = error
        return size

    def read(self, size: int = -1) -> bytes:
        return self.raw.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def truncate(self, size: int | None = None) -> int:
        if self.error is None:
            try:
                return self.raw.truncate(size)
            except OSError as error:
                self.error = error
        return self.raw.tell() if size is None else size

    def flush(self):
        """Unbuffered: nothing to flush (`close` syncs the file)."""

    def check(self):
        """Raises the first write error, if any."""
        if self.error is not None:
            raise self.error

    def close(self):
        """Syncs the file to disk and closes it; raises the first write error, if any."""
        if not self.raw.closed:
            try:
                if self.error is None:
                    os.fsync(self.raw.fileno())
            except OSError as error:
                self.error = error
            finally:
                self.raw.close()
        self.check()


@functools.cache
def hdf5_types(dtype: np.dtype) -> tuple[h5py.h5t.TypeID, h5py.h5t.TypeID]:
    """HDF5's file and memory types of `dtype` (made once: each `py_create` costs as much as a small write)."""
    return h5py.h5t.py_create(dtype, logical=True), h5py.h5t.py_create(dtype)


@functools.lru_cache(maxsize=4096)
def dataspace(shape: tuple[int, ...]) -> h5py.h5s.SpaceID:
    """HDF5's dataspace of `shape` (a sentence length's is made once; HDF5 copies it into each dataset)."""
    return h5py.h5s.create_simple(shape)


@functools.cache
def dataset_properties() -> h5py.h5p.PropDCID:
    """How every line's dataset is created: contiguous, without modification times (made once, read-only)."""
    properties = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    properties.set_obj_track_times(False)
    return properties


def write_vectors(file: h5py.File, key: int, vectors: np.ndarray, hashed: str) -> None:
    """Line `key`'s dataset with its line hash, as `file.create_dataset(str(key), data=vectors).attrs[LINE_ATTR] =
    hashed` writes it (contiguous, no modification times, the hash a variable-length UTF-8 string), through h5py's
    low-level calls with the types and properties made once: h5py's high-level calls, and making those for every
    line, took more time in Python than HDF5 spent writing (`bench_embed.py`)."""
    vectors = np.ascontiguousarray(vectors)
    file_type, memory_type = hdf5_types(vectors.dtype)
    dataset = h5py.h5d.create(
        file.id, str(key).encode(), file_type, dataspace(vectors.shape), dcpl=dataset_properties()
    )
    dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, vectors, mtype=memory_type)
    string = h5py.string_dtype()
    string_file, string_memory = hdf5_types(string)
    attribute = h5py.h5a.create(dataset, LINE_ATTR.encode(), string_file, dataspace(()))
    attribute.write(np.array(hashed, dtype=string), mtype=string_memory)


def write_index(file: h5py.File, index: dict[str, int]):
    """`sentence_to_index` as allennlp writes it: one variable-length string holding the JSON object, keys as strings,
    in line order."""
    ordered = {sentence: str(key) for sentence, key in sorted(index.items(), key=lambda item: item[1])}
    dataset = file.create_dataset(INDEX_NAME, (1,), dtype=h5py.string_dtype())
    dataset[0] = json.dumps(ordered)


def read_index(file: h5py.File) -> dict[str, int]:
    if INDEX_NAME not in file:
        return {}
    text = file[INDEX_NAME][0]
    return json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)


def fsync_folder(folder: Path) -> None:
    """Makes a rename in `folder` durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def verify_written(path: Path, shapes: dict[int, tuple[int, ...]], index: dict[str, int]) -> None:
    """Reads a closed file back: exactly the datasets `shapes` names, with those shapes and a line hash each, and the
    index as written; raises ReadBackError otherwise (a write the file system lost)."""
    with h5py.File(path, "r") as file:
        found, hashed = {}, True
        for name in (name for name in file if name.isdigit()):
            dataset = h5py.h5d.open(file.id, name.encode())  # low-level: 3x faster than `file[name]` here
            found[int(name)] = dataset.shape
            hashed = hashed and h5py.h5a.exists(dataset, LINE_ATTR.encode())
        read_back = {sentence: int(key) for sentence, key in read_index(file).items()}
    if found != shapes or not hashed or read_back != index:
        raise ReadBackError(
            f"{path} does not read back as written ({len(found)} of {len(shapes)} datasets, index "
            f"{'intact' if read_back == index else 'damaged'}); the file system lost data."
        )


class Part:
    """One part file being written: `path` with the suffix `.tmp` until `close` has read it back, then `path`.

    Each method raises the first write error (an OSError: a full disk) rather than HDF5's own error after it, which
    says less; `close` raises ReadBackError for a file that does not read back as written.
    """

    def __init__(self, path: Path, settings: str):
        self.path = path
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.guard = GuardedFile(path.with_suffix(".tmp"))
        with self.guarded():
            self.file: h5py.File | None = h5py.File(self.guard, "w")
            self.file.attrs[SETTINGS_ATTR] = settings

    @contextlib.contextmanager
    def guarded(self) -> Iterator[None]:
        """Raises the first write error, if there was one, in place of what the block raised (or after it), naming
        the temporary file where the error names none."""
        try:
            try:
                yield
            except Exception:
                self.guard.check()
                raise
            self.guard.check()
        except OSError as error:
            if error.filename is None:
                if error.strerror is None:  # HDF5's errors have a message only, which a filename hides in str()
                    error.strerror = str(error)
                error.filename = str(self.path.with_suffix(".tmp"))
            raise

    def add(self, lines: list[tuple[int, np.ndarray, str]]) -> None:
        """Writes `(key, vectors, line hash)` for each line."""
        with self.guarded():
            for key, vectors, hashed in lines:
                write_vectors(self.file, key, vectors, hashed)
                self.shapes[key] = vectors.shape

    def close(self, index: dict[str, int]) -> None:
        """Writes the index `{sentence: key}` of the part's lines, closes and syncs the file, reads it back, and
        renames it into place."""
        temporary = self.path.with_suffix(".tmp")
        with self.guarded():
            write_index(self.file, index)
            self.file.close()
            self.file = None
            self.guard.close()
            verify_written(temporary, self.shapes, index)
            os.replace(temporary, self.path)
            fsync_folder(self.path.parent)

    def abort(self) -> None:
        """Drops the part: closes what is open, removes the temporary file."""
        if self.file is not None:
            with contextlib.suppress(Exception):  # a file whose writes failed may not close cleanly
                self.file.close()
            self.file = None
        with contextlib.suppress(OSError):
            self.guard.close()
        with contextlib.suppress(OSError):
            self.path.with_suffix(".tmp").unlink()


class WriterError(Exception):
    """A writer process that could not start, failed otherwise than by a write error, or ended before it was told to
    (`WriterDied`)."""


class WriterDied(WriterError):
    """A writer process ended before it was told to (killed, out of memory)."""


class WriterProcess:
    """A part written by a process of its own (this file run as a script, `serve`), with `Part`'s methods: each sends
    its work and returns at once, and raises what the process reported for the call before it, so that the caller
    goes on while the process writes. `stop` waits for the last reply and ends the process. Errors other than a write
    error (OSError) or a file that does not read back (ReadBackError) are WriterError.

    The process runs in a session of its own, so that a Ctrl-C meant for the command reaches only the command, which
    then closes its parts in order; it ends by itself when the command's process ends (its input closes) and then
    drops a part left open.
    """

    INSTEAD = "rerun with --writers 0 to write in the command's process"  # what to do when the processes cannot run

    def __init__(self):
        try:
            self.process = subprocess.Popen(
                [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
            )
        except OSError as error:  # an interpreter that is missing or cannot run (an embedded Python's)
            raise WriterError(
                f"cannot start a writer process with the interpreter {sys.executable!r} ({error.strerror}); "
                f"{self.INSTEAD}"
            ) from None
        self.pending: str | None = "start"  # the request whose reply is due: the process's first says it started
        self.started = False
        self.path: Path | None = None  # the part open (or closing), if any
        self.cpu_seconds = 0.0  # the process's CPU time, once stopped

    def open(self, path: Path, settings: str) -> None:
        self.send("open", str(path), settings)
        self.path = path

    def add(self, lines: list[tuple[int, np.ndarray, str]]) -> None:
        self.send("lines", lines)

    def close(self, index: dict[str, int]) -> None:
        self.send("close", index)

    def abort(self) -> None:
        """Drops the part open, if any; never raises."""
        with contextlib.suppress(Exception):
            self.wait()
        if self.path is not None:
            with contextlib.suppress(Exception):
                self.send("abort")
                self.wait()
            with contextlib.suppress(OSError):  # left by a process that died
                self.path.with_suffix(".tmp").unlink()
            self.path = None

    def stop(self) -> None:
        """Ends the process, after the reply due (whose error it raises); `cpu_seconds` then holds its CPU time."""
        try:
            self.send("exit")
            self.pending = None
            with contextlib.suppress(WriterDied):  # ended once told to, every reply in: nothing of its work is lost
                self.cpu_seconds = self.receive()[1]
        finally:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def send(self, *message) -> None:
        """Sends a request, after the reply to the one before (whose error it raises)."""
        self.wait()
        try:
            pickle.dump(message, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.process.stdin.flush()
        except OSError:  # a broken pipe: the process ended
            raise self.died() from None
        self.pending = message[0]

    def wait(self) -> None:
        """Waits for the reply due, if any, and raises the error it reports."""
        if self.pending is None:
            return
        request, self.pending = self.pending, None
        kind, *values = self.receive()
        if kind == "os":
            raise OSError(*values)
        if kind == "read back":
            raise ReadBackError(values[0])
        if kind == "error" and request == "start":
            raise WriterError(f"the writer process {self.process.pid} could not start ({values[0]}); {self.INSTEAD}")
        if kind == "error":
            raise WriterError(f"the writer process {self.process.pid} failed{self.writing()}: {values[0]}")
        if request == "start":
            self.started = True
        if request == "close":
            self.path = None

    def receive(self) -> tuple:
        try:
            return pickle.load(self.process.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            raise self.died() from None

    def died(self) -> WriterDied:
        status = self.process.wait()
        how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
        if not self.started:
            return WriterDied(
                f"the writer process {self.process.pid} ({sys.executable} {__file__}) {how} before it started; "
                f"{self.INSTEAD}"
            )
        return WriterDied(f"the writer process {self.process.pid} {how}{self.writing()} (out of memory, or killed?)")

    def writing(self) -> str:
        """Where the process writes, for an error's message: the temporary file of the part open, if any."""
        return f" while writing {self.path.with_suffix('.tmp')}" if self.path is not None else ""


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """A writer process's loop: `("ok",)` once started, then `(kind, ...)` requests from `WriterProcess`, one reply
    each: `("ok",)`, or the error (`("os", errno, message, filename)`, `("read back", message)`,
    `("error", message)`), or `("done", cpu seconds)` to `exit`. A part open when the command ends (the requests
    end, or a reply finds no reader: the command was killed while this process wrote) is dropped, quietly."""
    part: Part | None = None
    kind, reply = "start", ("ok",)
    try:
        while True:
            pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
            replies.flush()
            if kind == "exit":
                return
            try:
                kind, *values = pickle.load(requests)
            except (EOFError, pickle.UnpicklingError):  # the command ended (a request cut short if it was killed)
                return
            reply = ("ok",)
            try:
                if kind == "open":
                    part = Part(Path(values[0]), values[1])
                elif kind == "lines":
                    part.add(values[0])
                elif kind == "close":
                    part.close(values[0])
                    part = None
                elif kind == "abort":
                    if part is not None:
                        part.abort()
                    part = None
                elif kind == "exit":
                    reply = ("done", time.process_time())
            except OSError as error:
                reply = ("os", error.errno, error.strerror, error.filename)
            except ReadBackError as error:
                reply = ("read back", str(error))
            except Exception as error:
                reply = ("error", f"{type(error).__name__}: {error}")
    except BrokenPipeError:  # the command ended while this process wrote: nobody to tell
        pass
    finally:
        if part is not None:
            part.abort()


if __name__ == "__main__":
    # Replies go to the standard output as it was; anything else printed there (HDF5 prints its errors) goes to the
    # standard error instead.
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, channel)
