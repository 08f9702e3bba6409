"""elmo_hf.integrations.allennlp: AllenNLP's ElmoEmbedder and batch_to_ids over elmo-hf models, against the `embed`
command's file (bitwise), the original's stateful outputs, and AllenNLP's character ids."""

import json
import os
import re
import stat
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import FIXTURES, expected_top_layer, fixture_sentences

from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.cli import main
from elmo_hf.integrations.allennlp import ElmoEmbedder, batch_to_ids

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "migrating_from_allennlp.md"
SENTENCES = [" ".join(words) for batch in fixture_sentences("allennlp") for words in batch]
# Lengths vary (so grouping by length reorders them), one line is empty and one repeats an earlier one.
LINES = SENTENCES[:9] + ["", "  spaced   out  "] + SENTENCES[:2] + [SENTENCES[3][:20]]
ORIGINAL = {
    "options_file": FIXTURES / "allennlp" / "options.json",
    "weight_file": FIXTURES / "allennlp" / "lm_weights.hdf5",
}


def read_hdf5(path: Path) -> tuple[dict[str, np.ndarray], dict | None]:
    with h5py.File(path, "r") as file:
        vectors = {name: file[name][...] for name in file if name != "sentence_to_index"}
        index = json.loads(file["sentence_to_index"][0]) if "sentence_to_index" in file else None
    return vectors, index


def embed_command(tmp_path: Path, model_dir: Path, layers: str, batch_size: int) -> Path:
    """The `elmo-hf embed` file of LINES."""
    source, output = tmp_path / "lines.txt", tmp_path / f"command-{layers}.hdf5"
    source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    arguments = [source, output, "--model", model_dir, "--layers", layers, "--batch-size", batch_size, "--no-progress"]
    assert main(["embed", *map(str, arguments)]) == 0
    return output


@pytest.fixture(scope="module")
def embedder(converted) -> ElmoEmbedder:
    return ElmoEmbedder(converted["allennlp"])


@pytest.mark.parametrize("output_format", ["all", "top", "average"])
def test_embed_file_is_bitwise_the_embed_commands_file(converted, embedder, tmp_path, output_format):
    expected_vectors, expected_index = read_hdf5(embed_command(tmp_path, converted["allennlp"], output_format, 4))
    source = tmp_path / "lines.txt"
    with open(source, encoding="utf-8") as stream:  # an open file, as AllenNLP takes it
        embedder.embed_file(stream, tmp_path / "ours.hdf5", output_format=output_format, batch_size=4)
    vectors, index = read_hdf5(tmp_path / "ours.hdf5")
    assert index == expected_index and index["spaced   out"] == "10" and index[SENTENCES[0]] == "11"
    assert sorted(vectors, key=int) == [str(key) for key in range(len(LINES))]
    for name, expected in expected_vectors.items():
        assert vectors[name].dtype == np.float32 and vectors[name].shape == expected.shape, name
        assert np.array_equal(vectors[name], expected), name
    assert vectors["9"].shape == ((3, 0, 32) if output_format == "all" else (0, 32))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["command-" + output_format + ".hdf5", "lines.txt",
                                                                "ours.hdf5"]


def test_embed_sentences_and_embed_sentence_give_allennlps_shapes(converted, embedder, tmp_path):
    expected, _ = read_hdf5(embed_command(tmp_path, converted["allennlp"], "all", 64))
    generator = embedder.embed_sentences((line.split() for line in LINES), batch_size=64)
    arrays = list(generator)
    assert iter(generator) is generator and len(arrays) == len(LINES)
    for key, array in enumerate(arrays):
        assert array.shape == (3, len(LINES[key].split()), 32) and array.dtype == np.float32
        assert np.array_equal(array, expected[str(key)])
    alone = embedder.embed_sentence(LINES[0].split())
    in_batch = embedder.embed_batch([LINES[1].split(), LINES[0].split(), []])
    assert [array.shape for array in in_batch] == [arrays[1].shape, alone.shape, (3, 0, 32)]
    np.testing.assert_allclose(in_batch[1], alone, atol=1e-6, rtol=1e-5)  # batch invariance
    assert embedder.embed_sentences([]) is not None and list(embedder.embed_sentences([])) == []


def test_a_flat_word_list_is_never_taken_for_one_word_sentences(embedder):
    for call in (embedder.embed_sentences, embedder.embed_batch, batch_to_ids):
        with pytest.raises(TypeError, match="flat list of str"):
            call(["the", "bank"])
    with pytest.raises(TypeError, match="sentence 1 is a str"):
        list(embedder.embed_sentences(iter([["a"], "the bank"])))
    with pytest.raises(TypeError, match="expected a list of words"):
        embedder.embed_sentence("the bank")


def test_batch_to_ids_are_allennlps_ids(tokenizer):
    ids = batch_to_ids([["a", "bé"], ["c"]])
    assert ids.shape == (2, 2, 50) and ids.dtype == torch.long
    # AllenNLP's ELMoCharacterMapper: begin-word 258, end-word 259, padding 260, bytes as they are; then every id + 1.
    assert ids[0, 0, :4].tolist() == [259, ord("a") + 1, 260, 261] and set(ids[0, 0, 3:].tolist()) == {261}
    assert ids[0, 1, :5].tolist() == [259, ord("b") + 1, 0xC3 + 1, 0xA9 + 1, 260]
    assert ids[1, 1].tolist() == [0] * 50  # the padding word
    expected = tokenizer([["a", "bé"], ["c"]], is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(ids, expected["input_ids"])
    assert batch_to_ids([]).shape == (0, 0, 50)


def test_stateful_embedder_reproduces_the_originals_stateful_outputs():
    embedder = ElmoEmbedder(**ORIGINAL, stateful=True)
    sentences = fixture_sentences("allennlp")
    first = None
    for batch in range(10):
        arrays = embedder.embed_batch([sentences[row][batch] for row in range(3)])
        first = first if first is not None else arrays
        for row, array in enumerate(arrays):
            expected = expected_top_layer("allennlp", row, batch)
            assert np.allclose(array[-1], expected, atol=1e-6, rtol=1e-5), (row, batch)
    embedder.reset_state()
    again = embedder.embed_batch([sentences[row][0] for row in range(3)])
    assert all(np.array_equal(a, b) for a, b in zip(again, first))


def test_original_checkpoint_gives_the_converted_folders_vectors(converted, embedder):
    from_original = ElmoEmbedder(**ORIGINAL)
    for words in (LINES[0].split(), ["Über", "naïve", "😀"]):
        assert np.array_equal(from_original.embed_sentence(words), embedder.embed_sentence(words))


def test_sentence_keys_and_forgotten_sentences(embedder, tmp_path):
    source = tmp_path / "lines.txt"
    source.write_text("a b c\nd e\n", encoding="utf-8")
    embedder.embed_file(source, tmp_path / "keys.hdf5", output_format="top", use_sentence_keys=True)
    vectors, index = read_hdf5(tmp_path / "keys.hdf5")
    assert index is None
    assert {name: array.shape for name, array in vectors.items()} == {"a b c": (3, 32), "d e": (2, 32)}
    embedder.embed_file(source, tmp_path / "forgot.hdf5", forget_sentences=True)
    vectors, index = read_hdf5(tmp_path / "forgot.hdf5")
    assert index is None and sorted(vectors) == ["0", "1"]
    source.write_text("a b\nc\na b\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 3 repeats"):
        embedder.embed_file(source, tmp_path / "refused.hdf5", use_sentence_keys=True)
    source.write_text("a/b\n", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot be an HDF5 dataset name"):
        embedder.embed_file(source, tmp_path / "refused.hdf5", use_sentence_keys=True)
    with pytest.raises(ValueError, match="output_format"):
        embedder.embed_file(source, tmp_path / "refused.hdf5", output_format="mix")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["forgot.hdf5", "keys.hdf5", "lines.txt"]


def test_a_character_dictionary_model_reads_its_own_ids(tmp_path):
    """An ELMoForManyLangs model (code-point dictionary, word ids): the embedder encodes with the model's tokenizer."""
    from elmo_hf.conversion.manylangs import convert_manylangs

    folder = convert_manylangs(FIXTURES / "manylangs" / "model", tmp_path / "elmo-zh", language="zh")
    sentences = json.loads((FIXTURES / "manylangs" / "ids.json").read_text(encoding="utf-8"))["sentences"]
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    inputs = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        expected = torch.stack(model(**inputs, output_hidden_states=True).hidden_states, dim=1).numpy()
    arrays = ElmoEmbedder(folder).embed_batch(sentences)
    for row, (words, array) in enumerate(zip(sentences, arrays)):
        np.testing.assert_allclose(array, expected[row, :, : len(words)], atol=1e-6, rtol=1e-5)


def test_bad_arguments_are_refused_with_the_fix(converted, monkeypatch):
    with pytest.raises(ValueError, match="not both"):
        ElmoEmbedder(converted["allennlp"], device="cpu", cuda_device=0)
    with pytest.raises(ValueError, match="both options_file and weight_file"):
        ElmoEmbedder(options_file=ORIGINAL["options_file"])
    with pytest.raises(ValueError, match="both options_file and weight_file"):
        ElmoEmbedder(converted["allennlp"], **ORIGINAL)
    with pytest.raises(ValueError, match="model_dtype"):
        ElmoEmbedder(converted["allennlp"], model_dtype="float64")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for arguments in ({"model": converted["allennlp"]}, ORIGINAL):
        with pytest.raises(ValueError, match="torch sees no CUDA GPU; use device='cpu'"):
            ElmoEmbedder(**arguments, cuda_device=0)


def test_migration_guide_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(blocks) == 3
    for block in blocks:
        exec(compile(textwrap.dedent(block), str(GUIDE), "exec"), {})


def test_embed_file_refuses_a_folder_as_its_output(embedder, tmp_path):
    """Found before embedding, instead of an IsADirectoryError once the whole file is embedded."""
    source = tmp_path / "lines.txt"
    source.write_text("a b\n", encoding="utf-8")
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match="output_file_path .*out is a folder"):
        embedder.embed_file(source, tmp_path / "out")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["lines.txt", "out"]


def test_embed_file_gives_its_file_the_umasks_permissions(embedder, tmp_path):
    """As allennlp's `h5py.File(path, "w")` does, not the 0600 of the temporary file it is written as."""
    source = tmp_path / "lines.txt"
    source.write_text("a b c\n", encoding="utf-8")
    previous = os.umask(0o022)
    try:
        embedder.embed_file(source, tmp_path / "vectors.hdf5", output_format="top")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "vectors.hdf5").stat().st_mode) == 0o644
