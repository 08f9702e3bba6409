"""elmo_hf.integrations.sentence_transformers: ELMo as the input module of a SentenceTransformer (mean of the words'
vectors), encode, save and load; and the `datasets.Dataset.map` recipes (per-word vectors, sentence vectors)."""

import re
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.integrations.ray import ElmoBatchEmbedder
from elmo_hf.integrations.sentence_transformers import ElmoSentenceModule

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"
TEXTS = ["ELMo reads characters.", "Words, not subwords, and a longer sentence than others.", "", "Über café 😀"]


def expected_sentence_vectors(folder: Path, texts: list[str], weights: list[float], gamma: float = 1.0) -> np.ndarray:
    """The mean over each text's words of `gamma * sum_j weights_j * layer_j`, each text computed alone."""
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    rows = []
    for text in texts:
        with torch.inference_mode():
            layers = model(**tokenizer([text], return_tensors="pt"), output_hidden_states=True).hidden_states
        mixed = gamma * sum(weight * layer[0].double() for weight, layer in zip(weights, layers))
        rows.append(mixed.mean(0).numpy() if len(mixed) else np.zeros(mixed.shape[-1]))
    return np.stack(rows)


@pytest.mark.parametrize(
    "settings, weights",
    [
        ({}, [1 / 3] * 3),
        ({"layers": "top"}, [0, 0, 1]),
        ({"layers": "mix", "mix_weights": [0.2, 0.3, 0.5], "gamma": 2.0}, [0.4, 0.6, 1.0]),
        ({"layers": "learned", "scalar_parameters": [0.0, 0.0, float(np.log(2))]}, [0.25, 0.25, 0.5]),
    ],
)
def test_encode_gives_the_mean_of_the_words_vectors(tiny_folder, settings, weights):
    model = SentenceTransformer(modules=[ElmoSentenceModule(tiny_folder, **settings)], device="cpu")
    embeddings = model.encode(TEXTS, batch_size=2)
    assert embeddings.shape == (len(TEXTS), 16) and model.get_embedding_dimension() == 16
    assert np.allclose(embeddings, expected_sentence_vectors(tiny_folder, TEXTS, weights), atol=1e-6, rtol=1e-5)
    assert not embeddings[2].any()  # a text without words: the zero vector
    words = model.encode(TEXTS[:1], output_value="token_embeddings")[0]
    assert words.shape == (4, 16)  # ELMo , reads , characters , .


def test_save_and_load_round_trip(tiny_folder, tmp_path):
    module = ElmoSentenceModule(tiny_folder, layers="learned", scalar_parameters=[0.5, -1.0, 2.0], gamma=0.7)
    model = SentenceTransformer(modules=[module], device="cpu")
    model.save(str(tmp_path / "saved"))
    with pytest.raises(ValueError, match="trust_remote_code=True"):  # sentence-transformers' rule for its modules
        SentenceTransformer(str(tmp_path / "saved"), device="cpu")
    loaded = SentenceTransformer(str(tmp_path / "saved"), device="cpu", trust_remote_code=True)
    assert isinstance(loaded[0], ElmoSentenceModule) and loaded[0].get_config_dict() == module.get_config_dict()
    assert np.array_equal(loaded.encode(TEXTS), model.encode(TEXTS))
    for name, parameter in ElmoModel.from_pretrained(tmp_path / "saved").state_dict().items():  # an ELMo folder too
        assert torch.equal(parameter, module.elmo.state_dict()[name]), name


def test_bad_settings_are_refused(tiny_folder):
    with pytest.raises(ValueError, match="layers must be one of"):
        ElmoSentenceModule(tiny_folder, layers="all")
    with pytest.raises(ValueError, match="needs mix_weights"):
        ElmoSentenceModule(tiny_folder, layers="mix")
    with pytest.raises(ValueError, match="scalar_parameters apply to layers='learned' only"):
        ElmoSentenceModule(tiny_folder, scalar_parameters=[0.0, 0.0, 0.0])
    model = SentenceTransformer(modules=[ElmoSentenceModule(tiny_folder)], device="cpu")
    with pytest.raises(TypeError, match="embeds texts"):
        model.encode([("a", "pair")])


def test_datasets_map_recipes(tiny_folder):
    """The README's recipes: per-word vectors with ElmoBatchEmbedder, sentence vectors with the SentenceTransformer."""
    dataset = datasets.Dataset.from_dict({"text": TEXTS})
    embedder = ElmoBatchEmbedder(tiny_folder, layers="top", split="default", batch_size=2, device="cpu")
    with_vectors = dataset.map(embedder, batched=True, batch_size=3)
    model, tokenizer = ElmoModel.from_pretrained(tiny_folder).eval(), ElmoTokenizer.from_pretrained(tiny_folder)
    for row, text in zip(with_vectors, TEXTS):
        with torch.inference_mode():
            expected = model(**tokenizer([text], return_tensors="pt")).last_hidden_state[0].numpy()
        vectors = np.asarray(row["vectors"], dtype=np.float32).reshape(-1, 16)
        assert row["text"] == text and np.allclose(vectors, expected, atol=1e-6, rtol=1e-5)
    sentences = SentenceTransformer(modules=[ElmoSentenceModule(tiny_folder)], device="cpu")
    with_embeddings = dataset.map(lambda batch: {"embedding": sentences.encode(batch["text"])}, batched=True)
    assert np.allclose(np.array(with_embeddings["embedding"]), sentences.encode(TEXTS), atol=1e-6, rtol=1e-5)


def test_integration_guide_python_blocks_run(tmp_path, monkeypatch):
    """docs/integrations.md's sentence-transformers and datasets blocks (the Ray block is
    tests/test_integrations_ray.py's pipeline on a cluster of its own)."""
    monkeypatch.chdir(tmp_path)  # the sentence-transformers block saves a folder
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.DOTALL)
    runnable = [block for block in blocks if not block.startswith("import ray\n")]
    assert len(blocks) == 3 and len(runnable) == 2
    encoded, mapped = {}, {}
    for block, namespace in zip(runnable, (encoded, mapped)):
        exec(compile(block, str(GUIDE), "exec"), namespace)
    assert encoded["embeddings"].shape == (2, 384) and tuple(encoded["words"].shape) == (4, 384)
    assert [len(vectors) for vectors in mapped["with_vectors"]["vectors"]] == [4, 5]  # words: ELMo reads characters .
    assert len(mapped["with_embeddings"]["embedding"][0]) == 384


@pytest.mark.parametrize("scalar_parameters", [[1.0], [1.0, 2.0], [0.0] * 4])
def test_learned_mix_needs_one_scalar_per_layer(tiny_folder, scalar_parameters):
    """One scalar would be broadcast to every layer, silently; two or four would fail inside torch."""
    with pytest.raises(ValueError, match=r"needs 3 scalar_parameters \(num_layers \+ 1"):
        ElmoSentenceModule(tiny_folder, layers="learned", scalar_parameters=scalar_parameters)
