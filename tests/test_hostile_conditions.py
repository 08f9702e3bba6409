"""`elmo-hf embed`, `merge-shards`, `pretrain` and `perplexity` under a hostile environment rather than bad options:
a full disk or a file-size limit met inside torch's and safetensors' writers, a kill while a finished run cleans up,
`--resume` with other training options, and outputs that are symbolic links."""

import errno
import fcntl
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import TINY_PRETRAINING as TINY
from conftest import tiny_config
from safetensors import SafetensorError
from safetensors.torch import load_file

from elmo_hf import ElmoForPreTraining, ElmoModel, ElmoTokenizer
from elmo_hf.cli import main, run_subcommand
from elmo_hf.corpus import embed as embed_module
from elmo_hf.corpus.data import ElmoWordVocabulary

ROOT = Path(__file__).resolve().parents[1]
LINES = ["the cat sat", "a dog barked at it", "", "the cat sat", "birds fly", "it rained all day long", "ok"]

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny products run on one thread


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "model"
    torch.manual_seed(0)
    ElmoModel(tiny_config()).eval().save_pretrained(folder)
    ElmoTokenizer().save_pretrained(folder)
    return folder


def pretrain(*argv) -> int:
    return run_subcommand("pretrain", [*map(str, argv), "--no-progress"])


def embed(*argv) -> int:
    return main(["embed", *map(str, argv), "--no-progress"])


def error_line(err: str) -> str:
    """The command's one `error:` line; no traceback."""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def vectors(path: Path) -> tuple[dict[str, np.ndarray], str]:
    with h5py.File(path, "r") as file:
        return {name: file[name][...] for name in file if name.isdigit()}, file["sentence_to_index"][0]


def assert_same_vectors(actual: Path, expected: Path):
    (found, found_index), (wanted, wanted_index) = vectors(actual), vectors(expected)
    assert found_index == wanted_index and sorted(found) == sorted(wanted)
    for name, array in wanted.items():
        np.testing.assert_array_equal(found[name], array, err_msg=name)


def fail_safetensors_saves(monkeypatch, fails) -> None:
    """transformers' safetensors writes raise as a full disk makes safetensors raise, where `fails(path)`."""
    import transformers.modeling_utils as modeling_utils

    save_file = modeling_utils.safe_save_file

    def failing(tensors, path, *args, **kwargs):
        if fails(str(path)):
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return save_file(tensors, path, *args, **kwargs)

    monkeypatch.setattr(modeling_utils, "safe_save_file", failing)


def fail_checkpoint_2s_optimizer(monkeypatch, message: str) -> None:
    """torch.save raises `RuntimeError(message)` where it writes checkpoint-2's optimizer state."""
    save = torch.save

    def failing(value, path, *args, **kwargs):
        if "checkpoint-2" in str(path) and str(path).endswith("optimizer.pt"):
            raise RuntimeError(message)
        return save(value, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", failing)


@pytest.mark.parametrize("writer", ["torch.save", "safetensors"])
def test_a_full_disk_met_inside_torch_save_or_safetensors_is_one_error_line_keeping_the_checkpoint(
    writer, corpus, tmp_path, monkeypatch, capsys
):
    """torch.save reports a failed write as a RuntimeError ("unexpected pos"), safetensors as a SafetensorError (as a
    real full disk gave them): they were a traceback; now one `error:` line naming the checkpoint kept, exit 1."""
    if writer == "torch.save":
        failed_write = "[enforce fail at inline_container.cc:672] . unexpected pos 7040 vs 6932"
        fail_checkpoint_2s_optimizer(monkeypatch, failed_write)
    else:
        fail_safetensors_saves(monkeypatch, lambda path: "checkpoint-2" in path)
    output = tmp_path / "out"
    assert pretrain("--train", corpus, "--output", output, *TINY, "--batch-size", "4", "--max-steps", "3",
                    "--save-steps", "1") == 1
    line = error_line(capsys.readouterr().err)
    assert "checkpoint-2 could not be written (a full disk" in line, line
    assert "checkpoint-1, was kept: free space, then --resume" in line, line
    assert not (output / "config.json").exists()


def test_an_error_inside_torch_save_that_is_not_a_failed_write_is_not_reported_as_a_full_disk(
    corpus, tmp_path, monkeypatch
):
    """Only torch.save's and safetensors' reports of a failed write become "could not be written (a full disk...)";
    any other RuntimeError (a bug, a refused object) propagates as itself, not as advice to free space."""
    fail_checkpoint_2s_optimizer(monkeypatch, "cannot pickle 'generator' object")
    with pytest.raises(RuntimeError, match="cannot pickle 'generator' object") as raised:
        pretrain("--train", corpus, "--output", tmp_path / "out", *TINY, "--batch-size", "4", "--max-steps", "3",
                 "--save-steps", "1")
    assert not isinstance(raised.value, OSError) and "could not be written" not in str(raised.value)


def test_a_full_disk_while_the_finished_model_is_saved_is_one_error_line_and_leaves_no_staging(
    corpus, tmp_path, monkeypatch, capsys
):
    fail_safetensors_saves(monkeypatch, lambda path: "checkpoint-" not in path)
    output = tmp_path / "out"
    assert pretrain("--train", corpus, "--output", output, *TINY, "--batch-size", "4", "--max-steps", "2",
                    "--save-steps", "2") == 1
    line = error_line(capsys.readouterr().err)
    assert "the model could not be written" in line and "checkpoint-2, was kept" in line, line
    assert not (output / "config.json").exists() and not list(output.glob(".final.*"))


def test_a_file_size_limit_while_pretraining_is_one_error_line_not_a_traceback(corpus, tmp_path):
    """A real RLIMIT_FSIZE (`ulimit -f`) in a subprocess: safetensors' write of weights larger than the limit fails
    (Python ignores SIGXFSZ, so the write gets EFBIG)."""
    output = tmp_path / "out"
    limit = 300_000  # above every file but the weights (about 1.2 MB) and the optimizer's state

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    command = [sys.executable, "-m", "elmo_hf.cli", "pretrain", "--train", str(corpus), "--output", str(output),
               "--lstm-dim", "256", "--projection-dim", "64", "--filters", "1:4,2:4", "--num-highway-layers", "1",
               "--batch-size", "4", "--max-steps", "1", "--save-steps", "1", "--no-progress", "--threads", "1"]
    result = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
                            preexec_fn=limit_file_size, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr
    line = error_line(result.stderr)
    assert "checkpoint-1 could not be written" in line and "no complete checkpoint was saved" in line, line


def test_resume_with_other_training_options_is_refused_and_with_the_runs_ends_as_the_whole_run(corpus, tmp_path,
                                                                                               capsys):
    """Trainer took the learning rate from the saved optimizer without a word and mixed a new dropout or batch size
    into a model whose config.json claimed the new dropout; now `--resume` refuses other values (exit 2) before
    training, and resumes with the run's own (given again or left out) to the uninterrupted run's weights."""
    flags = ["--train", corpus, *TINY, "--batch-size", "4", "--save-steps", "2", "--max-steps", "4",
             "--learning-rate", "0.01", "--dropout", "0.2"]
    assert pretrain(*flags, "--output", tmp_path / "whole") == 0
    stopped = tmp_path / "stopped"
    assert pretrain(*flags, "--output", stopped) == 0
    for name in ("config.json", "model.safetensors"):  # as a run killed after checkpoint-2
        (stopped / name).unlink()
    for path in (stopped / "checkpoint-4").iterdir():
        path.unlink()
    (stopped / "checkpoint-4").rmdir()
    capsys.readouterr()
    for changed, message in [
        (["--learning-rate", "0.1"], "--learning-rate 0.01 (now 0.1)"),
        (["--dropout", "0.5"], "--dropout 0.2 (now 0.5)"),
        (["--batch-size", "8"], "--batch-size 4 (now 8)"),
        (["--softmax", "sampled", "--num-samples", "4"], "--num-samples 8192 (now 4), --softmax full (now sampled)"),
        (["--seed", "7"], "--seed 42 (now 7)"),
    ]:
        assert pretrain(*flags, "--output", stopped, "--resume", *changed) == 2
        assert message in error_line(capsys.readouterr().err)
        assert not (stopped / "checkpoint-4").exists() and not (stopped / "config.json").exists()
    assert pretrain(*flags, "--output", stopped, "--resume") == 0
    whole, resumed = (load_file(folder / "model.safetensors") for folder in (tmp_path / "whole", stopped))
    torch.testing.assert_close(resumed, whole)
    assert json.loads((stopped / "config.json").read_text())["pretraining_dropout"] == 0.2


def test_resume_refuses_another_length_only_where_the_schedule_depends_on_it(corpus, tmp_path, capsys):
    """A linear decay over 4 steps cannot become one over 6; a constant rate may run longer (as before)."""
    flags = ["--train", corpus, *TINY, "--batch-size", "4", "--save-steps", "2"]
    linear = tmp_path / "linear"
    assert pretrain(*flags, "--output", linear, "--lr-scheduler", "linear", "--max-steps", "4") == 0
    capsys.readouterr()
    assert pretrain(*flags, "--output", linear, "--lr-scheduler", "linear", "--max-steps", "6", "--resume") == 2
    assert "--max-steps 4 (now 6)" in error_line(capsys.readouterr().err)
    constant = tmp_path / "constant"
    assert pretrain(*flags, "--output", constant, "--max-steps", "2") == 0
    assert pretrain(*flags, "--output", constant, "--max-steps", "4", "--resume") == 0
    assert (constant / "checkpoint-4").is_dir()


def test_a_kill_at_any_step_of_the_cleanup_after_the_merge_leaves_a_resumable_output(model_dir, tmp_path,
                                                                                      monkeypatch, capsys):
    """OUTPUT is complete before `OUTPUT.partial/` is deleted; a kill during that deletion left a folder without its
    run file ("not made by elmo-hf embed; move it away"), or an empty one. The run file now goes last, and an empty
    folder is taken as a leftover: a plain rerun says `--resume`, which ends with the uninterrupted file."""
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in LINES * 3), encoding="utf-8")
    reference = tmp_path / "reference.hdf5"
    assert embed(source, reference, "--model", model_dir, "--part-size", "5") == 0

    class Killed(BaseException):
        """Stands for a SIGKILL: nothing runs after it."""

    merge_into, unlink, rmdir = embed_module.merge_into, os.unlink, os.rmdir
    for kill_at in range(1, 8):
        output = tmp_path / f"out-{kill_at}.hdf5"
        calls = []

        def merged(*args, **kwargs):
            merge_into(*args, **kwargs)
            calls.append("merged")

        def deletion(delete):
            def wrapper(*args, **kwargs):
                if calls:
                    calls.append(args[0])
                    if len(calls) > kill_at:
                        raise Killed
                return delete(*args, **kwargs)

            return wrapper

        with monkeypatch.context() as patch:
            patch.setattr(embed_module, "merge_into", merged)
            patch.setattr(os, "unlink", deletion(unlink))
            patch.setattr(os, "rmdir", deletion(rmdir))
            try:
                embed(source, output, "--model", model_dir, "--part-size", "5")
            except Killed:
                pass
        capsys.readouterr()
        partial = tmp_path / f"out-{kill_at}.hdf5.partial"
        assert embed(source, output, "--model", model_dir, "--part-size", "5") == 2
        assert "pass --resume" in error_line(capsys.readouterr().err)
        assert embed(source, output, "--model", model_dir, "--resume") == 0, capsys.readouterr().err
        assert not partial.exists()
        assert_same_vectors(output, reference)


def test_a_partial_folder_that_cannot_be_removed_after_the_merge_is_a_warning_not_a_failure(model_dir, tmp_path,
                                                                                             monkeypatch, capsys):
    """An OSError while `OUTPUT.partial/` is deleted after OUTPUT was merged and checked (a folder made read-only, a
    busy network file system) was a traceback and exit 1 for a complete output; now exit 0 and one warning line."""
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    reference = tmp_path / "reference.hdf5"
    assert embed(source, reference, "--model", model_dir) == 0
    rmdir = os.rmdir

    def refused(path, *args, **kwargs):
        if str(path).endswith(".partial"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return rmdir(path, *args, **kwargs)

    output = tmp_path / "out.hdf5"
    capsys.readouterr()
    with monkeypatch.context() as patch:
        patch.setattr(os, "rmdir", refused)
        assert embed(source, output, "--model", model_dir) == 0
    err = capsys.readouterr().err
    assert f"warning: {output} is complete, but {output}.partial could not be removed (Permission denied)" in err, err
    assert "Traceback" not in err
    assert_same_vectors(output, reference)


def test_a_file_system_without_locks_is_one_error_line_naming_it(model_dir, tmp_path, monkeypatch, capsys):
    """`flock` failing with ENOLCK (a network file system without a lock manager) was a traceback where a run resumed
    and "cannot write in ..." where it started; now one line naming the file system's missing locks, for a fresh run
    (no `.partial` folder left) and a resumed one (its completed parts kept)."""
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in LINES * 3), encoding="utf-8")
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"

    class Killed(BaseException):
        """Stands for a SIGKILL before the merge: the completed parts stay in `.partial`."""

    def killed(*args, **kwargs):
        raise Killed

    def no_locks(handle, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    for resumed in (False, True):
        if resumed:
            with monkeypatch.context() as patch, pytest.raises(Killed):
                patch.setattr(embed_module, "merge_into", killed)
                embed(source, output, "--model", model_dir, "--part-size", "5")
            parts = sorted(path.name for path in partial.glob("part-*.hdf5"))
            assert parts
        capsys.readouterr()
        with monkeypatch.context() as patch:
            patch.setattr(fcntl, "flock", no_locks)
            assert embed(source, output, "--model", model_dir, "--part-size", "5", "--resume") == 2
        line = error_line(capsys.readouterr().err)
        assert "(No locks available): the file system of" in line and "does not support file locks" in line, line
        assert not output.exists()
        assert sorted(path.name for path in partial.glob("part-*.hdf5")) == (parts if resumed else [])
        assert partial.exists() == resumed


def test_outputs_that_are_symbolic_links_are_written_through_and_stay_links(model_dir, tmp_path, monkeypatch):
    """`embed`, `merge-shards` and `perplexity --json` renamed their finished file over the user's link, which became
    a regular file while the file it named kept its old contents; now the result goes into that file."""
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    reference = tmp_path / "reference.hdf5"
    assert embed(source, reference, "--model", model_dir) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    existing = tmp_path / "existing.hdf5"
    (elsewhere / "existing.hdf5").write_bytes(b"old")
    existing.symlink_to(elsewhere / "existing.hdf5")
    dangling = tmp_path / "dangling.hdf5"
    dangling.symlink_to(elsewhere / "new.hdf5")
    assert embed(source, existing, "--model", model_dir, "--overwrite") == 0
    assert embed(source, dangling, "--model", model_dir) == 0
    for link, target in ((existing, "existing.hdf5"), (dangling, "new.hdf5")):
        assert link.is_symlink() and link.resolve() == elsewhere / target
        assert_same_vectors(elsewhere / target, reference)
    assert embed(source, dangling, "--model", model_dir, "--resume") == 0  # the link's target is found again
    assert dangling.is_symlink()
    to_input = tmp_path / "to-input.hdf5"
    to_input.symlink_to(source)
    assert embed(source, to_input, "--model", model_dir, "--overwrite") == 2  # the input is never written through
    assert to_input.is_symlink() and source.read_text(encoding="utf-8").startswith("the cat sat")

    shards = tmp_path / "shards.hdf5"
    shards.symlink_to(elsewhere / "shards.hdf5")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        assert embed(source, shards, "--model", model_dir) == 0
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")
    assert main(["merge-shards", str(shards)]) == 0
    assert shards.is_symlink()
    assert_same_vectors(elsewhere / "shards.hdf5", reference)

    vocabulary = ElmoWordVocabulary(["</S>", "<S>", "<UNK>", "the", "cat", "sat"])
    torch.manual_seed(0)
    folder = tmp_path / "pretrained"
    ElmoForPreTraining(tiny_config(word_vocab_size=len(vocabulary))).save_pretrained(folder)
    vocabulary.save(folder)
    result = tmp_path / "result.json"
    result.symlink_to(elsewhere / "result.json")
    assert run_subcommand("perplexity", ["--model", str(folder), "--text", str(source), "--json", str(result)]) == 0
    assert result.is_symlink() and "forward_perplexity" in json.loads((elsewhere / "result.json").read_text())


def test_a_write_error_names_the_folder_to_free_even_when_it_is_the_current_one(model_dir, tmp_path, monkeypatch,
                                                                                capsys):
    """The message ended "free space in (or fix) ;": the folder `.` lost its name to the trailing-period strip."""
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    original = embed_module.GuardedFile.__init__

    class FullDisk:
        def __init__(self, raw):
            self.raw = raw

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.raw, name)

    def init(self, path):
        original(self, path)
        self.raw = FullDisk(self.raw)

    monkeypatch.setattr(embed_module.GuardedFile, "__init__", init)
    assert embed("in.txt", "out.hdf5", "--model", model_dir) == 1
    line = error_line(capsys.readouterr().err)
    assert f"No space left on device); free space in (or fix) {tmp_path};" in line, line


def test_a_diverging_run_advises_training_again_not_a_resume_that_diverges_again(corpus, tmp_path, capsys):
    """The message advised "--resume from that checkpoint" after a lower --learning-rate, which the resumed run
    ignored (and now refuses), so it diverged again at the same step."""
    output = tmp_path / "out"
    flags = ["--train", corpus, "--output", output, *TINY, "--batch-size", "4", "--max-steps", "4",
             "--save-steps", "1", "--learning-rate", "1e20", "--optimizer", "sgd", "--max-grad-norm", "0"]
    assert pretrain(*flags) == 1
    line = error_line(capsys.readouterr().err)
    assert "checkpoint-1, was kept. Lower --learning-rate (or --max-grad-norm), then train again with --overwrite." \
        in line and "--resume" not in line, line
    assert pretrain(*flags, "--resume") == 1  # the same options: the same divergence
    assert "diverged at step 2" in error_line(capsys.readouterr().err)


def test_the_run_record_and_a_json_result_have_the_umasks_mode(corpus, tmp_path):
    """They were written 0600 (mkstemp's mode) into a model folder otherwise made with the umask's permissions."""
    output = tmp_path / "out"
    result = tmp_path / "result.json"
    umask = os.umask(0o022)
    try:
        assert pretrain("--train", corpus, "--output", output, *TINY, "--batch-size", "4", "--max-steps", "1") == 0
        scoring = ["--model", str(output), "--text", str(corpus), "--json", str(result)]
        assert run_subcommand("perplexity", scoring) == 0
    finally:
        os.umask(umask)
    for path in (output / "pretraining_run.json", output / "checkpoint-1" / "pretraining_run.json", result):
        assert path.stat().st_mode & 0o777 == 0o644, path


def test_an_output_name_too_long_for_the_files_written_beside_it_is_one_error_line(model_dir, tmp_path, capsys):
    """`OUTPUT.partial` over the file system's 255 bytes a name was a traceback (File name too long)."""
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    output = tmp_path / ("x" * 245 + ".hdf5")
    assert embed(source, output, "--model", model_dir) == 2
    assert "OUTPUT's name is too long" in error_line(capsys.readouterr().err)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]


def test_sigterm_interrupts_embed_as_ctrl_c_keeping_the_open_part(model_dir, tmp_path):
    """SIGTERM (`kill`, a scheduler's time limit) killed the run on the spot: no message, the open part's sentences
    lost and its `.tmp` left behind. Now it stops as Ctrl-C does: the open part is closed and kept, exit 130, and
    `--resume` completes the uninterrupted file."""
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{line} {key}\n" for key, line in enumerate(LINES * 120)), encoding="utf-8")
    output = tmp_path / "out.hdf5"
    partial = tmp_path / "out.hdf5.partial"
    command = [sys.executable, "-m", "elmo_hf.cli", "embed", str(source), str(output), "--model", str(model_dir),
               "--batch-size", "2", "--part-size", "20", "--threads", "1", "--no-progress"]
    process = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(partial.glob("part-*.hdf5")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, (process.returncode, err)
    assert "interrupted: the completed parts are kept; rerun with --resume" in err and "Traceback" not in err, err
    assert not output.exists() and not list(partial.glob("*.tmp"))
    assert embed(source, output, "--model", model_dir, "--resume") == 0
    reference = tmp_path / "reference.hdf5"
    assert embed(source, reference, "--model", model_dir) == 0
    assert_same_vectors(output, reference)


def test_a_pipe_or_a_folder_given_as_training_text_is_named_as_such_not_as_missing(corpus, tmp_path, capsys):
    """`--train` a FIFO, /dev/stdin or a folder said "corpus file not found"."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for text, kind in ((fifo, "is not a regular file (a pipe or a device)"), (tmp_path, "is a folder")):
        assert pretrain("--train", text, "--output", tmp_path / "out", *TINY) == 2
        assert f"corpus file {text} {kind}" in error_line(capsys.readouterr().err)
        assert not (tmp_path / "out").exists()
