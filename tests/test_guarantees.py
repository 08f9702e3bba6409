"""README's Guarantees that no other test module covers: bitwise determinism (repeated calls, threads sharing a
model, a fresh process), loading without unpickling anything, and folder code run only when trusted."""

import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import fixture_sentences
from transformers import AutoModel, AutoModelForTokenClassification, AutoTokenizer

from elmo_hf import ElmoForTokenClassification, ElmoModel

ROOT = Path(__file__).resolve().parent.parent
PROCESS_SCRIPT = """
import sys
import numpy as np
import torch
from elmo_hf import ElmoModel, ElmoTokenizer

folder, sentences, output = sys.argv[1], sys.argv[2].split("|"), sys.argv[3]
model = ElmoModel.from_pretrained(folder).eval()
inputs = ElmoTokenizer()([s.split() for s in sentences], is_split_into_words=True, padding=True, return_tensors="pt")
with torch.inference_mode():
    layers = model(**inputs, output_hidden_states=True).hidden_states
np.save(output, torch.stack(layers).numpy(), allow_pickle=False)
"""


@pytest.fixture(scope="module")
def model(converted) -> ElmoModel:
    return ElmoModel.from_pretrained(converted["allennlp"]).eval()


@pytest.fixture(scope="module")
def sentences() -> list[list[str]]:
    return fixture_sentences("allennlp")[0][:6]


def all_layers(model: ElmoModel, tokenizer, sentences: list[list[str]]) -> torch.Tensor:
    inputs = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        return torch.stack(model(**inputs, output_hidden_states=True).hidden_states)


def test_repeated_calls_are_bitwise_identical(model, tokenizer, sentences):
    first = all_layers(model, tokenizer, sentences)
    all_layers(model, tokenizer, sentences[::-1])
    assert torch.equal(all_layers(model, tokenizer, sentences), first)


def test_threads_sharing_one_model_get_identical_bits(model, tokenizer, sentences):
    expected = all_layers(model, tokenizer, sentences)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: all_layers(model, tokenizer, sentences), range(12)))
    assert all(torch.equal(result, expected) for result in results)


def test_a_fresh_process_gets_identical_bits(converted, model, tokenizer, sentences, tmp_path):
    output = tmp_path / "layers.npy"
    joined = "|".join(" ".join(sentence) for sentence in sentences)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run(
        [sys.executable, "-c", PROCESS_SCRIPT, str(converted["allennlp"]), joined, str(output)],
        check=True, cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert np.array_equal(np.load(output, allow_pickle=False), all_layers(model, tokenizer, sentences).numpy())


def test_loading_never_unpickles(converted, tmp_path, monkeypatch):
    """Folders hold safetensors and JSON only, and loading them calls neither pickle nor torch.load."""
    head_folder = tmp_path / "head"
    ElmoForTokenClassification.from_pretrained(converted["allennlp"], id2label={0: "O", 1: "B-X"}).save_pretrained(
        head_folder
    )
    for folder in (converted["allennlp"], head_folder):
        suffixes = {path.suffix for path in Path(folder).iterdir()}
        assert suffixes <= {".safetensors", ".json", ".py", ".md", ".txt"}, suffixes

    def refuse(*args, **kwargs):
        raise AssertionError("something was unpickled")

    for module, name in [(pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load")]:
        monkeypatch.setattr(module, name, refuse)
    AutoModel.from_pretrained(converted["allennlp"])
    AutoTokenizer.from_pretrained(converted["allennlp"])
    AutoModelForTokenClassification.from_pretrained(head_folder)


TRUST_SCRIPT = """
import sys
sys.modules["elmo_hf"] = None  # as where elmo-hf is not installed: the folder's own code is all there is
from transformers import AutoModel

try:
    AutoModel.from_pretrained(sys.argv[1])
except ValueError as error:
    print("refused:", "trust_remote_code" in str(error))
"""


def test_folder_code_runs_only_with_trust_remote_code(converted, tmp_path):
    """A folder's model code (here with a line that leaves a mark) is not run unless the caller trusts it."""
    folder = tmp_path / "folder"
    folder.mkdir()
    mark = tmp_path / "ran"
    for path in Path(converted["allennlp"]).iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    for name in ("configuration_elmo.py", "modeling_elmo.py"):
        with open(folder / name, "a") as file:
            file.write(f"\nopen({str(mark)!r}, 'w').close()\n")
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    completed = subprocess.run(
        [sys.executable, "-c", TRUST_SCRIPT, str(folder)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "refused: True" in completed.stdout, completed.stderr[-2000:]
    assert not mark.exists()
