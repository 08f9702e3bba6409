"""Odd but plausible arguments to the conversion, Hub and packaged-model functions, called from Python as a library
user calls them: paths of every spelling, files in the wrong place, interrupted conversions, names of packaged
models given as paths or hidden by local files, and push arguments that cannot work. Offline: Hub calls are
replaced by stand-ins that record them."""

import hashlib
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import FIXTURES, expected_top_layer, fixture_sentences

from elmo_hf import DEFAULT_MODEL, ElmoConfig, ElmoModel, ElmoTokenizer, packaged_model_path, resolve_model_name
from elmo_hf.conversion import hub
from elmo_hf.conversion.checkpoint import ConversionError
from elmo_hf.conversion.convert import convert_checkpoint
from elmo_hf.conversion.export import OriginalExportError, export_original
from elmo_hf.conversion.manylangs import convert_manylangs

OPTIONS = FIXTURES / "allennlp" / "options.json"
WEIGHTS = FIXTURES / "allennlp" / "lm_weights.hdf5"


def folder_digest(folder: Path) -> dict[str, str]:
    """Each file of `folder` by name, as the SHA-256 of its bytes."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


def test_relative_paths_with_spaces_and_non_ascii_convert_to_the_originals_outputs(tmp_path, monkeypatch, tokenizer):
    """str and Path, relative to the current directory, with spaces and non-ASCII letters: the folder is written where
    the path says and gives the original's top layer (the originals' own criterion)."""
    checkpoint = tmp_path / "ELMo checkpoint ü 日本"
    checkpoint.mkdir()
    shutil.copy(OPTIONS, checkpoint / "options.json")
    shutil.copy(WEIGHTS, checkpoint / "lm weights é.hdf5")
    monkeypatch.chdir(tmp_path)
    output = convert_checkpoint(f"{checkpoint.name}/options.json", Path(checkpoint.name, "lm weights é.hdf5"),
                                "out ü/elmo")
    assert output == tmp_path / "out ü" / "elmo" and output.is_absolute()
    model = ElmoModel.from_pretrained("out ü/elmo").eval()
    rows = [fixture_sentences("allennlp")[row][0] for row in range(3)]
    with torch.no_grad():
        top = model(**tokenizer(rows, is_split_into_words=True, padding=True, return_tensors="pt")).last_hidden_state
    for row, words in enumerate(rows):
        assert np.allclose(top[row, : len(words)].numpy(), expected_top_layer("allennlp", row, 0), atol=1e-6,
                           rtol=1e-5)


def test_an_interrupted_overwrite_keeps_the_previous_output_and_a_rerun_writes_the_same_bytes(tmp_path, monkeypatch):
    """Ctrl-C (KeyboardInterrupt) while the new folder is written leaves the previous one as it was and nothing
    beside it; converting again, twice, writes byte-identical folders."""
    output = convert_checkpoint(OPTIONS, WEIGHTS, tmp_path / "elmo")
    before = folder_digest(output)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(ElmoTokenizer, "save_pretrained", interrupted)
        for target in (output, tmp_path / "new" / "elmo"):
            with pytest.raises(KeyboardInterrupt):
                convert_checkpoint(OPTIONS, WEIGHTS, target, overwrite=True)
    assert folder_digest(output) == before and [path.name for path in tmp_path.iterdir()] == ["elmo"]
    for _ in range(2):
        convert_checkpoint(OPTIONS, WEIGHTS, output, overwrite=True)
        assert folder_digest(output) == before


@pytest.mark.parametrize("given", ["options", "weights"])
def test_a_folder_given_as_a_checkpoint_file_is_named_as_a_folder(tmp_path, given):
    """It exists, so "not found" (what it said) misled; nothing is written."""
    paths = {"options": OPTIONS, "weights": WEIGHTS, given: FIXTURES / "allennlp"}
    with pytest.raises(ConversionError, match=rf"^{given} file {FIXTURES / 'allennlp'} is a folder, not a file; pass"):
        convert_checkpoint(paths["options"], paths["weights"], tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_device_given_as_options_is_named_as_such(tmp_path):
    with pytest.raises(ConversionError, match=r"^options file /dev/null is not a regular file \(a device"):
        convert_checkpoint("/dev/null", WEIGHTS, tmp_path / "out")


def test_a_packaged_name_given_as_a_path_loads_the_packaged_model(tmp_path, monkeypatch):
    """`Path("elmo-en-mini")` resolves as the commands' functions (embed_corpus, export_original, ...) resolve it;
    the Elmo classes sent it to the Hub."""
    monkeypatch.chdir(tmp_path)
    assert resolve_model_name(Path(DEFAULT_MODEL)) == packaged_model_path(DEFAULT_MODEL)
    assert ElmoConfig.from_pretrained(Path(DEFAULT_MODEL)).to_dict() == ElmoConfig.from_pretrained(
        DEFAULT_MODEL).to_dict()
    assert isinstance(ElmoTokenizer.from_pretrained(Path(DEFAULT_MODEL)), ElmoTokenizer)
    assert resolve_model_name(Path("elsewhere")) == Path("elsewhere")


def test_a_file_named_like_a_packaged_model_does_not_hide_it(tmp_path, monkeypatch):
    """transformers loads only a folder as a local model, so a file of that name (an output, a note) must not make
    the name unloadable: it was passed on as a path and then looked up on the Hub."""
    (tmp_path / DEFAULT_MODEL).write_text("notes\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert resolve_model_name(DEFAULT_MODEL) == packaged_model_path(DEFAULT_MODEL)
    assert ElmoConfig.from_pretrained(DEFAULT_MODEL).lstm_dim == ElmoConfig.from_pretrained(
        packaged_model_path(DEFAULT_MODEL)).lstm_dim


def test_a_folder_hiding_a_packaged_model_is_named_in_the_error(tmp_path, monkeypatch):
    """A local folder wins, as in transformers; when it is no model the error says that it hides the packaged one
    (it said the name was neither a folder nor a packaged name, listing that very name)."""
    (tmp_path / DEFAULT_MODEL).mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OriginalExportError, match=rf"holds no config.json and hides the model packaged with elmo-hf "
                                                  rf"under that name; rename that folder, or give "
                                                  rf"{packaged_model_path(DEFAULT_MODEL)}\.$"):
        export_original(DEFAULT_MODEL, tmp_path / "out")


@pytest.fixture
def hub_calls(monkeypatch) -> list[str]:
    """`HfApi` calls of `hub.push_to_hub`, recorded and answered here instead of by a Hub."""
    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append("create_repo")
        return SimpleNamespace(repo_id=repo_id)

    def upload_folder(self, **kwargs):
        calls.append(f"upload_folder: {kwargs['commit_message']}")
        return "commit"

    monkeypatch.setattr(hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(hub.HfApi, "upload_folder", upload_folder)
    return calls


@pytest.mark.parametrize("folder", ["missing", "file.txt"])
def test_push_to_hub_refuses_what_is_not_a_folder_before_creating_the_repository(tmp_path, hub_calls, folder):
    """It created the (empty) repository on the Hub, then failed on the folder."""
    (tmp_path / "file.txt").write_text("x", encoding="utf-8")
    with pytest.raises(ConversionError, match=rf"^{tmp_path / folder} is not a folder; push the folder"):
        hub.push_to_hub(tmp_path / folder, "me/elmo", token="hf_x")
    assert hub_calls == []


@pytest.mark.parametrize(
    "timeout, retries", [(math.nan, 5), (math.inf, 5), (1e10, 5), (0.0, 5), ("60", 5), (60.0, 1.5), (60.0, -1)]
)
def test_push_arguments_that_cannot_work_are_refused_before_any_hub_call(tmp_path, hub_calls, timeout, retries):
    """A NaN, infinite or huge timeout (ValueError or OverflowError from the socket, after the conversion) and a
    fractional retry count (TypeError) passed `check_push_arguments`."""
    problem = hub.check_push_arguments("me/elmo", token="hf_x", timeout=timeout, retries=retries)
    assert problem == (f"--hub-timeout {timeout!r} and --hub-retries {retries!r}: the timeout must be a number of "
                       "seconds above 0 and at most 86400 (a day), the retries a whole number, at least 0.")
    with pytest.raises(ConversionError, match="^--hub-timeout"):
        hub.push_to_hub(tmp_path, "me/elmo", token="hf_x", timeout=timeout, retries=retries)
    assert hub_calls == []


def test_push_to_hub_of_the_current_folder_names_it_in_the_commit(tmp_path, monkeypatch, hub_calls):
    """`push_to_hub(".")` said "converted with elmo-hf from " (the name of "." is empty)."""
    (tmp_path / "elmo-small").mkdir()
    monkeypatch.chdir(tmp_path / "elmo-small")
    assert hub.push_to_hub(".", "me/elmo", token="hf_x", retries=0) == "commit"
    assert hub_calls == ["create_repo", "upload_folder: Add ELMo converted with elmo-hf from elmo-small"]


@pytest.mark.parametrize("language", ["", None, "z h"])
def test_convert_manylangs_refuses_a_language_that_is_no_code(tmp_path, language):
    """The card said `language: ` or `language: None`."""
    with pytest.raises(ConversionError, match="is not a language code such as 'zh'"):
        convert_manylangs(FIXTURES / "manylangs" / "model", tmp_path / "out", language=language)
    assert not (tmp_path / "out").exists()
