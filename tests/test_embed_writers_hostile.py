"""`elmo-hf embed --writers N` as a hostile user meets it: writer processes that cannot start, a command killed while
they write, HDF5's own errors and unexpected ones inside them. One `error:` line each, no traceback, nothing half
written, no process left behind."""

import os
import pickle
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_embed_reliability import LINES, assert_same, embed, one_error_line, save_model, write_lines

from elmo_hf.corpus import parts as parts_module
from elmo_hf.corpus.embed import PartWriter


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def writer_processes() -> list[int]:
    """The writer processes this process started that still run."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:  # not a process, or one that just ended
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and parts_module.__file__.encode() in command:
            found.append(int(entry.name))
    return found


def children_import(monkeypatch, folder: Path, code: str) -> None:
    """Processes started from now on run `code` first (a `sitecustomize` module on their PYTHONPATH): what happens
    inside a writer process, which a test cannot patch otherwise."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(code)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]))


def failed_run(model_dir: Path, tmp_path: Path, capsys, writers: int = 2) -> str:
    """Embeds with `writers` writer processes, and fails: exit 1, nothing half-written left, no writer process
    running; returns the one error line."""
    source = write_lines(tmp_path / "in.txt", [f"{line} {key}" for key, line in enumerate(LINES * 3)])
    output = tmp_path / "out.hdf5"
    status = embed(source, output, "--model", model_dir, "--writers", writers, "--part-size", 3, "--batch-size", 2)
    assert status == 1 and not writer_processes()
    assert not output.exists() and not list(tmp_path.rglob("*.tmp"))
    return one_error_line(capsys.readouterr().err)


def resume_completes(model_dir: Path, tmp_path: Path) -> None:
    """--resume (with the writer thread) after `failed_run` gives the file an uninterrupted run gives."""
    source, output = tmp_path / "in.txt", tmp_path / "out.hdf5"
    assert embed(source, output, "--model", model_dir, "--resume", "--writers", 0) == 0
    assert embed(source, tmp_path / "fresh.hdf5", "--model", model_dir, "--writers", 0) == 0
    assert_same(output, tmp_path / "fresh.hdf5")


@pytest.mark.parametrize("interpreter", ["missing", "not executable", ""])
def test_an_interpreter_that_cannot_run_is_one_error_line(model_dir, tmp_path, monkeypatch, capsys, interpreter):
    """`sys.executable` missing, not executable, or empty (an embedded Python's): Popen's OSError was a traceback;
    now one error line saying to use --writers 0."""
    if interpreter == "not executable":
        interpreter = str(tmp_path / "python")
        Path(interpreter).write_text("")
    elif interpreter == "missing":
        interpreter = str(tmp_path / "missing" / "python")
    with monkeypatch.context() as patch:
        patch.setattr(sys, "executable", interpreter)
        error = failed_run(model_dir, tmp_path, capsys)
    resume_completes(model_dir, tmp_path)
    assert "cannot start a writer process with the interpreter" in error and "--writers 0" in error, error


def test_an_interpreter_without_h5py_is_one_error_line(model_dir, tmp_path, monkeypatch, capsys):
    """A `sys.executable` that cannot import h5py: each writer process printed its ImportError's traceback and the
    command blamed memory ("exited with status 1 (out of memory, or killed?)"); now the one error line names the
    import that failed and says to use --writers 0, and no traceback is printed."""
    fake = tmp_path / "no-h5py"
    fake.mkdir()
    (fake / "h5py.py").write_text("raise ImportError(\"No module named 'h5py'\")\n")
    with monkeypatch.context() as patch:
        patch.setenv("PYTHONPATH", str(fake))
        error = failed_run(model_dir, tmp_path, capsys)
    resume_completes(model_dir, tmp_path)
    assert "could not start" in error and "cannot import numpy and h5py" in error and "--writers 0" in error, error


def test_writers_started_before_a_failure_to_start_the_next_end_at_once(tmp_path, monkeypatch):
    """Ctrl-C (or a failure) while the third of four writer processes starts: the two started were left running
    until garbage collection closed their pipes; now they end at once."""
    started = []
    original = parts_module.WriterProcess.__init__

    def init(self):
        if len(started) == 2:
            raise KeyboardInterrupt
        original(self)
        started.append(self)

    monkeypatch.setattr(parts_module.WriterProcess, "__init__", init)
    with pytest.raises(KeyboardInterrupt):
        PartWriter(tmp_path, {}, 10, processes=4)
    assert len(started) == 2 and all(process.process.poll() == 0 for process in started)
    assert not writer_processes() and list(tmp_path.iterdir()) == []


def test_a_writer_whose_command_died_while_it_wrote_ends_quietly(tmp_path):
    """The command is killed (the out-of-memory killer takes the big process) while a writer process writes: its
    reply found no reader, and it printed a BrokenPipeError traceback on the terminal, exited 1 and left its part's
    temporary file; now it drops the part quietly."""
    process = subprocess.Popen(
        [sys.executable, parts_module.__file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    vectors = np.zeros((3, 5, 8), dtype=np.float32)
    pickle.dump(("open", str(tmp_path / "part-000000.hdf5"), "{}"), process.stdin)
    pickle.dump(("lines", [(key, vectors, "hash") for key in range(2000)]), process.stdin)
    process.stdin.flush()
    process.stdout.close()  # the command is gone: its end of the replies closes
    process.stdin.close()
    assert process.wait(timeout=60) == 0
    assert process.stderr.read() == b"" and list(tmp_path.iterdir()) == []


TRUNCATED_READ_BACK = """
import h5py

opened = h5py.File


def read_back(name, mode="r", *args, **kwargs):
    if mode == "r" and str(name).endswith(".tmp"):
        raise OSError("Unable to synchronously open file (truncated file: eof = 96)")
    return opened(name, mode, *args, **kwargs)


h5py.File = read_back
"""


@pytest.mark.parametrize("writers", [0, 2])
def test_an_hdf5_error_keeps_its_message(model_dir, tmp_path, monkeypatch, capsys, writers):
    """HDF5's errors are OSErrors with a message and no errno: naming the part file in them made their message
    "[Errno None] None: 'PART.tmp'" (a part that did not read back as HDF5, with the writer thread or in a writer
    process); now the error line says what HDF5 said."""
    with monkeypatch.context() as patch:
        if writers:
            children_import(patch, tmp_path / "site", TRUNCATED_READ_BACK)
        else:
            namespace: dict = {}
            exec(TRUNCATED_READ_BACK.replace("h5py.File = read_back", ""), namespace)
            patch.setattr(parts_module.h5py, "File", namespace["read_back"])
        error = failed_run(model_dir, tmp_path, capsys, writers)
    assert "(Unable to synchronously open file (truncated file: eof = 96))" in error and "Errno" not in error, error
    assert "no part was complete" in error, error
    resume_completes(model_dir, tmp_path)


def test_an_unexpected_error_in_a_writer_process_is_one_error_line(model_dir, tmp_path, monkeypatch, capsys):
    """An error other than a write error inside a writer process (out of memory while writing) was a RuntimeError
    traceback; now one error line naming the process, the part and the error."""
    with monkeypatch.context() as patch:
        children_import(patch, tmp_path / "site", (
            "import h5py.h5d\n"
            "def create(*args, **kwargs):\n"
            "    raise MemoryError('cannot allocate the dataset')\n"
            "h5py.h5d.create = create\n"
        ))
        error = failed_run(model_dir, tmp_path, capsys)
    expected = r"the writer process \d+ failed while writing \S+part-\d{6}\.tmp: MemoryError: cannot allocate"
    assert re.search(expected, error), error
    resume_completes(model_dir, tmp_path)


def test_a_writer_killed_once_told_to_exit_fails_nothing(model_dir, tmp_path, monkeypatch):
    """A writer process killed after its last reply, while it exits: every part it wrote was confirmed, yet the run
    failed ("killed by signal 9") and needed --resume; now the run completes."""
    source = write_lines(tmp_path / "in.txt", [f"{line} {key}" for key, line in enumerate(LINES * 3)])
    send = parts_module.WriterProcess.send

    def send_then_kill(self, *message):
        send(self, *message)
        if message[0] == "exit":
            os.kill(self.process.pid, signal.SIGKILL)

    with monkeypatch.context() as patch:
        patch.setattr(parts_module.WriterProcess, "send", send_then_kill)
        status = embed(source, tmp_path / "out.hdf5", "--model", model_dir, "--writers", 2, "--part-size", 3)
    assert status == 0 and not writer_processes()
    assert embed(source, tmp_path / "fresh.hdf5", "--model", model_dir, "--writers", 0) == 0
    assert_same(tmp_path / "out.hdf5", tmp_path / "fresh.hdf5")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fresh.hdf5", "in.txt", "out.hdf5"]
