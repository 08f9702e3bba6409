"""A property-based fuzz of `elmo-hf embed` (issue 23): random inputs (duplicates, empty lines), runs interrupted at
random points (after a random number of parts, or during the final merge, sometimes leaving a half-written part), the
input edited, extended or cut between runs, sometimes resumed with another model, and resumed until done. The file
must equal an uninterrupted run on the final input, or the command must refuse (exit 2, one `error:` line): never a
different file with exit 0."""

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import tiny_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.cli import main
from elmo_hf.corpus import embed as embed_module

WORDS = ["the", "cat", "a", "sat", "über", "x", "mat", "."]
MAX_EXAMPLES = 30

line = st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join)
change = st.one_of(
    st.just(("none",)),
    st.tuples(st.just("edit"), st.integers(0, 100), line),
    st.tuples(st.just("append"), st.lists(line, min_size=1, max_size=4)),
    st.tuples(st.just("truncate"), st.integers(0, 100)),
    st.tuples(st.just("duplicate"), st.integers(0, 100)),
)
# An interruption: after this many complete parts, or during the merge; and whether a half-written part is left.
interruption = st.tuples(st.one_of(st.integers(0, 3), st.just("merge")), st.booleans())
run = st.fixed_dictionaries(
    {
        "interruption": st.one_of(st.none(), interruption),
        "change": change,
        "batch_size": st.integers(1, 5),
        "part_size": st.integers(1, 4),
        "other_model": st.booleans(),
    }
)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path]:
    """Two tiny models of one architecture with different weights."""
    folders = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        folder = tmp_path_factory.mktemp(f"model-{seed}")
        ElmoModel(tiny_config()).eval().save_pretrained(folder)
        ElmoTokenizer().save_pretrained(folder)
        folders.append(folder)
    return folders[0], folders[1]


def apply(lines: list[str], edit: tuple) -> list[str]:
    kind, *values = edit
    if kind == "edit" and lines:
        position, text = values
        return [text if key == position % len(lines) else value for key, value in enumerate(lines)]
    if kind == "append":
        return lines + values[0]
    if kind == "truncate":
        return lines[: values[0] % (len(lines) + 1)]
    if kind == "duplicate" and lines:
        return lines + [lines[values[0] % len(lines)]]
    return lines


def interrupt(monkeypatch, point: int | str, half_written: bool):
    """Stops the next run with KeyboardInterrupt (as Ctrl-C) after `point` complete parts, or just before the merged
    file is renamed; `half_written` also leaves a part cut short, as a kill in the middle of a write would."""
    close_part, verify_written = embed_module.PartWriter.close_part, embed_module.verify_written

    def stop(folder: Path):
        if half_written:
            (folder / "part-999999.tmp").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
        raise KeyboardInterrupt

    def closing(self, slot):
        close_part(self, slot)
        if point != "merge" and self.completed >= point:
            stop(self.folder)

    def verifying(path: Path, shapes, index):
        verify_written(path, shapes, index)
        if point == "merge" and path.name == embed_module.MERGE_TEMPORARY:
            stop(path.parent)

    monkeypatch.setattr(embed_module.PartWriter, "close_part", closing)
    monkeypatch.setattr(embed_module, "verify_written", verifying)


def contents(path: Path) -> dict:
    with h5py.File(path, "r") as file:
        return {
            "index": json.loads(file["sentence_to_index"][0]),
            "vectors": {name: file[name][...] for name in file if name.isdigit()},
            "hashes": {name: file[name].attrs[embed_module.LINE_ATTR] for name in file if name.isdigit()},
            "input": json.loads(file.attrs[embed_module.INPUT_ATTR]),
        }


def embed(source: Path, output: Path, model: Path, *options) -> int:
    return main(["embed", str(source), str(output), "--model", str(model), "--no-progress", *map(str, options)])


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(line, max_size=12), runs=st.lists(run, min_size=1, max_size=3))
def test_interrupted_and_resumed_runs_equal_an_uninterrupted_run_or_are_refused(
    models, tmp_path_factory, monkeypatch, capsys, lines, runs
):
    folder = tmp_path_factory.mktemp("fuzz")
    source, output = folder / "in.txt", folder / "out.hdf5"
    source.write_text("".join(text + "\n" for text in lines), encoding="utf-8")
    for number, step in enumerate(runs):
        started = output.exists() or (folder / "out.hdf5.partial").exists()
        model = models[1] if step["other_model"] and started else models[0]
        options = ["--batch-size", step["batch_size"], "--part-size", step["part_size"]]
        with monkeypatch.context() as patch:
            if step["interruption"] is not None:
                interrupt(patch, *step["interruption"])
            status = embed(source, output, model, *options, *(["--resume"] if number else []))
        err = capsys.readouterr().err
        if model == models[1]:
            assert status == 2 and "model (its config or weights)" in err, err
        elif step["interruption"] is None or status == 0:
            assert status == 0, err
        else:
            assert status == 130, err
        assert "Traceback" not in err
        lines = apply(lines, step["change"])
        source.write_text("".join(text + "\n" for text in lines), encoding="utf-8")
    status = embed(source, output, models[0], "--resume")
    assert status == 0, capsys.readouterr().err
    reference = folder / "reference.hdf5"
    assert embed(source, reference, models[0]) == 0
    actual, expected = contents(output), contents(reference)
    assert actual["index"] == expected["index"] and actual["hashes"] == expected["hashes"]
    assert actual["input"] == expected["input"]
    keys = [str(key) for key in range(len(lines))]
    assert sorted(actual["vectors"], key=int) == sorted(expected["vectors"], key=int) == keys
    for name, vectors in expected["vectors"].items():
        assert actual["vectors"][name].shape == vectors.shape
        np.testing.assert_allclose(actual["vectors"][name], vectors, atol=1e-6, rtol=1e-5, err_msg=name)
    assert not list(folder.glob("*.partial"))
