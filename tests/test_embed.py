"""`elmo-hf embed` and `elmo-hf merge-shards`: the file against the model, every --layers choice, resume after a killed
run, two processes and a merge, bad input."""

import itertools
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import fixture_sentences
from safetensors.torch import load_file, save_file
from transformers.modeling_outputs import BaseModelOutput

from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.cli import main
from elmo_hf.corpus import embed as embed_module
from elmo_hf.corpus.embed import (
    EmbedRunError,
    NonFiniteVectors,
    embed_corpus,
    gather_vectors,
    mix_for,
    select_layers,
)
from elmo_hf.corpus.parts import write_vectors

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = [" ".join(words) for batch in fixture_sentences("allennlp") for words in batch]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def corpus(count: int) -> list[str]:
    """`count` lines: the fixture sentences, each later pass cut shorter so lengths vary, and an empty line."""
    lines = [SENTENCES[i % len(SENTENCES)].split() for i in range(count)]
    lines = [" ".join(words[: max(1, len(words) - i // len(SENTENCES))]) for i, words in enumerate(lines)]
    lines[count // 3] = ""
    return lines


def read_file(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    with h5py.File(path, "r") as file:
        vectors = {name: file[name][...] for name in file if name != "sentence_to_index"}
        index = json.loads(file["sentence_to_index"][0])
    return vectors, index


def assert_same_file(actual: Path, expected: Path):
    """The two files hold the same sentences, and vectors that agree as the originals' own test asks; on failure,
    every line that disagrees is described (`disagreement`), not only the first."""
    actual_vectors, actual_index = read_file(actual)
    expected_vectors, expected_index = read_file(expected)
    assert actual_index == expected_index
    assert sorted(actual_vectors) == sorted(expected_vectors)
    for name, vectors in expected_vectors.items():
        assert actual_vectors[name].shape == vectors.shape and actual_vectors[name].dtype == vectors.dtype, name
    disagreements = [
        disagreement(name, actual_vectors[name], vectors)
        for name, vectors in expected_vectors.items()
        if not np.allclose(actual_vectors[name], vectors, atol=1e-6, rtol=1e-5)
    ]
    assert not disagreements, f"{len(disagreements)} lines disagree:\n" + "\n".join(disagreements)


def disagreement(name: str, actual: np.ndarray, expected: np.ndarray) -> str:
    """Where line `name`'s vectors `(layers, words, dim)` (or `(words, dim)`) leave the tolerance: for each layer and
    half of the vector ([forward; backward]), the words outside it, how many values and the largest difference. A rare
    disagreement is told apart by its place (one direction from one step on, or everything)."""
    labels = [f"layer {layer}" for layer in range(actual.shape[0])] if actual.ndim == 3 else ["vectors"]
    actual, expected = (np.atleast_3d(array.T).T for array in (actual, expected))  # (layers, words, dim)
    outside = ~np.isclose(actual, expected, atol=1e-6, rtol=1e-5)
    half = actual.shape[-1] // 2
    places = []
    for layer, label in enumerate(labels):
        for direction, columns in (("forward", slice(None, half)), ("backward", slice(half, None))):
            words = np.flatnonzero(outside[layer, :, columns].any(-1))
            if words.size:
                largest = np.abs(actual[layer, :, columns] - expected[layer, :, columns]).max()
                places.append(
                    f"{label} {direction}: words {words.min()}-{words.max()} of {actual.shape[1]}, "
                    f"{int(outside[layer, :, columns].sum())} values, largest difference {largest:.3g}"
                )
    return f"line {name}: " + "; ".join(places)


def model_layers(model_dir: Path, sentence: list[str]) -> np.ndarray:
    """`(num_layers + 1, words, dim)` for one sentence, computed alone."""
    model = ElmoModel.from_pretrained(model_dir).eval()
    inputs = ElmoTokenizer.from_pretrained(model_dir)([sentence], is_split_into_words=True, return_tensors="pt")
    with torch.inference_mode():
        return torch.stack(model(**inputs, output_hidden_states=True).hidden_states)[:, 0].numpy()


def embed(*arguments) -> int:
    return main(["embed", *map(str, arguments), "--no-progress"])


@pytest.fixture(scope="module")
def model_dir(converted) -> Path:
    return converted["allennlp"]


def test_vectors_equal_the_models_outputs_with_allennlps_layout(model_dir, tmp_path):
    lines = SENTENCES[:7] + ["", "  spaced   out  "] + SENTENCES[:2]
    output = tmp_path / "vectors.hdf5"
    assert embed(write_lines(tmp_path / "in.txt", lines), output, "--model", model_dir, "--batch-size", 3) == 0
    vectors, index = read_file(output)
    assert sorted(vectors, key=int) == [str(key) for key in range(len(lines))]
    for key, line in enumerate(lines):
        words = line.split()
        if not words:
            assert vectors[str(key)].shape == (3, 0, 32)
            continue
        assert vectors[str(key)].dtype == np.float32
        np.testing.assert_allclose(vectors[str(key)], model_layers(model_dir, words), atol=1e-6, rtol=1e-5)
    # allennlp's index: stripped sentence -> key of its last line, every key a dataset.
    assert index[""] == "7" and index["spaced   out"] == "8" and index[SENTENCES[0]] == "9"
    assert set(index.values()) <= set(vectors) and len(index) == len(set(line.strip() for line in lines))
    assert not list(tmp_path.glob("*.partial"))


def test_layer_choices_shapes_and_values(model_dir, tmp_path):
    lines = SENTENCES[:5]
    source = write_lines(tmp_path / "in.txt", lines)
    expected_all = [model_layers(model_dir, line.split()) for line in lines]
    weights, gamma = [0.2, 0.3, 0.5], 2.0
    expected = {
        "top": [layers[-1] for layers in expected_all],
        "average": [layers.mean(0) for layers in expected_all],
        "mix": [gamma * np.tensordot(weights, layers, axes=1) for layers in expected_all],
    }
    for choice, options in (("top", []), ("average", []), ("mix", ["--mix-weights", "0.2,0.3,0.5", "--gamma", "2"])):
        output = tmp_path / f"{choice}.hdf5"
        assert embed(source, output, "--model", model_dir, "--layers", choice, *options) == 0
        vectors, _ = read_file(output)
        for key, values in enumerate(expected[choice]):
            assert vectors[str(key)].shape == (len(lines[key].split()), 32)
            np.testing.assert_allclose(vectors[str(key)], values, atol=1e-6, rtol=1e-5)
    assert embed(source, tmp_path / "top16.hdf5", "--model", model_dir, "--top", "--dtype", "float16") == 0
    vectors, _ = read_file(tmp_path / "top16.hdf5")
    assert vectors["0"].dtype == np.float16
    np.testing.assert_allclose(vectors["0"], expected["top"][0], atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("layers", ["all", "top", "average"])
def test_gathered_vectors_are_each_rows_words_in_one_host_copy(layers):
    """Each sentence's array is bitwise its row of `select_layers`, cut to its words, converted to the dtype asked
    for, and a contiguous view of one copy; padding (here NaN and overflowing values) is never read or checked.
    `page_locked` (the embed command's copy from a GPU) changes nothing for tensors on a CPU."""
    generator = torch.Generator().manual_seed(0)
    lengths = [6, 0, 3, 1]
    hidden = [torch.randn(4, 6, 8, generator=generator) for _ in range(3)]
    attention_mask = torch.tensor([[int(position < words) for position in range(6)] for words in lengths])
    for layer in hidden:
        layer[attention_mask == 0] = torch.tensor([math.nan, 1e6]).repeat(4)
    outputs = BaseModelOutput(last_hidden_state=hidden[-1], hidden_states=tuple(hidden))
    mix = mix_for(layers, None, 1.0, 3)
    selected = select_layers(outputs, attention_mask, layers, mix)
    for dtype, page_locked in itertools.product((torch.float32, torch.float16), (False, True)):
        arrays = gather_vectors(outputs, attention_mask, lengths, layers, mix, dtype, page_locked=page_locked).result()
        bases = {id(array.base) for array in arrays}
        assert len(bases) == 1 and None not in bases
        for row, (words, array) in enumerate(zip(lengths, arrays)):
            expected = (selected[row, :, :words] if layers == "all" else selected[row, :words]).to(dtype).numpy()
            assert array.shape == expected.shape and array.dtype == expected.dtype and array.flags.c_contiguous
            assert array.tobytes() == expected.tobytes()


def test_write_vectors_writes_what_h5pys_create_dataset_writes(tmp_path):
    """Each line's dataset, written with types and properties made once, is what `create_dataset(key, data=vectors)`
    and a line-hash attribute write: dtype, shape, bytes, contiguous layout without modification times, the hash a
    variable-length UTF-8 string. Several dtypes, shapes and files in turn (the made-once objects shared by all)."""
    rng = np.random.default_rng(0)
    arrays = [
        rng.standard_normal((3, 5, 8)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float16),
        np.zeros((0, 8), np.float16), rng.standard_normal((3, 5, 8)).astype(np.float32)[:, ::2],
    ]  # fmt: skip
    for round_ in range(2):
        ours, theirs = h5py.File(tmp_path / f"ours{round_}.h5", "w"), h5py.File(tmp_path / f"theirs{round_}.h5", "w")
        with ours, theirs:
            for key, vectors in enumerate(arrays):
                write_vectors(ours, key, vectors, f"hash {key}")
                dataset = theirs.create_dataset(str(key), data=vectors, track_times=False)
                dataset.attrs["elmo_hf_line_sha256"] = f"hash {key}"
            for key, vectors in enumerate(arrays):
                mine, expected = ours[str(key)], theirs[str(key)]
                assert mine.dtype == vectors.dtype and mine.shape == vectors.shape
                np.testing.assert_array_equal(mine[()], vectors)
                assert mine.id.get_type() == expected.id.get_type()
                assert mine.id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
                assert expected.id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
                assert h5py.h5o.get_info(mine.id).ctime == h5py.h5o.get_info(expected.id).ctime == 0  # no times
                assert dict(mine.attrs) == dict(expected.attrs) == {"elmo_hf_line_sha256": f"hash {key}"}
                attribute = h5py.h5a.open(mine.id, b"elmo_hf_line_sha256")
                assert attribute.get_type() == h5py.h5a.open(expected.id, b"elmo_hf_line_sha256").get_type()
                assert attribute.get_type().is_variable_str() and attribute.get_type().get_cset() == h5py.h5t.CSET_UTF8


@pytest.mark.parametrize("value, dtype", [(math.nan, torch.float32), (-math.inf, torch.float32), (7e4, torch.float16)])
def test_gathered_vectors_refuse_a_vector_that_is_not_finite_in_the_dtype(value, dtype):
    hidden = [torch.zeros(2, 3, 4) for _ in range(3)]
    hidden[1][1, 1, 2] = value
    outputs = BaseModelOutput(last_hidden_state=hidden[-1], hidden_states=tuple(hidden))
    with pytest.raises(NonFiniteVectors):
        gather_vectors(outputs, torch.ones(2, 3, dtype=torch.long), [3, 2], "all", None, dtype).result()
    assert len(gather_vectors(outputs, torch.ones(2, 3, dtype=torch.long), [3, 1], "all", None, dtype).result()) == 2


def test_non_finite_vectors_stop_the_run_naming_the_lines(model_dir, tmp_path, capsys):
    model = ElmoModel.from_pretrained(model_dir).eval()
    with torch.no_grad():
        next(model.parameters()).fill_(math.nan)
    source = write_lines(tmp_path / "in.txt", SENTENCES[:3])
    message = r"non-finite vectors for a sentence among lines ([123], ){2}[123]; check the model; no part was complete"
    with pytest.raises(EmbedRunError, match=message):
        embed_corpus(source, tmp_path / "out.hdf5", model=(model, ElmoTokenizer.from_pretrained(model_dir)),
                     progress=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]


def test_the_next_batch_is_queued_before_the_last_ones_vectors_are_awaited(model_dir, tmp_path, monkeypatch):
    """One batch in flight: the model gets batch N + 1 (the tokenizer's host tensors, which it reads where they are)
    before batch N's vectors are awaited, so that a GPU computes N + 1 while N is copied and written; each batch is
    awaited once, in order. A batch whose vectors are not finite is named as itself, though the next one was queued,
    and the parts completed before it are kept."""
    model = ElmoModel.from_pretrained(model_dir).eval()
    events = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: events.append(("call", kwargs["input_ids"].device.type)), with_kwargs=True
    )
    awaited = embed_module.PendingVectors.result
    monkeypatch.setattr(embed_module.PendingVectors, "result", lambda self: events.append(("await",)) or awaited(self))
    source = write_lines(tmp_path / "in.txt", SENTENCES[:8])
    pair = (model, ElmoTokenizer.from_pretrained(model_dir))
    embed_corpus(source, tmp_path / "out.hdf5", model=pair, batch_size=2, progress=False)
    assert events == [("call", "cpu"), ("call", "cpu"), ("await",), ("call", "cpu"), ("await",), ("call", "cpu"),
                      ("await",), ("await",)]  # fmt: skip
    calls = []

    def poison_the_second_batch(module, args, kwargs, outputs):
        calls.append(None)
        if len(calls) == 2:
            outputs.hidden_states[1][0, 0, 0] = math.nan

    model.register_forward_hook(poison_the_second_batch, with_kwargs=True)
    # the first batch's two lines are written (a part each), the second batch is named
    message = r"non-finite vectors for a sentence among lines \d, \d; check the model; the 2 completed parts are kept"
    with pytest.raises(EmbedRunError, match=message):
        embed_corpus(source, tmp_path / "poisoned.hdf5", model=pair, batch_size=2, part_size=1, progress=False)
    assert len(calls) == 3  # the third batch was queued before the second's vectors were awaited


def test_default_split_and_standard_input(model_dir, tmp_path, monkeypatch):
    raw = "Hello, world! It's ELMo."
    tokenizer = ElmoTokenizer.from_pretrained(model_dir)
    monkeypatch.setattr(sys, "stdin", open(write_lines(tmp_path / "raw.txt", [raw]), encoding="utf-8"))
    assert embed("-", tmp_path / "out.hdf5", "--model", model_dir, "--split", "default") == 0
    vectors, index = read_file(tmp_path / "out.hdf5")
    np.testing.assert_allclose(vectors["0"], model_layers(model_dir, tokenizer.tokenize(raw)), atol=1e-6, rtol=1e-5)
    assert vectors["0"].shape[1] == 9 and index == {raw: "0"}


def run_embed_process(arguments: list, env: dict | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "elmo_hf.cli", "embed", *map(str, arguments), "--no-progress"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_killed_run_leaves_no_output_and_resume_completes_it(model_dir, tmp_path):
    source = write_lines(tmp_path / "in.txt", corpus(400))
    output = tmp_path / "vectors.hdf5"
    process = run_embed_process([source, output, "--model", model_dir, "--batch-size", 2, "--part-size", 20])
    partial = tmp_path / "vectors.hdf5.partial"
    deadline = time.monotonic() + 300
    while len(list(partial.glob("part-*.hdf5"))) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not output.exists()  # never a partly written OUTPUT
    parts = sorted(partial.glob("part-*.hdf5"))
    for part in parts:  # every part that exists is complete and readable
        with h5py.File(part, "r") as file:
            assert "sentence_to_index" in file

    assert embed(source, output, "--model", model_dir, "--batch-size", 2, "--part-size", 20) == 2  # refuses
    assert embed(source, output, "--model", model_dir, "--batch-size", 5, "--resume") == 0
    assert not partial.exists()
    reference = tmp_path / "reference.hdf5"
    assert embed(source, reference, "--model", model_dir) == 0
    assert_same_file(output, reference)

    # Resuming a complete file recomputes nothing and leaves it equal.
    process = run_embed_process([source, output, "--model", model_dir, "--resume"])
    _, stderr = process.communicate()
    assert process.returncode == 0 and "embedded 0 sentences" in stderr, stderr
    assert_same_file(output, reference)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_processes_write_shards_that_merge_into_the_single_process_file(model_dir, tmp_path, monkeypatch):
    source = write_lines(tmp_path / "in.txt", corpus(61) + SENTENCES[:3])
    reference = tmp_path / "reference.hdf5"
    assert embed(source, reference, "--model", model_dir) == 0

    # As torchrun starts them: RANK, WORLD_SIZE and a rendezvous; rank 0 merges when both shards are written.
    output = tmp_path / "vectors.hdf5"
    rendezvous = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    processes = [
        run_embed_process([source, output, "--model", model_dir], env={**rendezvous, "RANK": str(rank)})
        for rank in range(2)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
    assert_same_file(output, reference)
    assert not list(tmp_path.glob("vectors.hdf5.*"))

    # Without a rendezvous each process leaves its shard, and merge-shards joins them.
    output = tmp_path / "shards.hdf5"
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        assert embed(source, output, "--model", model_dir) == 0
        assert (tmp_path / f"shards.hdf5.shard-{rank}-of-2").is_file()
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")
    assert main(["merge-shards", str(output)]) == 0
    assert_same_file(output, reference)
    assert not list(tmp_path.glob("shards.hdf5.*"))


def test_merge_shards_refuses_an_incomplete_set(model_dir, tmp_path, monkeypatch, capsys):
    source = write_lines(tmp_path / "in.txt", SENTENCES[:4])
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "1")
    assert embed(source, tmp_path / "out.hdf5", "--model", model_dir) == 0
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")
    assert main(["merge-shards", str(tmp_path / "out.hdf5")]) == 2
    assert "missing shards: out.hdf5.shard-0-of-3, out.hdf5.shard-2-of-3" in capsys.readouterr().err
    assert not (tmp_path / "out.hdf5").exists() and (tmp_path / "out.hdf5.shard-1-of-3").exists()


def test_undecodable_bytes_name_the_line_or_are_replaced(model_dir, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_bytes(b"good line\nbad \xff byte\n")
    assert embed(source, tmp_path / "out.hdf5", "--model", model_dir) == 2
    error = capsys.readouterr().err
    assert "in.txt, line 2: byte 0xff at byte 4 of the line is not UTF-8" in error and "--errors replace" in error
    assert not (tmp_path / "out.hdf5").exists() and not (tmp_path / "out.hdf5.partial").exists()
    assert embed(source, tmp_path / "out.hdf5", "--model", model_dir, "--errors", "replace") == 0
    _, index = read_file(tmp_path / "out.hdf5")
    assert index == {"good line": "0", "bad \ufffd byte": "1"}


def test_a_byte_order_mark_changes_nothing(model_dir, tmp_path):
    """A UTF-8 byte-order mark (some editors start a file with it) is not part of the first word: the vectors and
    the index are those of the file without it."""
    outputs = []
    for name, start in (("plain", b""), ("marked", b"\xef\xbb\xbf")):
        source = tmp_path / f"{name}.txt"
        source.write_bytes(start + "\n".join(SENTENCES[:2]).encode() + b"\n")
        assert embed(source, tmp_path / f"{name}.hdf5", "--model", model_dir) == 0
        outputs.append(read_file(tmp_path / f"{name}.hdf5"))
    (plain, plain_index), (marked, marked_index) = outputs
    assert marked_index == plain_index and set(marked) == set(plain)
    for key in plain:
        np.testing.assert_array_equal(marked[key], plain[key])


def test_existing_output_is_refused_and_kept(model_dir, tmp_path, capsys):
    source = write_lines(tmp_path / "in.txt", SENTENCES[:2])
    output = tmp_path / "out.hdf5"
    output.write_bytes(b"precious")
    assert embed(source, output, "--model", model_dir) == 2
    assert "exists; pass --resume" in capsys.readouterr().err and output.read_bytes() == b"precious"
    assert embed(source, output, "--model", model_dir, "--overwrite") == 0
    assert set(read_file(output)[0]) == {"0", "1"}
    assert embed(source, source, "--model", model_dir, "--overwrite") == 2
    assert "is the input file" in capsys.readouterr().err and source.read_text().startswith(SENTENCES[0])


def test_overwrite_never_replaces_a_model_file_nor_a_special_file(model_dir, tmp_path, capsys, monkeypatch):
    """--overwrite replaces earlier results only: not a file of the model's folder, a pipe (the finished file is
    renamed over OUTPUT, so a device such as /dev/null would become a file) or a folder (`.` and `/` too, which have
    no name to write beside); a pipe as input is refused too (the input is read twice); merge-shards' OUTPUT alike."""
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    weights = (model / "model.safetensors").read_bytes()
    source = write_lines(tmp_path / "in.txt", SENTENCES[:1])
    pipe, folder = tmp_path / "pipe", tmp_path / "folder"
    os.mkfifo(pipe)
    folder.mkdir()
    capsys.readouterr()
    for arguments, message in (
        ([source, model / "model.safetensors"], "is a file of"),
        ([source, pipe], "is not a regular file"),
        ([pipe, tmp_path / "out.hdf5"], "is not a regular file (a pipe or a device); give a file, or -"),
        ([source / "out.hdf5"], "lies under"),
        ([folder], f"OUTPUT {folder} is a folder; give a file path such as {folder / 'vectors.hdf5'}"),
        ([Path(".")], "OUTPUT . is a folder; give a file path such as vectors.hdf5"),
        ([Path("/")], "OUTPUT / is a folder; give a file path such as /vectors.hdf5"),
    ):
        arguments = arguments if len(arguments) == 2 else [source, *arguments]
        assert embed(*arguments, "--model", model, "--overwrite") == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.splitlines()) == 1 and message in err, err
    assert main(["merge-shards", str(folder), "--overwrite"]) == 2
    assert "is a folder" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    for output in (".", "/"):  # a shard is named after OUTPUT, which these have no name for
        assert embed(source, output, "--model", model, "--overwrite") == 2
        example = Path(output) / "vectors.hdf5"
        assert capsys.readouterr().err == f"error: OUTPUT {output} is a folder; give a file path such as {example}.\n"
    assert (model / "model.safetensors").read_bytes() == weights and pipe.is_fifo() and folder.is_dir()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["folder", "in.txt", "model", "pipe"]


def test_resume_with_other_settings_is_refused(model_dir, tmp_path, capsys):
    source = write_lines(tmp_path / "in.txt", SENTENCES[:2])
    output = tmp_path / "out.hdf5"
    assert embed(source, output, "--model", model_dir, "--top") == 0
    assert embed(source, output, "--model", model_dir, "--average", "--resume") == 2
    assert "other settings (layers='top')" in capsys.readouterr().err
    assert not output.with_name("out.hdf5.partial").exists()  # the refusal left nothing behind


def _damaged_copy(model_dir: Path, folder: Path, damage: str) -> Path:
    """A copy of a model folder whose config.json or weights file is damaged as `damage` says."""
    shutil.copytree(model_dir, folder)
    weights, config = folder / "model.safetensors", json.loads((folder / "config.json").read_text())
    if damage == "a weight missing":
        tensors = load_file(weights)
        del tensors["bilm.layers.1.forward_cell.projection.weight"]
        save_file(tensors, weights, metadata={"format": "pt"})
    elif damage == "more layers":
        (folder / "config.json").write_text(json.dumps({**config, "num_layers": 3}))
    elif damage == "another width":
        (folder / "config.json").write_text(json.dumps({**config, "projection_dim": 2 * config["projection_dim"]}))
    elif damage == "weights truncated":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif damage == "config a list":
        (folder / "config.json").write_text("[]")
    elif damage == "no config":
        (folder / "config.json").unlink()
    elif damage == "fewer characters":
        (folder / "config.json").write_text(json.dumps({**config, "max_characters_per_token": 20}))
    return folder


@pytest.mark.parametrize(
    "damage, message",
    [
        ("a weight missing", "its weights lack bilm.layers.1.forward_cell.projection.weight;"),
        ("more layers", "its weights lack bilm.layers.2."),
        ("another width", "its weights hold .* in another shape than its config.json says"),
        ("weights truncated", "cannot be loaded \\(The weights of .* cannot be read \\(Error while deserializing"),
        ("config a list", "config.json holds a JSON list, not an object"),
        ("no config", "the folder has no config.json"),
        ("fewer characters", "writes 50 ids per word but its model reads 20"),
    ],
)
def test_a_model_folder_whose_files_do_not_agree_is_refused(model_dir, tmp_path, capsys, damage, message):
    """transformers would start a missing or reshaped weight at random (a warning the command's user never sees) and
    fail with a traceback on unreadable files: one error line, exit 2, nothing written."""
    folder = _damaged_copy(model_dir, tmp_path / "model", damage)
    source, output = write_lines(tmp_path / "in.txt", SENTENCES[:1]), tmp_path / "out.hdf5"
    capsys.readouterr()
    assert embed(source, output, "--model", folder) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and re.search(message, err), err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "model"]


def test_a_model_that_is_not_elmo_is_refused(tmp_path, capsys):
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    source = write_lines(tmp_path / "in.txt", SENTENCES[:1])
    assert embed(source, tmp_path / "out.hdf5", "--model", folder) == 2
    assert "holds a 'bert' model, not ELMo" in capsys.readouterr().err
    assert embed(source, tmp_path / "out.hdf5", "--model", tmp_path / "nowhere") == 2
    assert "cannot load a model from" in capsys.readouterr().err
    assert not (tmp_path / "out.hdf5").exists()


@pytest.mark.parametrize(
    "options, message",
    [
        (["--layers", "mix"], "--layers mix needs --mix-weights"),
        (["--top", "--gamma", "2"], "apply to --layers mix only"),
        (["--resume", "--overwrite"], "exclude each other"),
        (["--batch-size", "0"], "--batch-size must be a positive integer"),
        (["--threads", "0"], "--threads 0: must be a positive integer"),
        (["--layers", "mix", "--mix-weights", "1,0,0", "--gamma", "nan"], "--gamma must be a finite number"),
        (["--device", "meta"], "--device meta holds no data"),
    ],
)
def test_bad_arguments(model_dir, tmp_path, capsys, options, message):
    source = write_lines(tmp_path / "in.txt", SENTENCES[:1])
    assert embed(source, tmp_path / "out.hdf5", "--model", model_dir, *options) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "out.hdf5").exists()


def test_mix_weights_that_are_not_numbers_are_named(model_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        embed(tmp_path / "in.txt", tmp_path / "out.hdf5", "--layers", "mix", "--mix-weights", ",,,")
    assert exited.value.code == 2
    assert "--mix-weights: ',,,' is not a list of numbers such as 0.2,0.3,0.5" in capsys.readouterr().err


@pytest.mark.parametrize(
    "weights, message", [("0.5,0.5", "needs 3 weights"), ("0.5,0.5,0.5", "must sum to 1"), ("-1,1,1", "non-negative")]
)
def test_bad_mix_weights(model_dir, tmp_path, capsys, weights, message):
    source = write_lines(tmp_path / "in.txt", SENTENCES[:1])
    options = ["--layers", "mix", f"--mix-weights={weights}"]
    assert embed(source, tmp_path / "out.hdf5", "--model", model_dir, *options) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "out.hdf5").exists()
