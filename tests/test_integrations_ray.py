"""elmo_hf.integrations.ray: ElmoBatchEmbedder under Ray Data's map_batches on a local Ray cluster, from a text file
to Parquet, bitwise the `elmo-hf embed` command's vectors for the same lines; and each layer choice against the
command."""

from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet
import pytest
import ray
from conftest import fixture_sentences

from elmo_hf.cli import main
from elmo_hf.integrations.ray import ElmoBatchEmbedder

SENTENCES = [" ".join(words) for batch in fixture_sentences("allennlp") for words in batch]
LINES = SENTENCES[:7] + ["", "  spaced   out  "] + SENTENCES[:2]  # one empty line, one repeated sentence


@pytest.fixture
def lines_file(tmp_path) -> Path:
    path = tmp_path / "lines.txt"
    path.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    return path


def embed_command(lines_file: Path, folder: Path, *options: str) -> dict[str, np.ndarray]:
    """The datasets of `elmo-hf embed` on the lines, by line number, and its index."""
    output = lines_file.with_name("command.hdf5")
    arguments = [lines_file, output, "--model", folder, "--batch-size", "4", "--no-progress", *options]
    assert main(["embed", *map(str, arguments), "--overwrite"]) == 0
    with h5py.File(output, "r") as file:
        return {name: file[name][...] for name in file}


def test_ray_data_from_text_to_parquet_is_the_embed_commands_vectors(tiny_folder, lines_file, tmp_path):
    expected = embed_command(lines_file, tiny_folder)
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False)
    try:
        ray.data.DataContext.get_current().execution_options.preserve_order = True
        dataset = ray.data.read_text(str(lines_file), drop_empty_lines=False)
        vectors = dataset.map_batches(
            ElmoBatchEmbedder,
            fn_constructor_kwargs={"model": str(tiny_folder), "batch_size": 4},
            batch_size=64,  # all lines in one call: the command's grouping of them into batches of 4
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=1),
            num_cpus=1,
        )
        vectors.write_parquet(str(tmp_path / "parquet"))
    finally:
        ray.shutdown()
    assert not ray.is_initialized()
    table = pyarrow.parquet.read_table(tmp_path / "parquet")  # no cluster needed to read it (Ray's tensor type)
    assert table.column("text").to_pylist() == LINES
    for key, vectors in enumerate(table.column("vectors").combine_chunks().to_numpy()):
        command = expected[str(key)]
        assert vectors.shape == command.shape == (3, len(LINES[key].split()), 16), key
        assert vectors.dtype == np.float32 and np.array_equal(vectors, command), key


@pytest.mark.parametrize(
    "settings, options",
    [
        ({"layers": "top", "dtype": "float16"}, ["--layers", "top", "--dtype", "float16"]),
        ({"layers": "average"}, ["--layers", "average"]),
        ({"layers": "mix", "mix_weights": [0.2, 0.3, 0.5], "gamma": 2.0}, ["--layers", "mix", "--mix-weights",
                                                                           "0.2,0.3,0.5", "--gamma", "2"]),
        ({"split": "default"}, ["--split", "default"]),
    ],
)
def test_each_layer_choice_is_the_embed_commands(tiny_folder, lines_file, settings, options):
    expected = embed_command(lines_file, tiny_folder, *options)
    embedder = ElmoBatchEmbedder(tiny_folder, batch_size=4, output_column="elmo", device="cpu", **settings)
    batch = embedder({"text": np.array(LINES, dtype=object), "id": np.arange(len(LINES))})
    assert list(batch["id"]) == list(range(len(LINES))) and batch["elmo"].dtype == object
    for key, vectors in enumerate(batch["elmo"]):
        assert vectors.dtype == expected[str(key)].dtype and np.array_equal(vectors, expected[str(key)]), key


def test_bad_input_is_refused_with_the_fix(tiny_folder):
    embedder = ElmoBatchEmbedder(tiny_folder, device="cpu")
    with pytest.raises(KeyError, match="text_column"):
        embedder({"line": np.array(["a b"], dtype=object)})
    with pytest.raises(TypeError, match="must hold str, found bytes"):
        embedder({"text": np.array([b"a b"], dtype=object)})
    with pytest.raises(ValueError, match="split must be one of"):
        ElmoBatchEmbedder(tiny_folder, split="bert")
    with pytest.raises(ValueError, match="needs mix_weights"):
        ElmoBatchEmbedder(tiny_folder, layers="mix")
    with pytest.raises(ValueError, match="dtype must be one of"):
        ElmoBatchEmbedder(tiny_folder, dtype="int8")


def test_a_single_text_is_not_read_as_a_column_of_characters(tiny_folder):
    """A str where the column belongs would be iterated character by character, one "text" per character."""
    embedder = ElmoBatchEmbedder(tiny_folder, device="cpu")
    with pytest.raises(TypeError, match="column 'text' must hold texts .*got one str"):
        embedder({"text": "a b"})
    assert [vectors.shape[1] for vectors in embedder({"text": ["a b"]})["vectors"]] == [2]
