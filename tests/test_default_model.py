"""The default model shipped with the package (elmo_hf/models/elmo-en-mini): loads offline by its short name in a
fresh process, through the Elmo classes, the Auto classes and pipelines, and gives the recorded outputs."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import FIXTURES, tiny_config
from safetensors.torch import load_file

from elmo_hf import (
    DEFAULT_MODEL,
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    packaged_model_path,
    corpus_perplexity,
    packaged_elmo,
    packaged_models,
)
from elmo_hf.corpus.data import ElmoWordVocabulary
from elmo_hf.packaged_elmo import PACKAGED_MODELS_DIR

ROOT = Path(__file__).resolve().parent.parent
RECORDED = FIXTURES / f"{DEFAULT_MODEL}-outputs.npy"
# Must match experiments/package_default_model.py's FIXED_SENTENCE, which recorded the outputs.
FIXED_SENTENCE = "The whale , Ishmael said , surfaced near Nantucket in 1851 ."
# A fresh interpreter with no network: the name resolves to the packaged folder, nothing is fetched.
FRESH_PROCESS_SCRIPT = """
import sys
import numpy, torch
from elmo_hf import ElmoModel, ElmoTokenizer
model = ElmoModel.from_pretrained("elmo-en-mini").eval()
tokenizer = ElmoTokenizer.from_pretrained("elmo-en-mini")
with torch.no_grad():
    output = model(**tokenizer(sys.argv[1], return_tensors="pt"), output_hidden_states=True)
numpy.save(sys.argv[2], torch.stack(output.hidden_states)[:, 0].numpy())
"""


def test_the_default_model_ships_within_the_size_limit():
    assert DEFAULT_MODEL == "elmo-en-mini" and DEFAULT_MODEL in packaged_models()
    assert (PACKAGED_MODELS_DIR / DEFAULT_MODEL / "model.safetensors").stat().st_size <= 20 * 1024 * 1024
    assert not list((PACKAGED_MODELS_DIR / DEFAULT_MODEL).glob("*.py")), "the package's code is not copied"


def test_fresh_offline_process_gives_the_recorded_outputs(tmp_path):
    """Recorded when the model was packaged; the same to 1e-5 in a new process started with no network access."""
    result = tmp_path / "outputs.npy"
    env = {
        **os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    completed = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_SCRIPT, FIXED_SENTENCE, str(result)],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert completed.returncode == 0, completed.stderr
    recorded = np.load(RECORDED)
    assert recorded.shape == (3, len(FIXED_SENTENCE.split()), 384)
    np.testing.assert_allclose(np.load(result), recorded, atol=1e-5, rtol=1e-5)


def test_both_paths_give_the_recorded_outputs(tokenizer):
    """The CPU kernels and the eager reference both reproduce the recording."""
    recorded = torch.from_numpy(np.load(RECORDED))
    inputs = ElmoTokenizer.from_pretrained(DEFAULT_MODEL)(FIXED_SENTENCE, return_tensors="pt")
    for implementation in ("auto", "eager"):
        model = ElmoModel.from_pretrained(DEFAULT_MODEL, elmo_implementation=implementation).eval()
        with torch.no_grad():
            layers = torch.stack(model(**inputs, output_hidden_states=True).hidden_states)[:, 0]
        torch.testing.assert_close(layers, recorded, atol=1e-5, rtol=1e-5)


def test_auto_classes_and_pipelines_take_the_packaged_path():
    from transformers import AutoConfig, AutoModel, AutoTokenizer, pipeline

    path = packaged_model_path(DEFAULT_MODEL)
    assert isinstance(AutoConfig.from_pretrained(path), ElmoConfig)
    assert isinstance(AutoModel.from_pretrained(path), ElmoModel)
    assert isinstance(AutoTokenizer.from_pretrained(path), ElmoTokenizer)
    features = pipeline("feature-extraction", model=path)("The whale surfaced .")
    recorded = np.load(RECORDED)
    assert np.asarray(features).shape == (1, 4, recorded.shape[-1])


def test_a_task_head_starts_from_the_default_biLM():
    head = ElmoForTokenClassification.from_pretrained(DEFAULT_MODEL, num_labels=3)
    base = ElmoModel.from_pretrained(DEFAULT_MODEL)
    for name, tensor in base.state_dict().items():
        assert torch.equal(head.elmo.state_dict()[name], tensor), name


def test_a_local_folder_of_the_same_name_wins(tmp_path, tiny_model, monkeypatch):
    """As in transformers, a path that exists is a path: the packaged model does not shadow the user's folder."""
    tiny_model.save_pretrained(tmp_path / DEFAULT_MODEL)
    monkeypatch.chdir(tmp_path)
    assert ElmoModel.from_pretrained(DEFAULT_MODEL).config.lstm_dim == tiny_model.config.lstm_dim


def test_an_unknown_packaged_name_is_a_clear_error():
    with pytest.raises(ValueError, match=r"no model named 'elmo-xx' ships with elmo-hf; the packaged models are "):
        packaged_model_path("elmo-xx")


def test_the_model_card_states_the_model_and_its_example_runs():
    """The card (also model_cards/elmo-en-mini.md) gives the packaged model's parameter count and width, and its
    Python example loads the model as written."""
    card = (PACKAGED_MODELS_DIR / DEFAULT_MODEL / "README.md").read_text(encoding="utf-8")
    model = ElmoModel.from_pretrained(DEFAULT_MODEL)
    assert f"{sum(parameter.numel() for parameter in model.parameters()):,}" in card
    assert f"3 vectors of {model.config.hidden_size} dimensions" in card
    assert "elmo-hf perplexity --model" in card
    namespace = {}
    exec(re.search(r"```python\n(.*?)```", card, re.DOTALL).group(1), namespace)  # noqa: S102 (the card's example)
    assert isinstance(namespace["model"], ElmoModel)


def test_packaging_ships_the_softmax_in_bfloat16_and_loads_it_as_float32(tmp_path, monkeypatch):
    """experiments/package_default_model.py on a small pretraining folder: the packaged folder holds the biLM, the
    softmax and vocab.txt, stored as bfloat16; the Elmo classes load it by name as float32 (the stored values), and
    `corpus_perplexity` takes the name, giving the trained folder's result to bfloat16 rounding."""
    script = ROOT / "experiments" / "package_default_model.py"
    spec = importlib.util.spec_from_file_location("package_default_model", script)
    packaging = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(packaging)
    models = tmp_path / "models"
    (tmp_path / "tests" / "fixtures").mkdir(parents=True)
    monkeypatch.setattr(packaging, "ROOT", tmp_path)
    monkeypatch.setattr(packaging, "PACKAGED_MODELS_DIR", models)
    monkeypatch.setattr(packaged_elmo, "PACKAGED_MODELS_DIR", models)

    text = tmp_path / "text.txt"
    text.write_text("the whale said nothing .\nthe sea was calm and grey .\n" * 3, encoding="utf-8")
    vocabulary = ElmoWordVocabulary.build([text])
    run = tmp_path / "run"
    torch.manual_seed(0)
    trained = ElmoForPreTraining(tiny_config(word_vocab_size=len(vocabulary))).eval()
    trained.save_pretrained(run)
    vocabulary.save(run)

    packaging.package(run, "tiny-mini")
    stored = load_file(models / "tiny-mini" / "model.safetensors")
    assert {value.dtype for value in stored.values()} == {torch.bfloat16}
    assert "softmax.weight" in stored and (models / "tiny-mini" / "vocab.txt").is_file()
    loaded = ElmoModel.from_pretrained("tiny-mini")
    weight = loaded.token_encoder.projection.weight
    assert weight.dtype == torch.float32
    assert torch.equal(weight, trained.elmo.token_encoder.projection.weight.to(torch.bfloat16).float())
    packaged, original = (corpus_perplexity(model, [text], threads=1) for model in ("tiny-mini", run))
    assert packaged["forward_perplexity"] == pytest.approx(original["forward_perplexity"], rel=1e-2)
    assert (tmp_path / "tests" / "fixtures" / "tiny-mini-outputs.npy").is_file()
