"""`elmo-hf embed` and `merge-shards` as a hostile user tries them (issue 23 items 1-5, 10, 11, 17; issue 26 items 1
and 5; issue 24's --threads): never a silently wrong file, never a corrupt one, one `error:` line, exit 2 for unusable
input, exit 1 for a failure while running."""

import errno
import fcntl
import json
import os
import re
import resource
import signal
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import tiny_config

from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.cli import main
from elmo_hf.corpus import embed as embed_module
from elmo_hf.corpus import parts as parts_module
from elmo_hf.corpus.embed import EmbedError, embed_corpus, model_fingerprint

LINES = ["the cat sat", "a dog barked at it", "", "the cat sat", "birds fly", "it rained all day long", "ok"]


def save_model(folder: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    ElmoModel(tiny_config()).eval().save_pretrained(folder)
    ElmoTokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def embed(*arguments) -> int:
    return main(["embed", *map(str, arguments), "--no-progress"])


def contents(path: Path) -> tuple[dict, dict]:
    """{name: vectors} and the index of an output file."""
    with h5py.File(path, "r") as file:
        vectors = {name: file[name][...] for name in file if name != "sentence_to_index"}
        return vectors, json.loads(file["sentence_to_index"][0])


def assert_same(actual: Path, expected: Path):
    actual_vectors, actual_index = contents(actual)
    expected_vectors, expected_index = contents(expected)
    assert actual_index == expected_index and sorted(actual_vectors) == sorted(expected_vectors)
    for name, vectors in expected_vectors.items():
        assert actual_vectors[name].shape == vectors.shape, name
        np.testing.assert_allclose(actual_vectors[name], vectors, atol=1e-6, rtol=1e-5, err_msg=name)


def one_error_line(err: str) -> str:
    """The single `error:` line of a command's standard error (and no traceback)."""
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def test_resume_reembeds_an_edited_copy_of_a_repeated_sentence(model_dir, tmp_path):
    """Item 1: an earlier copy of a repeated sentence, edited with the same word count, gets new vectors."""
    source = write_lines(tmp_path / "in.txt", LINES)
    output = tmp_path / "out.hdf5"
    assert embed(source, output, "--model", model_dir) == 0
    edited = ["the dog sat", *LINES[1:]]  # line 0 was a copy of line 3
    write_lines(source, edited)
    assert embed(source, output, "--model", model_dir, "--resume") == 0
    assert embed(source, tmp_path / "fresh.hdf5", "--model", model_dir) == 0
    assert_same(output, tmp_path / "fresh.hdf5")


def test_resume_refuses_vectors_of_another_model_in_the_same_folder(tmp_path, capsys):
    """Item 2: the folder named by --model now holds another model (re-converted, retrained): refused."""
    folder = save_model(tmp_path / "model", seed=0)
    source = write_lines(tmp_path / "in.txt", LINES)
    output = tmp_path / "out.hdf5"
    assert embed(source, output, "--model", folder) == 0
    save_model(folder, seed=1)
    write_lines(source, [*LINES, "one more line"])
    assert embed(source, output, "--model", folder, "--resume") == 2
    assert "other settings (model (its config or weights))" in one_error_line(capsys.readouterr().err)
    assert sorted(contents(output)[0], key=int) == [str(key) for key in range(len(LINES))]  # untouched


def test_model_fingerprint_is_the_content_not_the_path(model_dir, tmp_path):
    copy = save_model(tmp_path / "copy", seed=0)
    other = save_model(tmp_path / "other", seed=1)
    fingerprints = [model_fingerprint(ElmoModel.from_pretrained(folder)) for folder in (model_dir, copy, other)]
    assert fingerprints[0] == fingerprints[1] != fingerprints[2]


def test_standard_input_is_refused_under_several_processes(model_dir, tmp_path, monkeypatch, capsys):
    """Item 3: every rank would read other lines of one inherited stream; refused before anything is written."""
    monkeypatch.setattr(sys, "stdin", open(write_lines(tmp_path / "in.txt", LINES), encoding="utf-8"))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert embed("-", tmp_path / "out.hdf5", "--model", model_dir) == 2
    assert "standard input cannot be shared by 2 processes" in one_error_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == [tmp_path / "in.txt"]


def full_disk_after(monkeypatch, calls: int):
    """Writing a dataset (a line's vectors, a copy of them in the merge, an index) raises ENOSPC from the `calls +
    1`-th dataset on, as on a full file system."""
    count = [0]

    def failing(original):
        def write(*args, **kwargs):
            count[0] += 1
            if count[0] > calls:
                raise OSError(errno.ENOSPC, "No space left on device")
            return original(*args, **kwargs)

        return write

    monkeypatch.setattr(h5py.Group, "create_dataset", failing(h5py.Group.create_dataset))
    monkeypatch.setattr(parts_module, "write_vectors", failing(parts_module.write_vectors))
    monkeypatch.setattr(embed_module, "copy_dataset", failing(embed_module.copy_dataset))


@pytest.mark.parametrize("calls, kept", [(12, 2), (30, 4), (0, 0)])
def test_full_disk_stops_with_one_error_line_and_keeps_completed_parts(model_dir, tmp_path, monkeypatch, capsys, calls,
                                                                       kept):
    """Item 4: a part holds 5 sentences (5 datasets and its index): ENOSPC in the third part, in the final merge
    (after 4 parts), or at once. One error line, exit 1, every completed part kept, OUTPUT not written; --resume then
    completes the file as an uninterrupted run writes it."""
    source = write_lines(tmp_path / "in.txt", [f"{line} {key}" for key, line in enumerate(LINES * 3)][:20])
    output = tmp_path / "out.hdf5"
    with monkeypatch.context() as patch:
        full_disk_after(patch, calls)
        assert embed(source, output, "--model", model_dir, "--part-size", 5) == 1
    error = one_error_line(capsys.readouterr().err)
    assert "No space left on device" in error
    partial = tmp_path / "out.hdf5.partial"
    assert not output.exists() and not list(partial.glob("*.tmp"))
    assert len(list(partial.glob("part-*.hdf5"))) == kept
    if kept:
        assert f"the {kept} completed parts are kept in {partial}: rerun with --resume" in error
        assert embed(source, output, "--model", model_dir, "--part-size", 5) == 2  # a plain run is refused
    else:
        assert "nothing was kept" in error and not partial.exists()
    assert embed(source, output, "--model", model_dir, "--resume") == 0
    assert embed(source, tmp_path / "fresh.hdf5", "--model", model_dir) == 0
    assert_same(output, tmp_path / "fresh.hdf5")


def test_a_part_that_does_not_read_back_is_never_renamed_into_place(model_dir, tmp_path, monkeypatch, capsys):
    """Item 4: a file system that loses the index (a part of zeros and an empty index was renamed as complete)."""
    monkeypatch.setattr(parts_module, "write_index", lambda file, index: embed_module.h5py.File.create_dataset(
        file, "sentence_to_index", data=np.array([b"{}"])))
    source = write_lines(tmp_path / "in.txt", LINES)
    assert embed(source, tmp_path / "out.hdf5", "--model", model_dir, "--part-size", 3) == 1
    assert "does not read back as written" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out.hdf5").exists() and not (tmp_path / "out.hdf5.partial").exists()


def test_an_output_in_a_read_only_folder_is_one_error_line(model_dir, tmp_path, monkeypatch, capsys):
    """Item 4: a read-only folder (as root, whom permissions do not stop, creating the folder fails as it would)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    original = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self.parent == folder:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    try:
        assert embed(write_lines(tmp_path / "in.txt", LINES), folder / "out.hdf5", "--model", model_dir) == 2
    finally:
        folder.chmod(0o755)
    assert "writable" in one_error_line(capsys.readouterr().err) and list(folder.iterdir()) == []


def shards(model_dir: Path, source: Path, output: Path, monkeypatch, ranks=(0, 1), model=None):
    """Writes the shards `ranks` of a two-process run without a rendezvous."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ranks:
        monkeypatch.setenv("RANK", str(rank))
        assert embed(source, output, "--model", model or model_dir) == 0
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")


def test_merge_shards_names_the_rank_to_rerun_for_a_truncated_shard(model_dir, tmp_path, monkeypatch, capsys):
    """Item 5."""
    source = write_lines(tmp_path / "in.txt", LINES)
    output = tmp_path / "out.hdf5"
    shards(model_dir, source, output, monkeypatch)
    shard = tmp_path / "out.hdf5.shard-1-of-2"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    assert main(["merge-shards", str(output)]) == 2
    error = one_error_line(capsys.readouterr().err)
    assert f"shard {shard} cannot be read" in error and "rerun rank 1 (RANK=1 WORLD_SIZE=2" in error
    assert not output.exists() and (tmp_path / "out.hdf5.shard-0-of-2").exists()


def test_merge_shards_refuses_shards_of_different_inputs_or_models(model_dir, tmp_path, monkeypatch, capsys):
    """Item 5: same settings, same line count, another input (or another model) for shard 1."""
    source = write_lines(tmp_path / "in.txt", LINES)
    other = write_lines(tmp_path / "other.txt", [line.upper() for line in LINES])
    output = tmp_path / "out.hdf5"
    shards(model_dir, source, output, monkeypatch, ranks=[0])
    shards(model_dir, other, output, monkeypatch, ranks=[1])
    assert main(["merge-shards", str(output)]) == 2
    error = one_error_line(capsys.readouterr().err)
    assert "was written from another input than out.hdf5.shard-0-of-2" in error and "rerun rank 1" in error
    (tmp_path / "out.hdf5.shard-1-of-2").unlink()
    shards(model_dir, source, output, monkeypatch, ranks=[1], model=save_model(tmp_path / "model", seed=1))
    assert main(["merge-shards", str(output)]) == 2
    assert "other settings than out.hdf5.shard-0-of-2 (model (its config or weights))" in capsys.readouterr().err
    assert not output.exists()


def test_merge_shards_with_glob_characters_in_the_output_name(model_dir, tmp_path, monkeypatch):
    """Item 17: `out[1].hdf5` is a name, not a pattern."""
    source = write_lines(tmp_path / "in.txt", LINES)
    output = tmp_path / "out[1].hdf5"
    shards(model_dir, source, output, monkeypatch)
    assert main(["merge-shards", str(output)]) == 0
    assert embed(source, tmp_path / "fresh.hdf5", "--model", model_dir) == 0
    assert_same(output, tmp_path / "fresh.hdf5")


def interrupt_after_parts(monkeypatch, parts: int):
    """Raises KeyboardInterrupt in the writer once `parts` parts are complete, as Ctrl-C would stop the run."""
    original = embed_module.PartWriter.close_part

    def close_part(self, slot):
        original(self, slot)
        if self.completed >= parts:
            raise KeyboardInterrupt

    monkeypatch.setattr(embed_module.PartWriter, "close_part", close_part)


def test_a_second_run_on_the_same_output_is_refused_while_the_first_holds_it(model_dir, tmp_path, monkeypatch,
                                                                            capsys):
    """Item 17: a run holds `OUTPUT.partial/lock`; a second run (--resume or --overwrite) is refused and leaves the
    first's parts alone."""
    source = write_lines(tmp_path / "in.txt", LINES * 3)
    output = tmp_path / "out.hdf5"
    with monkeypatch.context() as patch:
        interrupt_after_parts(patch, 1)
        assert embed(source, output, "--model", model_dir, "--part-size", 4) == 130
    partial = tmp_path / "out.hdf5.partial"
    parts = sorted(partial.glob("part-*.hdf5"))
    assert parts
    capsys.readouterr()
    with open(partial / "lock", "ab") as lock:  # the first run, still writing
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for option in ("--resume", "--overwrite"):
            assert embed(source, output, "--model", model_dir, option) == 2
            assert "another elmo-hf run is writing" in one_error_line(capsys.readouterr().err)
            assert sorted(partial.glob("part-*.hdf5")) == parts
    assert embed(source, output, "--model", model_dir, "--resume") == 0
    assert not partial.exists()


def test_a_failed_run_leaves_no_partial_that_blocks_the_next_run(model_dir, tmp_path, monkeypatch, capsys):
    """Item 10: the model fails before any part is complete (as oneDNN did on a CPU without AVX-512 BF16): one
    error line, exit 1, and the next plain run is not refused."""

    def failing_forward(self, *args, **kwargs):
        raise RuntimeError("could not create a primitive descriptor for the inner product forward propagation")

    source = write_lines(tmp_path / "in.txt", LINES)
    output = tmp_path / "out.hdf5"
    with monkeypatch.context() as patch:
        patch.setattr(ElmoModel, "forward", failing_forward)
        assert embed(source, output, "--model", model_dir) == 1
    assert "the model failed on the batch of lines" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out.hdf5.partial").exists()
    assert embed(source, output, "--model", model_dir) == 0


def test_a_line_or_batch_larger_than_the_memory_is_refused_by_name(model_dir, tmp_path, monkeypatch, capsys):
    """A batch whose layers alone need more than the device's memory is refused before the model runs (the
    allocation could pass and the system kill the run later without a word): a line too long by itself is named with
    its words, a batch of lines that fit alone names --max-tokens; the lines that fit are embedded as always. A
    MemoryError inside the model is one error line too."""
    config = tiny_config()
    layer_bytes = (config.num_layers + 1) * 2 * config.projection_dim * 4
    monkeypatch.setattr(embed_module, "device_memory", lambda device: 30 * layer_bytes)
    lines = ["a b c", " ".join(["w"] * 31), "d e"]
    source = write_lines(tmp_path / "in.txt", lines)
    output = tmp_path / "out.hdf5"
    assert embed(source, output, "--model", model_dir) == 1
    error = one_error_line(capsys.readouterr().err)
    assert "line 2 has 31 words, whose layers alone need" in error and "split that line into sentences" in error
    assert not output.exists() and not (tmp_path / "out.hdf5.partial").exists()

    source = write_lines(tmp_path / "in.txt", [" ".join(["w"] * 10)] * 4)
    assert embed(source, output, "--model", model_dir) == 1
    error = one_error_line(capsys.readouterr().err)
    assert "the batch of lines 1, 2, 3, 4 needs" in error and "lower --max-tokens or --batch-size" in error
    assert embed(source, output, "--model", model_dir, "--max-tokens", 30) == 0
    assert contents(output)[0]["0"].shape == (config.num_layers + 1, 10, 2 * config.projection_dim)

    def failing_forward(self, *args, **kwargs):
        raise MemoryError

    with monkeypatch.context() as patch:
        patch.setattr(ElmoModel, "forward", failing_forward)
        assert embed(source, tmp_path / "other.hdf5", "--model", model_dir, "--max-tokens", 30) == 1
    assert "the model failed on the batch of lines 1" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("options", [[], ["--model", "elmo-en-mini"]])
def test_the_default_model_is_the_packaged_model_offline(tmp_path, monkeypatch, options):
    """Item 11 / issue 26 item 1: no --model, or its name, loads the packaged model offline with no Hub request."""
    import huggingface_hub

    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was asked for the packaged model")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_hub)
    output = tmp_path / "out.hdf5"
    assert embed(write_lines(tmp_path / "in.txt", ["ELMo reads characters ."]), output, *options) == 0
    packaged = ElmoModel.from_pretrained("elmo-en-mini").config
    assert contents(output)[0]["0"].shape == (packaged.num_layers + 1, 4, 2 * packaged.projection_dim)


def test_device_cuda_without_a_gpu_is_one_error_line(model_dir, tmp_path, monkeypatch, capsys):
    """Issue 26 item 5."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert embed(write_lines(tmp_path / "in.txt", LINES), tmp_path / "out.hdf5", "--model", model_dir,
                 "--device", "cuda") == 2
    assert "torch sees no CUDA GPU" in one_error_line(capsys.readouterr().err)
    assert embed(tmp_path / "in.txt", tmp_path / "out.hdf5", "--model", model_dir, "--device", "tpu:7") == 2
    assert "is not a device" in one_error_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == [tmp_path / "in.txt"]


def test_threads_sets_torchs_threads(model_dir, tmp_path):
    """Issue 24 goal 2: --threads N."""
    threads = torch.get_num_threads()
    try:
        assert embed(write_lines(tmp_path / "in.txt", LINES), tmp_path / "out.hdf5", "--model", model_dir,
                     "--threads", 1) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_the_library_function_takes_typed_options_and_refuses_bad_ones(model_dir, tmp_path):
    """Issue 22 item 4: `embed_corpus` is the command without argparse; its errors are ElmoInputError (exit 2)."""
    source = write_lines(tmp_path / "in.txt", LINES)
    summary = embed_corpus(source, tmp_path / "out.hdf5", model=model_dir, layers="top", progress=False)
    assert summary.sentences == len(LINES) - 1 and summary.merged and summary.target == tmp_path / "out.hdf5"
    # the CPU time of the run's threads: each of the three ran, the main thread (the model) within the run's time; no
    # writer process (the default on a machine without the cores for one, and this run's: writers=0 below)
    assert sorted(summary.thread_seconds) == ["main", "reader", "writer", "writer processes"]
    assert min(summary.thread_seconds.values()) >= 0 and 0 < summary.thread_seconds["main"] <= 2 * summary.seconds
    model = ElmoModel.from_pretrained(model_dir).eval()
    with open(source, encoding="latin-1") as stream:  # a text stream: its bytes are read, as UTF-8
        embed_corpus(stream, tmp_path / "pair.hdf5", model=(model, ElmoTokenizer()), layers="top", progress=False)
    assert_same(tmp_path / "pair.hdf5", tmp_path / "out.hdf5")
    with pytest.raises(EmbedError, match="training mode"):
        embed_corpus(source, tmp_path / "bad.hdf5", model=(model.train(), ElmoTokenizer()))
    for options in ({"layers": "bogus"}, {"batch_size": 0}, {"part_size": True}, {"dtype": "int8"}):
        with pytest.raises(EmbedError):
            embed_corpus(source, tmp_path / "bad.hdf5", model=model_dir, **options)
    assert not (tmp_path / "bad.hdf5").exists()


def test_a_disk_that_fills_under_hdf5_is_one_error_line_and_resume_completes(model_dir, tmp_path, monkeypatch,
                                                                             capsys):
    """Item 4, below h5py: the file system refuses bytes once `room` are written (HDF5 itself meets the full disk, as
    on a real one, where it printed thousands of errors and crashed). One error line, exit 1, the parts written before
    kept, and --resume completes the file."""
    room = [30_000]
    original = embed_module.GuardedFile.__init__

    class SmallDisk:
        def __init__(self, raw):
            self.raw = raw

        def write(self, data):
            if len(memoryview(data).cast("B")) > room[0]:
                raise OSError(errno.ENOSPC, "No space left on device")
            room[0] -= len(memoryview(data).cast("B"))
            return self.raw.write(data)

        def __getattr__(self, name):
            return getattr(self.raw, name)

    def init(self, path):
        original(self, path)
        self.raw = SmallDisk(self.raw)

    source = write_lines(tmp_path / "in.txt", [f"{line} {key}" for key, line in enumerate(LINES * 6)])
    output = tmp_path / "out.hdf5"
    with monkeypatch.context() as patch:
        patch.setattr(embed_module.GuardedFile, "__init__", init)
        assert embed(source, output, "--model", model_dir, "--part-size", 5) == 1
    error = one_error_line(capsys.readouterr().err)
    kept = len(list((tmp_path / "out.hdf5.partial").glob("part-*.hdf5")))
    assert "No space left on device" in error and f"the {kept} completed parts are kept" in error and kept >= 1
    assert not output.exists() and not list((tmp_path / "out.hdf5.partial").glob("*.tmp"))
    assert embed(source, output, "--model", model_dir, "--resume") == 0
    assert embed(source, tmp_path / "fresh.hdf5", "--model", model_dir) == 0
    assert_same(output, tmp_path / "fresh.hdf5")


def test_writer_processes_write_the_file_the_writer_thread_writes(model_dir, tmp_path):
    """Issue 25 goal 3: `--writers 2` (two processes writing parts, batches taking turns) gives the file the writer
    thread gives, parts of every size, empty and repeated lines included; the processes' CPU time is reported."""
    source = write_lines(tmp_path / "in.txt", [f"{line} {key % 3}".strip() for key, line in enumerate(LINES * 4)])
    for writers in (0, 2):
        for part_size in (1, 3, 1000):
            summary = embed_corpus(
                source, tmp_path / f"out-{writers}-{part_size}.hdf5", model=model_dir, batch_size=2,
                part_size=part_size, writers=writers, progress=False,
            )
            assert (summary.thread_seconds["writer processes"] > 0) == (writers > 0)
            assert_same(tmp_path / f"out-{writers}-{part_size}.hdf5", tmp_path / "out-0-1.hdf5")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"] + [
        f"out-{writers}-{size}.hdf5" for writers in (0, 2) for size in (1, 1000, 3)
    ]


def test_a_killed_writer_process_is_one_error_line_and_resume_completes(model_dir, tmp_path, monkeypatch, capsys):
    """A writer process killed mid-run (the out-of-memory killer, a user's kill): one error line naming it and the
    part it was writing, no temporary file left, completed parts kept; --resume completes the file."""
    source = write_lines(tmp_path / "in.txt", [f"{line} {key}" for key, line in enumerate(LINES * 3)])
    output = tmp_path / "out.hdf5"
    add, calls = parts_module.WriterProcess.add, []

    def add_then_die(self, lines):
        calls.append(self)
        if len(calls) == 6:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        add(self, lines)

    with monkeypatch.context() as patch:
        patch.setattr(parts_module.WriterProcess, "add", add_then_die)
        assert embed(source, output, "--model", model_dir, "--writers", 2, "--batch-size", 1, "--part-size", 2) == 1
    error = one_error_line(capsys.readouterr().err)
    assert re.search(r"the writer process \d+ was killed by signal 9 while writing \S+part-\d{6}\.tmp", error), error
    partial = tmp_path / "out.hdf5.partial"
    assert not output.exists() and not list(partial.glob("*.tmp")) and list(partial.glob("part-*.hdf5"))
    assert embed(source, output, "--model", model_dir, "--resume", "--writers", 2) == 0
    assert embed(source, tmp_path / "fresh.hdf5", "--model", model_dir) == 0
    assert_same(output, tmp_path / "fresh.hdf5")


@pytest.mark.parametrize("writers", [0, 2])
def test_a_file_size_limit_stops_the_writers_with_one_error_line(model_dir, tmp_path, capsys, writers):
    """A real write error, no monkeypatching (a file size limit, `ulimit -f`, which the writer processes inherit:
    writes past it fail with EFBIG as a full disk fails with ENOSPC): one error line naming the part file, exit 1,
    nothing half-written left; --resume without the limit completes the file."""
    source = write_lines(tmp_path / "in.txt", [f"{line} {key}" for key, line in enumerate(LINES * 4)])
    output = tmp_path / "out.hdf5"
    assert embed(source, tmp_path / "fresh.hdf5", "--model", model_dir) == 0
    limit = (tmp_path / "fresh.hdf5").stat().st_size // 4
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        status = embed(source, output, "--model", model_dir, "--writers", writers)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert status == 1
    error = one_error_line(capsys.readouterr().err)
    assert re.search(r"cannot write \S+part-\d{6}\.tmp \(File too large\)", error), error
    assert not output.exists() and not list((tmp_path / "out.hdf5.partial").glob("*.tmp"))
    assert embed(source, output, "--model", model_dir, "--resume", "--writers", writers) == 0
    assert_same(output, tmp_path / "fresh.hdf5")


def test_an_interrupted_run_with_writer_processes_keeps_its_complete_parts(model_dir, tmp_path, monkeypatch):
    """Ctrl-C with writer processes: the parts closed before it are complete and kept, the open ones dropped, no
    temporary file left; --resume completes the file."""
    source = write_lines(tmp_path / "in.txt", [f"{line} {key}" for key, line in enumerate(LINES * 3)])
    output = tmp_path / "out.hdf5"
    with monkeypatch.context() as patch:
        interrupt_after_parts(patch, 2)
        assert embed(source, output, "--model", model_dir, "--part-size", 3, "--batch-size", 2, "--writers", 2) == 130
    partial = tmp_path / "out.hdf5.partial"
    assert len(list(partial.glob("part-*.hdf5"))) >= 2 and not list(partial.glob("*.tmp"))
    assert embed(source, output, "--model", model_dir, "--resume", "--writers", 2) == 0
    assert embed(source, tmp_path / "fresh.hdf5", "--model", model_dir) == 0
    assert_same(output, tmp_path / "fresh.hdf5")


@pytest.mark.parametrize("writers", [-1, 1.5, True, "2", 10**6])
def test_writers_must_be_a_whole_number_up_to_the_cpus(model_dir, tmp_path, writers):
    with pytest.raises(EmbedError, match="--writers must be a whole number from 0"):
        embed_corpus(write_lines(tmp_path / "in.txt", LINES), tmp_path / "out.hdf5", model=model_dir, writers=writers)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]


@pytest.mark.parametrize("cores, local_world_size, writers", [
    (2, None, 0), (3, None, 0), (4, None, 1), (8, None, 3), (16, None, 4), (64, None, 4),
    (16, "2", 3), (16, "8", 0), (16, "bogus", 4),
])
def test_the_default_writers_leave_the_model_and_the_reader_a_core_each(monkeypatch, cores, local_world_size,
                                                                      writers):
    """One writer process per two cores beyond two, at most four; under torchrun the processes of a machine share
    its cores (a LOCAL_WORLD_SIZE that is no count is ignored: it only sets a default)."""
    monkeypatch.setattr(embed_module, "available_cores", lambda: cores)
    if local_world_size is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_world_size)
    assert embed_module.default_writers() == writers
