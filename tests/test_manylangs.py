"""ELMoForManyLangs checkpoints: the dictionary tokenizer, the word embedding and `elmo-hf convert-manylangs`, against
the outputs and id rows their own package computed for the fixture in tests/fixtures/manylangs (see build_fixture.py
there; their package is not needed here)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from transformers import pipeline

from elmo_hf import ElmoForTokenClassification, ElmoModel, ElmoTokenClassificationPipeline, ElmoTokenizer
from elmo_hf.cli import main as cli_main
from elmo_hf.cli import run_subcommand
from elmo_hf.conversion.checkpoint import ConversionError
from elmo_hf.conversion.manylangs import PACKAGED_ARCHITECTURE, convert_manylangs, read_architecture, read_lexicon
from elmo_hf.tokenization_elmo import word_to_char_ids

FIXTURE = Path(__file__).parent / "fixtures" / "manylangs"
MODEL = FIXTURE / "model"
IDS = json.loads((FIXTURE / "ids.json").read_text(encoding="utf-8"))
EXPECTED = dict(np.load(FIXTURE / "expected.npz"))
SENTENCES = IDS["sentences"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    return convert_manylangs(MODEL, tmp_path_factory.mktemp("manylangs") / "elmo-zh", language="zh")


@pytest.fixture(scope="module")
def tokenizer(converted) -> ElmoTokenizer:
    return ElmoTokenizer.from_pretrained(converted)


@pytest.fixture(scope="module")
def model(converted) -> ElmoModel:
    return ElmoModel.from_pretrained(converted).eval()


def hidden_states(model: ElmoModel, tokenizer: ElmoTokenizer, sentences, dtype: torch.dtype, **kwargs):
    """All layers `(num_layers + 1, batch, words, 2 * projection_dim)` for pre-split sentences, and the output."""
    inputs = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model.to(dtype)(**inputs, output_hidden_states=True, **kwargs)
    model.float()
    return torch.stack(output.hidden_states).double().numpy(), output


def assert_matches(actual: np.ndarray, expected: np.ndarray, dtype: torch.dtype):
    """float64: to 1e-12; float32: the originals' criterion allclose(atol=1e-6, rtol=1e-5)."""
    assert actual.shape == expected.shape
    if dtype == torch.float64:
        assert np.abs(actual - expected).max() < 1e-12
    else:
        assert np.allclose(actual, expected, atol=1e-6, rtol=1e-5)


def test_tokenizer_rows_equal_theirs(tokenizer):
    """Their create_one_batch rows (boundaries included), ids + 1, with the word id as the last column."""
    assert tokenizer.row_width == IDS["max_characters_per_token"] + 1
    for example in IDS["id_rows"]:
        their_rows = zip(example["char_ids"], example["word_ids"])
        expected = [[index + 1 for index in [*row, word]] for row, word in their_rows]
        begin, end = (tokenizer.word_to_ids(word) for word in tokenizer.boundary_words)
        words = tokenizer([example["words"]], is_split_into_words=True)["input_ids"][0]
        assert [begin, *words, end] == expected, example["words"]


def test_their_lexicon_quirks(tokenizer):
    """Their reader files the " " entry under U+3000, so " " is an unknown character; their frontend starts words with
    the '<eow>' entry; their ids start at 0, ours at 1."""
    their_chars = read_lexicon(MODEL / "char.dic")
    assert " " not in their_chars and their_chars["\u3000"] == IDS["their_lexicon"]["u3000_id"]
    assert " " not in tokenizer.char_vocab and tokenizer.char_vocab["\u3000"] == their_chars["\u3000"] + 1
    assert tokenizer.char_vocab["<bow>"] == their_chars["<eow>"] + 1
    assert tokenizer.char_vocab["<eow>"] == their_chars["<bow>"] + 1
    assert min(tokenizer.char_vocab.values()) == 1 and min(tokenizer.word_vocab.values()) == 1
    row = tokenizer.word_to_ids("internationally")  # cut to "internatio", which is in word.dic
    assert row[-1] == tokenizer.word_vocab["internatio"]
    ids = tokenizer(["天\u3000氣", "a€"], is_split_into_words=True)["input_ids"]
    assert tokenizer.decode(ids) == "天\u3000氣 a\ufffd"


@pytest.mark.parametrize("implementation", ["auto", "eager"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_converted_model_matches_their_embedder(model, tokenizer, dtype, implementation, monkeypatch):
    """All layers of every sentence, run as one padded batch, against their fresh Embedder's one-batch output; float32
    runs the CPU kernels ("auto") and the reference modules ("eager")."""
    monkeypatch.setattr(model.config, "elmo_implementation", implementation)
    layers, _ = hidden_states(model, tokenizer, SENTENCES, dtype)
    for index, sentence in enumerate(SENTENCES):
        assert_matches(layers[:, index, : len(sentence)], EXPECTED[f"single_{index}"], dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_stateful_carry_over_reproduces_their_batches(model, tokenizer, dtype):
    """Their Embedder carries each row's LSTM state into the next call; `lstm_state` does the same (the second batch
    has a row more, starting from zeros; the third fewer, the other rows kept)."""
    state = None
    for batch_index, batch in enumerate(IDS["stateful_batches"]):
        layers, output = hidden_states(model, tokenizer, batch, dtype, lstm_state=state, output_lstm_state=True)
        state = output.lstm_state
        for row, sentence in enumerate(batch):
            assert_matches(layers[:, row, : len(sentence)], EXPECTED[f"stateful_{batch_index}_{row}"], dtype)
    stateless, _ = hidden_states(model, tokenizer, IDS["stateful_batches"][1], torch.float64)
    assert np.abs(stateless[2, 0, :5] - EXPECTED["stateful_1_0"][2]).max() > 1e-3  # the carry-over is visible


def test_distinct_words_are_keyed_on_the_word_id(model, tokenizer):
    """Two rows with the same characters but different word ids get different token vectors (the character CNN still
    runs once per distinct row)."""
    row = tokenizer.word_to_ids("dog")
    other = [*row[:-1], tokenizer.word_vocab["cat"]]
    with torch.no_grad():
        both = model(torch.tensor([[row, other]]), output_hidden_states=True).hidden_states[0][0]
        alone = [model(torch.tensor([[ids]]), output_hidden_states=True).hidden_states[0][0, 0]
                 for ids in (row, other)]
    assert not torch.allclose(both[0], both[1])
    torch.testing.assert_close(both, torch.stack(alone), rtol=0, atol=1e-6)


def test_offsets_and_word_ids_as_in_byte_mode(tokenizer):
    text = "潮水 退了，好 Hà"
    encoding = tokenizer([text, "x"], padding=True, return_offsets_mapping=True)
    assert [text[start:end] for start, end in encoding["offset_mapping"][0]] == ["潮水", "退了", "，", "好", "Hà"]
    assert encoding.word_ids(1) == [0, None, None, None, None]
    assert encoding["input_ids"][1][1] == [0] * tokenizer.row_width
    assert tokenizer("", return_tensors="pt")["input_ids"].shape == (1, 0, tokenizer.row_width)


def test_round_trip_and_auto_classes(converted, model, tokenizer, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = AutoModel.from_pretrained(tmp_path).eval(), AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded) is ElmoModel and type(loaded_tokenizer) is ElmoTokenizer
    assert loaded_tokenizer.char_vocab == tokenizer.char_vocab and loaded_tokenizer.word_vocab == tokenizer.word_vocab
    assert loaded.config.boundary_input_ids == model.config.boundary_input_ids
    expected, _ = hidden_states(model, tokenizer, SENTENCES, torch.float32)
    actual, _ = hidden_states(loaded, loaded_tokenizer, SENTENCES, torch.float32)
    assert np.array_equal(actual, expected)


REMOTE_SCRIPT = """
import sys
sys.modules["elmo_hf"] = None  # elmo_hf must not be importable here
import torch
from transformers import AutoModel, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
assert "elmo_hf" not in type(model).__module__, type(model).__module__
inputs = tokenizer([["潮水", "退", "了"], ["the", "dog"]], is_split_into_words=True, padding=True, return_tensors="pt")
with torch.no_grad():
    torch.save(model(**inputs, output_hidden_states=True).hidden_states, sys.argv[2])
"""


def test_remote_code_load_without_the_package(converted, model, tokenizer, tmp_path):
    result = tmp_path / "hidden.pt"
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(converted), str(result)],
        check=True, cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    expected, _ = hidden_states(model, tokenizer, [["潮水", "退", "了"], ["the", "dog"]], torch.float32)
    assert np.array_equal(torch.stack(torch.load(result)).double().numpy(), expected)


def test_tagging_chinese_with_a_pipeline(converted, tmp_path):
    """A token-classification head on the converted biLM: segmented words in, one entity per word, offsets exact;
    raw text is split at whitespace and punctuation only."""
    labels = {0: "O", 1: "B-LOC"}
    torch.manual_seed(0)
    tagger_model = ElmoForTokenClassification.from_pretrained(
        converted, id2label=labels, label2id={"O": 0, "B-LOC": 1}
    )
    tagger_model.save_pretrained(tmp_path)
    ElmoTokenizer.from_pretrained(converted).save_pretrained(tmp_path)
    tagger = pipeline("token-classification", model=str(tmp_path), pipeline_class=ElmoTokenClassificationPipeline)
    words = ["中華人民共和國", "的", "首都", "是", "北京", "。"]
    [tagged] = tagger(words, is_split_into_words=True, ignore_labels=[])
    assert [entity["word"] for entity in tagged] == words
    text = "我們 喜歡 北京，好"
    tagged = tagger(text, ignore_labels=[])
    assert [(entity["word"], entity["start"]) for entity in tagged] == [
        ("我們", 0), ("喜歡", 3), ("北京", 6), ("，", 8), ("好", 9)
    ]
    assert [entity["word"] for entity in tagger("我們喜歡北京。", ignore_labels=[])] == ["我們喜歡北京", "。"]


def test_zip_format_weights_convert_the_same(converted, tmp_path):
    """Their releases are legacy pickles (the fixture too); torch's zip format reads the same."""
    folder = tmp_path / "zip-model"
    shutil.copytree(MODEL, folder)
    for name in ("token_embedder.pkl", "encoder.pkl"):
        torch.save(torch.load(folder / name, weights_only=True), folder / name)
    other = convert_manylangs(folder, tmp_path / "out", language="zh")
    assert (other / "model.safetensors").read_bytes() == (converted / "model.safetensors").read_bytes()


def test_model_card_states_language_source_and_licence(converted):
    card = (converted / "README.md").read_text(encoding="utf-8")
    assert "language: zh" in card and "`model`" in card and "HIT-SCIR/ELMoForManyLangs" in card
    assert "state no licence for their models" in card and "before you redistribute" in card


def test_architecture_found_as_their_embedder_finds_it(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(MODEL, folder)
    assert read_architecture(folder)["encoder"]["dim"] == 32  # absolute path absent: the file name in the folder
    (folder / "cnn_fixture.json").unlink()
    with pytest.raises(ConversionError, match="copy it into"):
        read_architecture(folder)
    (folder / "config.json").write_text(json.dumps({"config_path": "configs/cnn_50_100_512_4096_sample.json"}))
    assert read_architecture(folder) == PACKAGED_ARCHITECTURE


def broken_copy(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(MODEL, folder)
    edit(folder)
    return folder


def _add_char_entry(folder: Path):
    with open(folder / "char.dic", "a", encoding="utf-8") as file:
        file.write("§new\t999\n")


def _extra_tensor(folder: Path):
    state = torch.load(folder / "encoder.pkl", weights_only=True)
    state["extra.weight"] = torch.zeros(2)
    torch.save(state, folder / "encoder.pkl")


class _NotAStateDict:
    pass


def _unsafe_pickle(folder: Path):
    torch.save({"object": _NotAStateDict()}, folder / "encoder.pkl")


def _edit_architecture(section: str, key: str, value):
    def edit(folder: Path):
        architecture = json.loads((folder / "cnn_fixture.json").read_text())
        architecture[section][key] = value
        (folder / "cnn_fixture.json").write_text(json.dumps(architecture))

    return edit


def _config_path(value):
    def edit(folder: Path):
        (folder / "config.json").write_text(json.dumps({"config_path": value, "model": "fixture"}))

    return edit


def _append_word(line: bytes):
    def edit(folder: Path):
        with open(folder / "word.dic", "ab") as file:
            file.write(line)

    return edit


# The bad values of issue 23 item 12 (each a raw traceback before), then bad sizes of the architecture.
UNUSABLE_FOLDERS = [
    (_append_word(b"caf\xe9\t7\n"), r"word.dic is not UTF-8 text \(byte \d+: invalid continuation byte\)"),
    (_config_path(123), "'config_path' in .* is 123, not a file name"),
    (_config_path(None), "'config_path' in .* is None, not a file name"),
    (_edit_architecture("token_embedder", "filters", [[1], [2, 4]]), r"filters is \[\[1\], \[2, 4\]\]; it must be"),
    (_edit_architecture("token_embedder", "filters", "wide"), "filters is 'wide'; it must be a list of"),
    (_edit_architecture("token_embedder", "filters", [[0, 4]]), "pairs of positive whole numbers"),
    (_append_word(b"minus\t-3\n"), "gives 'minus' the negative id -3; ids are embedding rows"),
    (_edit_architecture("encoder", "dim", "32"), "encoder.dim is '32'; it must be a whole number of at least 1"),
    (_edit_architecture("encoder", "n_layers", True), "encoder.n_layers is True; it must be a whole number"),
    (
        _edit_architecture("token_embedder", "max_characters_per_token", 10**12),
        "max_characters_per_token is 1000000000000; at most 1000 is converted",
    ),
]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_add_char_entry, r"char_emb_layer.embedding.weight' has shape \(412, 6\), .* imply \(413, 6\)"),
        (_extra_tensor, "unexpected tensor 'extra.weight'"),
        (_unsafe_pickle, "weights_only=True"),
        (
            _edit_architecture("token_embedder", "name", "lstm"),
            "only the 'elmo' encoder with the 'cnn' token embedder",
        ),
        (lambda folder: (folder / "word.dic").unlink(), "word.dic not found"),
        (lambda folder: (folder / "char.dic").write_text("a\tb\tc\n"), "line 1 is not 'entry<TAB>id'"),
        *UNUSABLE_FOLDERS,
    ],
)
def test_bad_folders_are_refused_before_writing(tmp_path, edit, message):
    folder = broken_copy(tmp_path, edit)
    with pytest.raises(ConversionError, match=message):
        convert_manylangs(folder, tmp_path / "out", language="zh")
    assert not (tmp_path / "out").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["broken"]


def test_command_line(tmp_path, capsys):
    arguments = ["convert-manylangs", "--model", str(MODEL), "--language", "zh", "--output", str(tmp_path / "out")]
    assert cli_main(arguments) == 0 and (tmp_path / "out" / "vocab.json").is_file()
    assert cli_main(arguments) == 2
    assert "not empty; pass --overwrite" in capsys.readouterr().err
    assert cli_main([*arguments, "--overwrite"]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize(("edit", "message"), UNUSABLE_FOLDERS)
def test_convert_manylangs_bad_values_give_one_error_line_and_exit_2(tmp_path, capsys, edit, message):
    folder = broken_copy(tmp_path, edit)
    output = str(tmp_path / "o")
    status = cli_main(["convert-manylangs", "--model", str(folder), "--language", "zh", "--output", output])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert re.search(message, err) and not (tmp_path / "o").exists()


def test_convert_manylangs_into_a_read_only_folder_gives_one_error_line_and_exit_1(read_only_folder, capsys):
    output = read_only_folder / "out"
    assert cli_main(["convert-manylangs", "--model", str(MODEL), "--language", "zh", "--output", str(output)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: writing --output {output} failed: Permission denied") and len(err.splitlines()) == 1
    assert list(read_only_folder.iterdir()) == []


def test_dictionary_vocabulary_is_checked(tmp_path, tokenizer):
    vocab = {"characters": dict(tokenizer.char_vocab), "words": dict(tokenizer.word_vocab)}
    del vocab["characters"]["<char_pad>"]
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    with pytest.raises(ValueError, match=r"lack the entries \['<char_pad>'\]"):
        ElmoTokenizer(str(tmp_path / "vocab.json"), bos_token="<bos>", eos_token="<eos>")
    vocab["characters"] = dict(tokenizer.char_vocab, x=0)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    with pytest.raises(ValueError, match="ids >= 1"):
        ElmoTokenizer(str(tmp_path / "vocab.json"), bos_token="<bos>", eos_token="<eos>")
    with pytest.raises(ValueError, match="lack the entries"):  # the byte mode's <S> is no entry of theirs
        ElmoTokenizer(str(tmp_path / "vocab.json"))


def test_dictionary_ids_and_entries(tokenizer):
    assert tokenizer.vocab_size == max(tokenizer.char_vocab.values()) + 1 == 413
    assert tokenizer.convert_tokens_to_ids("好") == tokenizer.char_vocab["好"]
    assert tokenizer.convert_ids_to_tokens(tokenizer.char_vocab["好"]) == "好"
    assert tokenizer.bos_token_id == tokenizer.char_vocab["<bos>"] and tokenizer.pad_token_id == 0
    with pytest.raises(ValueError, match="not in the character vocabulary"):
        tokenizer.convert_tokens_to_ids("龘")
    ids = tokenizer(["好", "<bos>"], is_split_into_words=True, add_special_tokens=True)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["好", "<bos>"]
    assert tokenizer.convert_ids_to_tokens(ids, skip_special_tokens=True) == ["好"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"char_vocab_size": 100}, "at least 262"),  # byte ids need the full byte range
        ({"word_embedding_vocab_size": 10}, "both be 0"),
        ({"word_embedding_vocab_size": 10, "word_embedding_dim": 4}, "needs boundary_input_ids"),
        ({"char_vocab_size": 20, "boundary_input_ids": [[1] * 50]}, "2 rows"),
        ({"char_vocab_size": 20, "boundary_input_ids": [[1] * 50, [20] * 50]}, "outside"),
        (
            {"char_vocab_size": 20, "word_embedding_vocab_size": 5, "word_embedding_dim": 4,
             "boundary_input_ids": [[1] * 50 + [1], [2] * 50 + [5]]},
            "outside",
        ),
    ],
)
def test_config_checks_the_dictionary_fields(fields, message):
    from elmo_hf import ElmoConfig

    with pytest.raises(Exception, match=message):
        ElmoConfig(**fields)
    dictionary = ElmoConfig(char_vocab_size=20, boundary_input_ids=[[1] * 50, [2] * 50])
    assert dictionary.row_width == 50 and ElmoConfig().row_width == 50


# The fixture sentences that survive being written as lines of space-separated words.
LINES = [words for words in SENTENCES if " ".join(words).split() == words]


def without_word_embedding(tmp_path: Path) -> Path:
    """The fixture with `word_dim: 0` (which convert-manylangs accepts): its projection reads the character CNN."""
    folder = tmp_path / "no-word-embedding"
    shutil.copytree(MODEL, folder)
    architecture = json.loads((folder / "cnn_fixture.json").read_text())
    word_dim = architecture["token_embedder"]["word_dim"]
    architecture["token_embedder"]["word_dim"] = 0
    (folder / "cnn_fixture.json").write_text(json.dumps(architecture))
    state = torch.load(folder / "token_embedder.pkl", weights_only=True)
    del state["word_emb_layer.embedding.weight"]
    state["projection.weight"] = state["projection.weight"][:, word_dim:]  # their projection reads [words, chars]
    torch.save(state, folder / "token_embedder.pkl")
    return folder


@pytest.fixture(scope="module")
def converted_without_words(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("manylangs-chars")
    return convert_manylangs(without_word_embedding(folder), folder / "elmo-zh-chars", language="zh")


@pytest.mark.parametrize("word_embedding", [True, False])
def test_embed_gives_a_dictionary_model_its_dictionary_ids(converted, converted_without_words, word_embedding,
                                                           tmp_path):
    """Issue 23 item 15: without a word embedding embed used byte ids (exit 0), with one it died on the row width."""
    folder = converted if word_embedding else converted_without_words
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    assert (tokenizer.word_vocab is not None) == word_embedding
    # The dictionary's ids are not the byte ids ("the" -> [412, 85, 73, 70, 411, ...] against [259, 117, 105, ...]).
    assert tokenizer.word_to_ids("the")[:5] != word_to_char_ids("the", tokenizer.max_characters_per_token)[:5]
    text = tmp_path / "in.txt"
    text.write_text("".join(" ".join(words) + "\n" for words in LINES), encoding="utf-8")
    output = tmp_path / "vectors.hdf5"
    arguments = ["embed", str(text), str(output), "--model", str(folder), "--batch-size", "2", "--no-progress"]
    assert cli_main(arguments) == 0
    model = ElmoModel.from_pretrained(folder).eval()
    with h5py.File(output, "r") as file:
        for key, words in enumerate(LINES):
            inputs = tokenizer([words], is_split_into_words=True, return_tensors="pt")
            with torch.inference_mode():
                expected = torch.stack(model(**inputs, output_hidden_states=True).hidden_states)[:, 0]
            np.testing.assert_allclose(file[str(key)][...], expected.numpy(), atol=1e-6, rtol=1e-5)


def test_pretraining_from_a_dictionary_model_keeps_its_tokenizer(converted, tmp_path):
    text = tmp_path / "train.txt"
    text.write_text("".join(" ".join(words) + "\n" for words in LINES * 4), encoding="utf-8")
    output = tmp_path / "adapted"
    arguments = ["--train", text, "--output", output, "--model", converted, "--max-steps", "1",
                 "--learning-rate", "0", "--batch-size", "2", "--no-progress"]
    assert run_subcommand("pretrain", list(map(str, arguments))) == 0
    adapted, original = ElmoTokenizer.from_pretrained(output), ElmoTokenizer.from_pretrained(converted)
    assert (adapted.char_vocab, adapted.word_vocab, adapted.row_width) == (
        original.char_vocab, original.word_vocab, original.row_width
    )
    torch.testing.assert_close(
        ElmoModel.from_pretrained(output).state_dict(), ElmoModel.from_pretrained(converted).state_dict()
    )
