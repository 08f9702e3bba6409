"""Where elmo-hf convert writes: never over its inputs, staging folders a later run cleans, the umask respected."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from elmo_hf.cli.convert import main

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = FIXTURES / "allennlp" / "options.json"
WEIGHTS = FIXTURES / "allennlp" / "lm_weights.hdf5"


def checkpoint(folder: Path) -> dict[Path, bytes]:
    """A copy of the fixture checkpoint in `folder`; returns each input file with its content."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {folder / "options.json": OPTIONS.read_bytes(), folder / "weights.hdf5": WEIGHTS.read_bytes()}
    for path, data in files.items():
        path.write_bytes(data)
    return files


def convert_into(options: Path, weights: Path, output: Path | str, *extra: str) -> int:
    return main(["--options", str(options), "--weights", str(weights), "--output", str(output), *extra])


def intact(files: dict[Path, bytes]) -> bool:
    return all(path.is_file() and path.read_bytes() == data for path, data in files.items())


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_output_equal_to_the_checkpoint_folder_is_refused(tmp_path, capsys, overwrite):
    files = checkpoint(tmp_path / "ckpt")
    assert convert_into(*files, tmp_path / "ckpt", *overwrite) == 2
    err = capsys.readouterr().err
    assert f"error: --output {tmp_path / 'ckpt'} is or holds the input {tmp_path / 'ckpt' / 'options.json'}" in err
    assert "writing there would replace the checkpoint" in err
    assert intact(files) and sorted(path.name for path in (tmp_path / "ckpt").iterdir()) == [
        "options.json", "weights.hdf5"]


def test_output_containing_the_checkpoint_is_refused(tmp_path, capsys):
    files = checkpoint(tmp_path / "data" / "ckpt")
    assert convert_into(*files, tmp_path / "data", "--overwrite") == 2
    assert f"--output {tmp_path / 'data'} is or holds the input" in capsys.readouterr().err
    assert intact(files)


def test_symbolic_links_are_resolved(tmp_path, capsys):
    """An --output that is a link to the checkpoint's folder, or inputs given through a link, are refused alike."""
    files = checkpoint(tmp_path / "ckpt")
    (tmp_path / "link").symlink_to(tmp_path / "ckpt")
    assert convert_into(*files, tmp_path / "link", "--overwrite") == 2
    linked = [tmp_path / "link" / path.name for path in files]
    assert convert_into(*linked, tmp_path / "ckpt", "--overwrite") == 2
    assert capsys.readouterr().err.count("writing there would replace the checkpoint") == 2
    assert intact(files)


def test_output_inside_the_checkpoint_folder_is_fine(tmp_path):
    """Replacing a folder beside or inside the inputs cannot touch them: allowed, with and without --overwrite."""
    files = checkpoint(tmp_path / "ckpt")
    assert convert_into(*files, tmp_path / "ckpt" / "elmo") == 0
    assert convert_into(*files, tmp_path / "ckpt" / "elmo", "--overwrite") == 0
    assert intact(files) and (tmp_path / "ckpt" / "elmo" / "model.safetensors").is_file()
    assert sorted(path.name for path in (tmp_path / "ckpt").iterdir()) == ["elmo", "options.json", "weights.hdf5"]


def test_current_directory_as_output_is_refused(tmp_path, capsys, monkeypatch):
    """`--output . --overwrite` away from the inputs: a clear error and no `..old.*` or staging folder left."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert convert_into(OPTIONS, WEIGHTS, ".", "--overwrite") == 2
    assert f"error: --output {work} is or holds the current directory" in capsys.readouterr().err
    assert list(work.iterdir()) == [] and list(tmp_path.iterdir()) == [work]


def dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_leftovers_of_interrupted_runs_are_cleaned(tmp_path, capsys):
    pid = dead_pid()
    partial = tmp_path / f".out.elmo-hf-partial-{pid}-0a1b2c3d"
    other_partial = tmp_path / f".elmo-small.elmo-hf-partial-{pid}-0a1b2c3e"
    moved_aside = tmp_path / f".previous.elmo-hf-old-{pid}-0a1b2c3f"
    running = tmp_path / f".out.elmo-hf-partial-{os.getppid()}-0a1b2c40"  # a conversion still running
    for folder in (partial, other_partial, moved_aside, running):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    assert convert_into(OPTIONS, WEIGHTS, tmp_path / "out") == 0
    out = capsys.readouterr().out
    assert f"removed {partial}, the unfinished folder of an interrupted conversion (process {pid})" in out
    assert f"removed {other_partial}, the unfinished folder" in out
    assert f"restored {tmp_path / 'previous'} from {moved_aside}, where an interrupted --overwrite" in out
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["out", "previous", running.name])
    assert (tmp_path / "previous" / "config.json").read_text() == "{}"


KILLED_SCRIPT = """
import sys, time
from pathlib import Path
from elmo_hf import ElmoModel
from elmo_hf.cli.convert import main

def save_forever(self, folder, *args, **kwargs):
    (Path(folder) / "model.safetensors").write_bytes(b"partial")
    print("saving", flush=True)
    time.sleep(600)

ElmoModel.save_pretrained = save_forever
main(sys.argv[1:])
"""


def test_kill_9_during_conversion_leaves_nothing_after_the_next_run(tmp_path, capsys):
    output = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_SCRIPT, "--options", str(OPTIONS), "--weights", str(WEIGHTS), "--output",
         str(output)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    try:
        assert "saving\n" in iter(child.stdout.readline, "")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    [staging] = [path for path in tmp_path.iterdir() if path.name.startswith(".out.")]
    assert staging.name.startswith(f".out.elmo-hf-partial-{child.pid}-") and not output.exists()
    assert convert_into(OPTIONS, WEIGHTS, output) == 0
    assert f"removed {staging}, the unfinished folder of an interrupted conversion" in capsys.readouterr().out
    assert [path.name for path in tmp_path.iterdir()] == ["out"]


@pytest.mark.parametrize(("umask", "folder_mode", "file_mode"), [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_converted_folder_respects_the_umask(tmp_path, umask, folder_mode, file_mode):
    previous = os.umask(umask)
    try:
        assert convert_into(OPTIONS, WEIGHTS, tmp_path / "out") == 0
    finally:
        os.umask(previous)
    assert (tmp_path / "out").stat().st_mode & 0o777 == folder_mode
    assert {path.name: path.stat().st_mode & 0o777 for path in (tmp_path / "out").iterdir()} == {
        path.name: file_mode for path in (tmp_path / "out").iterdir()}


def test_overwrite_replaces_the_folder_and_leaves_nothing_beside_it(tmp_path):
    assert convert_into(OPTIONS, WEIGHTS, tmp_path / "out") == 0
    (tmp_path / "out" / "stale.txt").write_text("from before")
    assert convert_into(OPTIONS, WEIGHTS, tmp_path / "out", "--overwrite") == 0
    assert not (tmp_path / "out" / "stale.txt").exists() and (tmp_path / "out" / "model.safetensors").is_file()
    assert [path.name for path in tmp_path.iterdir()] == ["out"]


def test_a_failed_conversion_leaves_no_parent_folders(tmp_path, capsys):
    assert convert_into(OPTIONS, OPTIONS, tmp_path / "new" / "deep" / "out") == 2
    assert "is not an HDF5 file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert convert_into(OPTIONS, WEIGHTS, tmp_path / "new" / "deep" / "out") == 0
    assert (tmp_path / "new" / "deep" / "out" / "config.json").is_file()


def test_a_leftover_that_cannot_be_removed_is_reported_not_fatal(tmp_path, capsys, monkeypatch):
    leftover = tmp_path / f".out.elmo-hf-partial-{dead_pid()}-0a1b2c3d"
    leftover.mkdir()
    real_rmtree = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if Path(path) == leftover:
            raise PermissionError(13, "Permission denied", str(path))
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    assert convert_into(OPTIONS, WEIGHTS, tmp_path / "out") == 0
    assert f"warning: could not clean up {leftover}, left by an interrupted conversion" in capsys.readouterr().out
    assert (tmp_path / "out" / "model.safetensors").is_file()
