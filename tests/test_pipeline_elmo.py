"""Pipelines: token classification (ElmoTokenClassificationPipeline), feature extraction and text classification,
with elmo_hf imported and, from the saved folders alone, in a process where elmo_hf cannot be imported."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import tiny_config
from transformers import pipeline
from transformers.utils import logging

from elmo_hf import (
    ElmoFeatureExtractionPipeline,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenClassificationPipeline,
    ElmoTokenizer,
)

TAGS = {0: "O", 1: "B-LOC", 2: "I-LOC", 3: "B-PER", 4: "I-PER"}
SENTENCE = "Zoë moved to São Paulo, Brazil! Ok 😀"
# (word, start, end) by hand: punctuation is split off, "ë", "ã" and the emoji are one character each.
WORDS = [
    ("Zoë", 0, 3),
    ("moved", 4, 9),
    ("to", 10, 12),
    ("São", 13, 16),
    ("Paulo", 17, 22),
    (",", 22, 23),
    ("Brazil", 24, 30),
    ("!", 30, 31),
    ("Ok", 32, 34),
    ("😀", 35, 36),
]
OTHER = "Hello there, Zoë."
STRATEGIES = ("none", "simple", "first", "average", "max")

REMOTE_SCRIPT = """
import json, sys
sys.modules["elmo_hf"] = None  # the package cannot be imported: everything comes from the folders
from transformers import pipeline

ner_folder, sequence_folder, base_folder, sentence, other = sys.argv[1:]
ner = pipeline("token-classification", model=ner_folder, trust_remote_code=True)
out = {"classes": [type(ner).__name__, type(ner).__module__, type(ner.model).__module__]}
for strategy in ("none", "simple", "first", "average", "max"):
    out[strategy] = ner(sentence, aggregation_strategy=strategy)
out["pre_split"] = ner(sentence.split(" "), is_split_into_words=True, delimiter="||", ignore_labels=[])
out["batch"] = ner([sentence, other, ""], batch_size=2, aggregation_strategy="simple")
out["ner_alias"] = pipeline("ner", model=ner_folder, trust_remote_code=True)(other)
out["features"] = pipeline("feature-extraction", model=base_folder, trust_remote_code=True)(sentence)
classifier = pipeline("text-classification", model=sequence_folder, trust_remote_code=True)
out["text"] = classifier([sentence, other], top_k=None)
out["text_class"] = type(classifier.model).__module__
print(json.dumps(out, default=float))
"""


@pytest.fixture(scope="module")
def folders(converted, tmp_path_factory) -> dict:
    """A tagger on the fixture biLM (classifier scaled so that its tags vary), a sentence classifier and the base
    model, each saved with the tokenizer."""
    root = tmp_path_factory.mktemp("pipelines")
    tokenizer = ElmoTokenizer()
    logging.set_verbosity_error()
    torch.manual_seed(5)
    tagger = ElmoForTokenClassification.from_pretrained(
        converted["allennlp"], id2label=TAGS, scalar_mix_layer_norm="token"
    )
    with torch.no_grad():
        tagger.classifier.weight.normal_(0, 1.0)
    torch.manual_seed(0)
    models = {
        "ner": tagger,
        "sequence": ElmoForSequenceClassification(tiny_config(id2label={0: "neg", 1: "neu", 2: "pos"})).eval(),
        "base": ElmoModel(tiny_config()).eval(),
    }
    logging.set_verbosity_warning()
    for name, model in models.items():
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    return {name: (root / name, model) for name, model in models.items()}


@pytest.fixture(scope="module")
def ner(folders) -> ElmoTokenClassificationPipeline:
    """The shortest local call: a folder and the pipeline class, no remote code."""
    return pipeline(
        "token-classification", model=str(folders["ner"][0]), pipeline_class=ElmoTokenClassificationPipeline
    )


def assert_same_entities(actual, expected):
    """Equal entities (or nested lists of them), scores to 1e-5."""
    assert isinstance(actual, list) and len(actual) == len(expected)
    for one, other in zip(actual, expected):
        if isinstance(other, list):
            assert_same_entities(one, other)
            continue
        assert {key: value for key, value in one.items() if key != "score"} == {
            key: value for key, value in other.items() if key != "score"
        }
        assert float(one["score"]) == pytest.approx(float(other["score"]), abs=1e-5)


def reference_groups(tokens: list[dict], sentence: str) -> list[dict]:
    """BIO grouping by hand: a word joins the previous group if it has the same type and is not B-; O is dropped."""
    groups = []
    for token in tokens:
        prefix, kind = token["entity"].split("-", 1) if "-" in token["entity"] else ("I", token["entity"])
        if groups and groups[-1]["entity_group"] == kind and prefix != "B":
            groups[-1]["end"] = token["end"]
        else:
            groups.append({"entity_group": kind, "start": token["start"], "end": token["end"]})
    return [
        {**group, "word": sentence[group["start"] : group["end"]]} for group in groups if group["entity_group"] != "O"
    ]


def test_words_offsets_and_tags_of_every_word(ner, folders, tokenizer):
    tokens = ner(SENTENCE, ignore_labels=[])
    assert [(token["word"], token["start"], token["end"]) for token in tokens] == WORDS
    assert [token["index"] for token in tokens] == list(range(len(WORDS)))
    model = folders["ner"][1]
    with torch.no_grad():
        probabilities = model(**tokenizer(SENTENCE, return_tensors="pt")).logits[0].softmax(-1)
    assert [token["entity"] for token in tokens] == [TAGS[int(i)] for i in probabilities.argmax(-1)]
    np.testing.assert_allclose([token["score"] for token in tokens], probabilities.max(-1).values, rtol=1e-5)
    assert len({token["entity"] for token in tokens}) >= 3


def test_aggregation_strategies_group_whole_words(ner):
    tokens = ner(SENTENCE, ignore_labels=[])
    expected = reference_groups(tokens, SENTENCE)
    assert any(" " in group["word"] for group in expected), "the fixture should tag a multi-word entity"
    for strategy in ("simple", "first", "average", "max"):
        groups = ner(SENTENCE, aggregation_strategy=strategy)
        assert [{key: group[key] for key in ("entity_group", "start", "end", "word")} for group in groups] == expected
        assert_same_entities(groups, ner(SENTENCE, aggregation_strategy="simple"))


def test_pre_split_input_and_batching(ner):
    words = SENTENCE.split(" ")
    # As with the stock pipeline, one pre-split sentence gives a list with one result.
    [tokens] = ner(words, is_split_into_words=True, delimiter="||", ignore_labels=[])
    joined = "||".join(words)
    assert [joined[token["start"] : token["end"]] for token in tokens] == words
    assert [token["word"] for token in tokens] == words
    batched = ner([SENTENCE, OTHER, "", SENTENCE], batch_size=2, aggregation_strategy="simple")
    assert_same_entities(
        batched, [ner(text, aggregation_strategy="simple") for text in (SENTENCE, OTHER, "", SENTENCE)]
    )
    assert batched[2] == []


def test_direct_construction_from_model_objects(folders, ner):
    direct = ElmoTokenClassificationPipeline(model=folders["ner"][1], tokenizer=ElmoTokenizer())
    assert_same_entities(direct(SENTENCE), ner(SENTENCE))


@pytest.mark.parametrize(
    ("inputs", "kwargs", "error", "message"),
    [
        ([], {}, ValueError, "At least one input is required"),
        (None, {}, TypeError, "expects a str, a list of str"),
        (42, {}, TypeError, "got int"),
        (["fine", 3], {}, ValueError, "Each input must be a str"),
        ("not split", {"is_split_into_words": True}, ValueError, "must be a list of words"),
        (SENTENCE, {"stride": 2}, ValueError, "`stride` is not supported"),
        (SENTENCE, {"aggregation_strategy": "longest"}, ValueError, r"aggregation_strategy must be one of \["),
        (SENTENCE, {"ignore_labels": "O"}, TypeError, "ignore_labels must be a list of labels, got the str 'O'"),
        ([("Zoë", "moved")], {"is_split_into_words": True}, ValueError, "list of words .*got a list holding tuple"),
    ],
)
def test_bad_pipeline_input(ner, inputs, kwargs, error, message):
    with pytest.raises(error, match=message):
        ner(inputs, **kwargs)


@pytest.fixture(scope="module")
def extractor(converted) -> ElmoFeatureExtractionPipeline:
    """Pre-split words need this class: the stock pipeline drops is_split_into_words (see its docstring)."""
    return pipeline(
        "feature-extraction", model=str(converted["allennlp"]), pipeline_class=ElmoFeatureExtractionPipeline
    )


def test_feature_extraction_keeps_pre_split_words_one_sentence(extractor):
    """Issue 26 item 2: with is_split_into_words=True a list of words is one sentence, embedded in context (the
    vectors of the same sentence given as text), never a batch of one-word sentences."""
    words = ["the", "bank", "of", "the", "river"]
    expected = np.asarray(extractor(" ".join(words)))
    assert expected.shape[:2] == (1, len(words))
    assert not np.allclose(expected[0, 1], np.asarray(extractor("bank"))[0, 0]), "context should change the vector"
    np.testing.assert_array_equal(extractor(words, is_split_into_words=True), expected)
    np.testing.assert_array_equal(extractor(words, tokenize_kwargs={"is_split_into_words": True}), expected)
    several = extractor([words, ["bank"], []], is_split_into_words=True)
    assert len(several) == 3
    np.testing.assert_array_equal(several[0], expected)
    np.testing.assert_array_equal(several[1], extractor("bank"))
    assert several[2] == extractor("") == [[]]


def test_feature_extraction_gives_each_sentence_its_own_rows_in_any_batch(extractor):
    """A sentence batched with longer ones gets its words' rows alone (no padding rows), as when it is alone."""
    texts = ["the bank of the river", "bank", ""]
    alone = [extractor(text) for text in texts]
    for batch_size in (1, 3):
        batched = extractor(texts, batch_size=batch_size)
        assert [np.shape(features) for features in batched] == [(1, 5, 32), (1, 1, 32), (1, 0)]
        for features, expected in zip(batched, alone):
            np.testing.assert_allclose(features, expected, rtol=1e-5, atol=1e-6)
        tensors = extractor(texts, batch_size=batch_size, return_tensors=True)
        assert [tuple(tensor.shape) for tensor in tensors] == [(1, 5, 32), (1, 1, 32), (1, 0, 32)]
        # Without an attention mask (the tokenizer asked for none), the rows with characters are the words.
        unmasked = extractor(texts, batch_size=batch_size, tokenize_kwargs={"return_attention_mask": False})
        for features, expected in zip(unmasked, alone):
            np.testing.assert_allclose(features, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="At least one input is required"):
        extractor([])


@pytest.mark.parametrize(
    ("inputs", "kwargs", "message"),
    [
        ([["the", "bank"]], {}, "Each input must be a str, got list; .* pass is_split_into_words=True"),
        ("the bank", {"is_split_into_words": True}, "must be a list of words"),
        ([["the", 3]], {"is_split_into_words": True}, "must be a list of words"),
    ],
)
def test_feature_extraction_refuses_words_it_cannot_keep_together(extractor, inputs, kwargs, message):
    with pytest.raises(ValueError, match=message):
        extractor(inputs, **kwargs)


def test_pipeline_refuses_a_model_without_label_names(folders):
    with pytest.raises(ValueError, match="no label names"):
        pipeline("token-classification", model=str(folders["base"][0]), pipeline_class=ElmoTokenClassificationPipeline)


def test_saved_folder_carries_the_pipeline(folders):
    folder = folders["ner"][0]
    config = json.loads((folder / "config.json").read_text())
    assert (
        config["custom_pipelines"]["token-classification"]["impl"] == "pipeline_elmo.ElmoTokenClassificationPipeline"
    )
    assert config["custom_pipelines"]["ner"] == config["custom_pipelines"]["token-classification"]
    for name in ("configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py", "pipeline_elmo.py"):
        assert (folder / name).is_file(), name


def test_pipelines_from_the_folders_alone(folders, ner, tmp_path):
    """One fresh process where `import elmo_hf` fails: token classification, feature extraction and text
    classification load everything from the folders and give the local results."""
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    folder_args = [str(folders[name][0]) for name in ("ner", "sequence", "base")]
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, *folder_args, SENTENCE, OTHER],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    remote = json.loads(result.stdout.strip().splitlines()[-1])

    name, pipeline_module, model_module = remote["classes"]
    assert name == "ElmoTokenClassificationPipeline"
    assert pipeline_module.startswith("transformers_modules.") and model_module.startswith("transformers_modules.")
    assert remote["text_class"].startswith("transformers_modules.")
    for strategy in STRATEGIES:
        assert_same_entities(remote[strategy], ner(SENTENCE, aggregation_strategy=strategy))
    pre_split = ner(SENTENCE.split(" "), is_split_into_words=True, delimiter="||", ignore_labels=[])
    assert_same_entities(remote["pre_split"], pre_split)
    assert_same_entities(remote["batch"], [ner(text, aggregation_strategy="simple") for text in (SENTENCE, OTHER, "")])
    assert_same_entities(remote["ner_alias"], ner(OTHER))

    tokenizer = ElmoTokenizer()
    with torch.no_grad():
        features = folders["base"][1](**tokenizer(SENTENCE, return_tensors="pt")).last_hidden_state
        probabilities = folders["sequence"][1](**tokenizer([SENTENCE, OTHER], padding=True, return_tensors="pt"))
    np.testing.assert_allclose(np.array(remote["features"]), features.numpy(), atol=1e-5)
    probabilities = probabilities.logits.softmax(-1)
    for row, ranked in enumerate(remote["text"]):
        assert {entry["label"]: entry["score"] for entry in ranked} == pytest.approx(
            {label: float(probabilities[row, index]) for index, label in enumerate(("neg", "neu", "pos"))}, abs=1e-5
        )


def test_the_stock_feature_extraction_pipeline_keeps_words_together_through_tokenize_kwargs(converted, extractor):
    """Issue 26 item 2, without ElmoFeatureExtractionPipeline: the stock pipeline drops `is_split_into_words`, but
    passes `tokenize_kwargs` to the tokenizer, which then keeps each list of words one sentence; a list of words whose
    items reach the tokenizer one by one (a flat list) is refused there, not embedded word by word."""
    stock = pipeline("feature-extraction", model=str(converted["allennlp"]))
    assert type(stock) is not ElmoFeatureExtractionPipeline
    words = ["the", "bank", "of", "the", "river"]
    several = stock([words, ["bank"]], tokenize_kwargs={"is_split_into_words": True})
    np.testing.assert_array_equal(several[0], extractor(words, is_split_into_words=True))
    np.testing.assert_array_equal(several[1], extractor("bank"))
    with pytest.raises(TypeError, match="With is_split_into_words=True, pass a list of words"):
        stock(words, tokenize_kwargs={"is_split_into_words": True})
