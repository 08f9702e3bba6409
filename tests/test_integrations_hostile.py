"""Hostile but realistic input to the integrations (`elmo_hf.integrations`): each is refused with an error naming the
argument and the fix, or read as the documented rule says, never a silent wrong result or an error from deep inside
torch."""

import io
import math

import h5py
import numpy as np
import pytest
from conftest import tiny_config

from elmo_hf import ElmoForTokenClassification, ElmoScalarMix, ElmoTokenizer
from elmo_hf.integrations.allennlp import ElmoEmbedder, batch_to_ids
from elmo_hf.integrations.ray import ElmoBatchEmbedder
from elmo_hf.integrations.sentence_transformers import ElmoSentenceModule
from elmo_hf.integrations.vectors import WordVectors

NO_BATCH_SIZE = [0, -1, 1.5, 2.0, True, "4", None]  # 1.5 was never reached: every sentence went into one batch


@pytest.fixture(scope="module")
def embedder(tiny_folder) -> ElmoEmbedder:
    return ElmoEmbedder(tiny_folder)


@pytest.fixture(scope="module")
def ray_embedder(tiny_folder) -> ElmoBatchEmbedder:
    return ElmoBatchEmbedder(tiny_folder, device="cpu")


@pytest.mark.parametrize("batch_size", NO_BATCH_SIZE)
def test_a_batch_size_that_is_no_positive_integer_is_refused(embedder, tiny_folder, tmp_path, batch_size):
    source = tmp_path / "lines.txt"
    source.write_text("a b\nc\n", encoding="utf-8")
    match = "batch_size and max_tokens .* must be positive integers"
    with pytest.raises(ValueError, match=match):
        embedder.embed_sentences([["a"], ["b", "c"]], batch_size=batch_size)  # at the call, not at the first next()
    with pytest.raises(ValueError, match=match):
        embedder.embed_file(source, tmp_path / "out.hdf5", batch_size=batch_size)
    with pytest.raises(ValueError, match=match):
        list(WordVectors(embedder.model, embedder.tokenizer).sentences([["a"]], batch_size))
    with pytest.raises(ValueError, match=match):
        ElmoBatchEmbedder(tiny_folder, device="cpu", batch_size=batch_size)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["lines.txt"]


@pytest.mark.parametrize("max_tokens", [0, 2.5, True, "8"])
def test_a_max_tokens_that_is_no_positive_integer_is_refused(tiny_folder, max_tokens):
    with pytest.raises(ValueError, match="batch_size and max_tokens .* must be positive integers"):
        ElmoBatchEmbedder(tiny_folder, device="cpu", max_tokens=max_tokens)


def test_no_batch_at_all_is_refused_naming_the_call(embedder):
    """None was "'NoneType' object is not iterable"."""
    for name, call in [("batch_to_ids", batch_to_ids), ("embed_batch", embedder.embed_batch),
                       ("embed_sentences", embedder.embed_sentences)]:
        with pytest.raises(TypeError, match=f"{name} takes sentences, each a list of words, got NoneType"):
            call(None)


def test_word_vectors_refuse_a_str_or_a_flat_list_of_words(embedder):
    """`sentences("a b")` gave three one-character sentences, `batch(["ab", "c"])` an IndexError."""
    vectors = WordVectors(embedder.model, embedder.tokenizer, "top")
    with pytest.raises(TypeError, match="WordVectors.sentences takes sentences.* got a str"):
        list(vectors.sentences("a b"))
    with pytest.raises(TypeError, match="WordVectors.sentences takes sentences.* flat list of str"):
        list(vectors.sentences(["ab", "c"]))
    with pytest.raises(TypeError, match="WordVectors.batch takes sentences.* flat list of str"):
        vectors.batch(["ab", "c"])
    with pytest.raises(TypeError, match="sentence 1 is a str"):
        list(vectors.sentences(iter([["a"], "bc"])))


def test_numpy_arrays_of_words_are_read_as_word_lists(embedder):
    """A sentence held as a 1-D array of str (a column of a DataFrame, `np.array(text.split())`) was refused."""
    words = ["ELMo", "reads", "characters", "."]
    assert batch_to_ids(np.array([words])).equal(batch_to_ids([words]))
    assert np.array_equal(embedder.embed_sentence(np.array(words)), embedder.embed_sentence(words))
    in_batch = embedder.embed_batch([np.array(words), np.array([], dtype=str)])
    assert np.array_equal(in_batch[0], embedder.embed_batch([words])[0]) and in_batch[1].shape == (3, 0, 16)
    with pytest.raises(TypeError, match="flat list of str"):  # one sentence where sentences belong
        list(embedder.embed_sentences(np.array(words)))


def test_word_vectors_refuse_a_head_or_no_model(tokenizer):
    """A head failed at its first batch with "'TokenClassifierOutput' object has no attribute 'lstm_state'"."""
    with pytest.raises(TypeError, match="takes an ElmoModel .* got ElmoForTokenClassification; pass its biLM"):
        WordVectors(ElmoForTokenClassification(tiny_config(num_labels=3)), tokenizer)
    with pytest.raises(TypeError, match="takes an ElmoModel .* got str"):
        WordVectors("elmo-en-mini", tokenizer)


@pytest.mark.parametrize("device, match", [("meta", "holds no data"), ("gpu", "is not a device"),
                                           (5, "is not a device")])
def test_a_device_that_cannot_run_the_model_is_refused_when_built(tiny_folder, device, match):
    """"meta" was taken, and every call then failed inside torch ("Tensor.item() cannot be called on meta
    tensors"); "gpu" and 5 were torch's RuntimeError."""
    with pytest.raises(ValueError, match=match):
        ElmoEmbedder(tiny_folder, device=device)
    with pytest.raises(ValueError, match=match):
        ElmoBatchEmbedder(tiny_folder, device=device)


@pytest.mark.parametrize("cuda_device", ["0", None, True, 0.5])
def test_a_cuda_device_that_is_no_index_is_refused(tiny_folder, cuda_device):
    """"0" and None were "'>=' not supported", True and 0.5 "Invalid device string: 'cuda:True'"."""
    with pytest.raises(TypeError, match="cuda_device must be a GPU index"):
        ElmoEmbedder(tiny_folder, cuda_device=cuda_device)


def test_a_negative_cuda_device_is_the_cpu_as_in_allennlp(tiny_folder):
    assert ElmoEmbedder(tiny_folder, cuda_device=-2).device.type == "cpu"


def test_stateful_that_is_no_bool_is_refused(tiny_folder):
    """"false" (from a config file) was true: the embedder carried the LSTM state between batches."""
    with pytest.raises(TypeError, match="stateful must be True or False, got 'false'"):
        ElmoEmbedder(tiny_folder, stateful="false")


def test_a_dtype_setting_that_is_a_list_names_the_setting(tiny_folder):
    """A list was "unhashable type: 'list'"."""
    with pytest.raises(ValueError, match="model_dtype must be one of"):
        ElmoEmbedder(tiny_folder, model_dtype=["float32"])
    with pytest.raises(ValueError, match="dtype must be one of"):
        ElmoBatchEmbedder(tiny_folder, device="cpu", dtype=["float16"])


@pytest.mark.parametrize("model", [None, 5, True])
def test_a_model_that_is_no_name_is_refused_before_any_lookup(model):
    """None was looked up on the Hub as a repository named "None"."""
    with pytest.raises(TypeError, match="model must be a packaged model's name, a converted folder or a Hub id"):
        ElmoBatchEmbedder(model, device="cpu")
    with pytest.raises(TypeError, match="model must be a packaged model's name"):
        ElmoSentenceModule(model)


@pytest.mark.parametrize("gamma", [math.nan, math.inf, "2"])
def test_a_gamma_that_is_no_finite_number_is_refused(tiny_folder, gamma):
    """NaN gave "non-finite vectors ...; check the model" (Ray) or NaN embeddings (sentence-transformers); "2" a
    TypeError from torch's fill_."""
    match = "gamma: .* is not a finite number"
    with pytest.raises(ValueError, match=match):
        ElmoBatchEmbedder(tiny_folder, device="cpu", layers="mix", mix_weights=[0.2, 0.3, 0.5], gamma=gamma)
    for layers in ("mix", "learned"):
        mix_weights = [0.2, 0.3, 0.5] if layers == "mix" else None
        with pytest.raises(ValueError, match=match):
            ElmoSentenceModule(tiny_folder, layers=layers, mix_weights=mix_weights, gamma=gamma)


@pytest.mark.parametrize("scalar_parameters", [[math.nan, 0.0, 0.0], [math.inf, 0.0, 0.0], [-math.inf] * 3, "abc"])
def test_learned_scalars_that_are_no_finite_numbers_are_refused(tiny_folder, scalar_parameters):
    """They were taken, and every embedding was NaN (a str: "too many dimensions 'str'" from torch)."""
    with pytest.raises(ValueError, match="scalar_parameters: .* is not a finite number"):
        ElmoSentenceModule(tiny_folder, layers="learned", scalar_parameters=scalar_parameters)


def test_mix_weights_that_are_no_numbers_are_refused(tiny_folder):
    with pytest.raises(ValueError, match="mix_weights: '0.2' is not a finite number"):
        ElmoBatchEmbedder(tiny_folder, device="cpu", layers="mix", mix_weights=["0.2", "0.3", "0.5"])


@pytest.mark.parametrize("column", [None, 5])
def test_a_ray_column_that_holds_no_texts_is_refused(ray_embedder, column):
    """It was "'NoneType' object is not iterable"."""
    with pytest.raises(TypeError, match="column 'text' must hold texts .*got one"):
        ray_embedder({"text": column})


def test_embed_file_drops_a_byte_order_mark_as_the_embed_command_does(embedder, tmp_path):
    """The mark was read as part of the first word: other vectors than `elmo-hf embed`'s, and the key '\\ufeffa b'."""
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text("a b\nc\n", encoding="utf-8")
    marked.write_text("\ufeffa b\nc\n", encoding="utf-8")
    for source in (plain, marked):
        embedder.embed_file(source, tmp_path / f"{source.stem}.hdf5")
    with h5py.File(tmp_path / "plain.hdf5") as expected, h5py.File(tmp_path / "marked.hdf5") as found:
        assert found["sentence_to_index"][0] == expected["sentence_to_index"][0]
        assert all(np.array_equal(found[key][...], expected[key][...]) for key in ("0", "1"))


def test_embed_file_names_an_input_that_is_not_utf8(embedder, tmp_path):
    """It was a bare UnicodeDecodeError, without the file's name."""
    source = tmp_path / "latin1.txt"
    source.write_bytes("café\n".encode("latin-1"))
    with pytest.raises(ValueError, match="input_file .*latin1.txt is not UTF-8 text"):
        embedder.embed_file(source, tmp_path / "out.hdf5")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["latin1.txt"]


@pytest.mark.parametrize(
    "input_file, match",
    [
        (io.BytesIO(b"a b\n"), "open in binary mode; open it as text"),  # was "Word 0 of example 0 is bytes"
        (["a b", "c"], "must be an open text file or a path, got list"),  # was "does not support the context manager"
        (None, "must be an open text file or a path, got NoneType"),
    ],
)
def test_embed_file_refuses_an_input_that_is_no_text_file(embedder, tmp_path, input_file, match):
    with pytest.raises(TypeError, match=match):
        embedder.embed_file(input_file, tmp_path / "out.hdf5")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("tokenizer, got", [("x", "got str"), (ElmoTokenizer, "got the class ElmoTokenizer"),
                                            ("", "got str")])
def test_batch_to_ids_refuses_a_tokenizer_that_is_no_tokenizer_instance(tokenizer, got):
    """"x" was "'str' object is not callable" from deep inside; "" (falsy) silently became the default tokenizer."""
    with pytest.raises(TypeError, match=f"batch_to_ids: tokenizer must be a tokenizer instance.*{got}"):
        batch_to_ids([["a", "b"]], tokenizer)


def test_word_vectors_refuse_no_tokenizer_when_built(embedder):
    """None was taken, and the first batch failed with "'NoneType' object is not callable"."""
    with pytest.raises(TypeError, match="WordVectors: tokenizer must be a tokenizer instance.*got NoneType"):
        WordVectors(embedder.model, None)


@pytest.mark.parametrize("flag", ["forget_sentences", "use_sentence_keys"])
@pytest.mark.parametrize("value", ["no", "false", 1, None])
def test_embed_file_switches_that_are_no_bool_are_refused(embedder, tmp_path, flag, value):
    """"no" (from a config file) was true: the sentence index was left out, or the lines became the keys."""
    source = tmp_path / "lines.txt"
    source.write_text("a b\nc\n", encoding="utf-8")
    with pytest.raises(TypeError, match=f"{flag} must be True or False, got {value!r}"):
        embedder.embed_file(source, tmp_path / "out.hdf5", **{flag: value})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["lines.txt"]


def test_embed_file_takes_numpy_bools_as_switches(embedder, tmp_path):
    source = tmp_path / "lines.txt"
    source.write_text("a b\nc\n", encoding="utf-8")
    embedder.embed_file(source, tmp_path / "out.hdf5", forget_sentences=np.True_, use_sentence_keys=np.False_)
    with h5py.File(tmp_path / "out.hdf5") as file:
        assert sorted(file) == ["0", "1"]


def test_a_ray_output_column_that_is_the_text_column_is_refused(tiny_folder):
    """The vectors silently replaced the texts."""
    with pytest.raises(ValueError, match="output_column 'text' is text_column 'text'"):
        ElmoBatchEmbedder(tiny_folder, device="cpu", output_column="text")
    with pytest.raises(ValueError, match="output_column 'line' is text_column 'line'"):
        ElmoBatchEmbedder(tiny_folder, device="cpu", text_column="line", output_column="line")


@pytest.mark.parametrize("output_file_path", [None, 5])
def test_embed_file_refuses_an_output_that_is_no_path(embedder, tmp_path, output_file_path):
    """None was pathlib's "argument should be a str or an os.PathLike object ..., not 'NoneType'"."""
    source = tmp_path / "lines.txt"
    source.write_text("a b\n", encoding="utf-8")
    with pytest.raises(TypeError, match="output_file_path must be the path of the HDF5 file to write"):
        embedder.embed_file(source, output_file_path)


@pytest.mark.parametrize("gamma", [math.nan, math.inf, "2", True, None])
def test_from_weights_refuses_a_gamma_that_is_no_finite_number(gamma):
    """NaN and inf were taken (NaN vectors), "2" and None failed inside torch's fill_, True was read as 1."""
    with pytest.raises(ValueError, match="gamma must be a finite number"):
        ElmoScalarMix.from_weights([0.2, 0.3, 0.5], gamma=gamma)


def test_a_numpy_gamma_still_mixes(embedder):
    vectors = WordVectors(embedder.model, embedder.tokenizer, "mix", [0.2, 0.3, 0.5], np.float32(2.0))
    assert vectors.mix.gamma.item() == 2.0
