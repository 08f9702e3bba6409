"""Odd but plausible arguments to the library functions under the commands (`embed_corpus`, `merge_shards`, the
corpus readers, `corpus_perplexity`, `export_onnx`), called from Python: each is used as meant or refused with the
function's own error before anything is computed or written."""

import io

import pytest

from elmo_hf.conversion.onnx import OnnxExportError, export_onnx
from elmo_hf.corpus.data import ElmoTextDataset, ElmoWordVocabulary, check_corpus
from elmo_hf.corpus.embed import EmbedError, embed_corpus, merge_shards
from elmo_hf.corpus.perplexity import corpus_perplexity
from elmo_hf.corpus.pretraining import PreTrainingError


def test_a_text_stream_without_bytes_under_it_is_refused_before_anything_is_written(tiny_folder, tmp_path):
    output = tmp_path / "vectors.hdf5"
    with pytest.raises(EmbedError, match="StringIO, text without bytes"):
        embed_corpus(io.StringIO("The cat sat .\n"), output, model=tiny_folder, progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("options", [dict(batch_size=None), dict(part_size=None), dict(max_tokens=0)])
def test_embed_sizes_that_are_not_positive_integers_are_refused(tiny_folder, tmp_path, options):
    text = tmp_path / "text.txt"
    text.write_text("The cat sat .\n")
    with pytest.raises(EmbedError, match="must be a positive integer"):
        embed_corpus(text, tmp_path / "vectors.hdf5", model=tiny_folder, progress=False, **options)
    assert list(tmp_path.iterdir()) == [text]


@pytest.mark.parametrize("gamma", ["1", None, True, float("inf")])
def test_embed_gamma_that_is_not_a_finite_number_is_refused(tiny_folder, tmp_path, gamma):
    """A str or None gave a bare TypeError from `math.isfinite`; a bool is no scale."""
    text = tmp_path / "text.txt"
    text.write_text("The cat sat .\n")
    with pytest.raises(EmbedError, match="--gamma must be a finite number"):
        embed_corpus(
            text, tmp_path / "vectors.hdf5", model=tiny_folder, layers="mix", mix_weights=[0.2, 0.3, 0.5], gamma=gamma,
            progress=False,
        )
    assert list(tmp_path.iterdir()) == [text]


@pytest.mark.parametrize("world_size", [0, -1])
def test_merge_shards_refuses_a_world_size_below_one(tmp_path, world_size):
    with pytest.raises(EmbedError, match="world-size"):
        merge_shards(tmp_path / "vectors.hdf5", world_size=world_size)
    assert list(tmp_path.iterdir()) == []


def test_one_corpus_path_is_read_as_one_file(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat .\nthe dog .\n")
    assert check_corpus(str(text)) == check_corpus(text) == [text]
    assert ElmoWordVocabulary.build(str(text)) == ElmoWordVocabulary.build([text])
    assert list(ElmoTextDataset(text)) == list(ElmoTextDataset([text]))


@pytest.mark.parametrize(
    "edit",
    [lambda data: data.rstrip(b"\n"), lambda data: b"\xef\xbb\xbf" + data, lambda data: data.replace(b"\n", b"\r\n")],
    ids=["no-final-newline", "byte-order-mark", "crlf"],
)
def test_a_vocabulary_file_as_editors_write_it_loads_every_word(tmp_path, edit):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat .\nthe dog .\n")
    vocabulary = ElmoWordVocabulary.build([text])
    edited = tmp_path / "edited.txt"
    edited.write_bytes(edit(vocabulary.save(tmp_path).read_bytes()))
    assert ElmoWordVocabulary.load(edited) == vocabulary


@pytest.mark.parametrize("json_output", [".", ""])
def test_perplexity_json_output_that_is_the_current_folder_is_refused(tmp_path, monkeypatch, json_output):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PreTrainingError, match="cannot be written"):
        corpus_perplexity("elmo-en-mini", [tmp_path / "text.txt"], json_output=json_output)


@pytest.mark.parametrize("options", [dict(batch_size=None), dict(batch_size=1.5), dict(max_words=None)])
def test_perplexity_sizes_that_are_not_positive_integers_are_refused(tmp_path, options):
    with pytest.raises(PreTrainingError, match="must be a positive integer"):
        corpus_perplexity("elmo-en-mini", [tmp_path / "text.txt"], **options)


@pytest.mark.parametrize("overwrite", [False, True])
def test_export_onnx_refuses_a_folder_in_the_place_of_model_onnx_before_exporting(tiny_folder, tmp_path, overwrite):
    (tmp_path / "model.onnx").mkdir()
    with pytest.raises(OnnxExportError, match="is a folder"):
        export_onnx(tiny_folder, tmp_path, overwrite=overwrite)
    assert [path.name for path in tmp_path.iterdir()] == ["model.onnx"]
