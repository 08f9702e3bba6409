"""Pipelines under hostile input: text without words, odd Unicode, mixed batches, a long text, inputs of the wrong
type, pre-split words from a generator, flags given when the pipeline is built, bad parameters and label names. Each
input gets a correct result (`text[start:end]` is each word) or one clear error."""

import numpy as np
import pytest
import torch
from conftest import tiny_config
from huggingface_hub.errors import StrictDataclassFieldValidationError
from transformers import pipeline
from transformers.pipelines.token_classification import AggregationStrategy

from elmo_hf import (
    ElmoFeatureExtractionPipeline,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenClassificationPipeline,
    ElmoTokenizer,
)

TAGS = {0: "O", 1: "B-LOC", 2: "I-LOC", 3: "B-PER", 4: "I-PER"}
STRATEGIES = ("none", "simple", "first", "average", "max")
WITHOUT_WORDS = ["", "   ", "\t\n", "\u00a0", "\r\n", "\u3000 \u2028"]
HOSTILE = [
    "Zoë moved to São Paulo, Brazil! Ok 😀 and\tthen\u00a0went\r\nhome now with Ann Lee",
    # combining marks, an emoji with a modifier, surrogate pairs, a ZWJ
    "cafe\u0301 na\u0308ive 👍🏽 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 👨‍👩‍👧 x",
    "lone \ud800 surrogate\udfff here",
    "ctrl\x00char \x07bell \x1b[0m esc\x7f",
    "\ttabs\t\tand\u00a0\u00a0nbsp\r\n\r\ncrlf\u200bzwsp ",
]
WORDS = ["😀👍🏽", "e\u0301", "𝔘𝔫𝔦", "\ud800x", "a\x00b", "São Paulo"]


@pytest.fixture(scope="module")
def tagger() -> ElmoForTokenClassification:
    """A tiny tagger whose tags vary along a sentence (so that the strategies group several words)."""
    torch.manual_seed(0)
    model = ElmoForTokenClassification(tiny_config(id2label=TAGS, scalar_mix_layer_norm="token")).eval()
    with torch.no_grad():
        model.classifier.weight.normal_(0, 1.0)
    return model


@pytest.fixture(scope="module")
def ner(tagger) -> ElmoTokenClassificationPipeline:
    return tagging_pipeline(tagger)


@pytest.fixture(scope="module")
def extractor() -> ElmoFeatureExtractionPipeline:
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).eval()
    return pipeline(
        "feature-extraction", model=model, tokenizer=ElmoTokenizer(), pipeline_class=ElmoFeatureExtractionPipeline
    )


def tagging_pipeline(tagger: ElmoForTokenClassification, **kwargs) -> ElmoTokenClassificationPipeline:
    """`pipeline("token-classification")` of `tagger`, with `kwargs` given when it is built."""
    return pipeline(
        "token-classification",
        model=tagger,
        tokenizer=ElmoTokenizer(),
        pipeline_class=ElmoTokenClassificationPipeline,
        **kwargs,
    )


def spans(entities: list[dict]) -> list[tuple]:
    """Each entity without its score (compared exactly)."""
    return [tuple((key, value) for key, value in entity.items() if key != "score") for entity in entities]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("text", WITHOUT_WORDS)
def test_text_without_words_gives_no_entities_with_every_strategy(ner, text, strategy):
    assert ner(text, aggregation_strategy=strategy, ignore_labels=[]) == []


@pytest.mark.parametrize("text", HOSTILE)
def test_offsets_map_back_to_the_text_with_every_strategy(ner, tokenizer, text):
    """Every word of the tokenizer gets one entity at its offsets, and each group spans its words exactly."""
    offsets = [tuple(pair) for pair in tokenizer(text, return_offsets_mapping=True)["offset_mapping"]]
    tokens = ner(text, ignore_labels=[])
    assert [(token["start"], token["end"]) for token in tokens] == offsets
    assert all(token["word"] == text[token["start"] : token["end"]] for token in tokens)
    for strategy in STRATEGIES[1:]:
        groups = ner(text, aggregation_strategy=strategy, ignore_labels=[])
        assert all(group["word"] == text[group["start"] : group["end"]] for group in groups)
        # The groups cover the words in order, each word once.
        starts = {start for start, _ in offsets}
        ends = {end for _, end in offsets}
        assert all(group["start"] in starts and group["end"] in ends for group in groups)
        assert [group["start"] for group in groups] == sorted({group["start"] for group in groups})


def test_the_fixture_tags_groups_of_several_words(ner):
    groups = ner(HOSTILE[0], aggregation_strategy="simple", ignore_labels=[])
    assert len(groups) > 1 and any(" " in group["word"] for group in groups)


@pytest.mark.parametrize("batch_size", [1, 4])
def test_batch_mixing_texts_with_and_without_words_matches_each_text_alone(ner, extractor, batch_size):
    texts = ["", HOSTILE[0], "   ", HOSTILE[1], "\u00a0", HOSTILE[2], "\t\n"]
    for strategy in ("none", "simple"):
        batched = ner(texts, batch_size=batch_size, aggregation_strategy=strategy, ignore_labels=[])
        assert [spans(result) for result in batched] == [
            spans(ner(text, aggregation_strategy=strategy, ignore_labels=[])) for text in texts
        ]
    for features, text in zip(extractor(texts, batch_size=batch_size), texts):
        np.testing.assert_allclose(np.asarray(features), np.asarray(extractor(text)), rtol=1e-5, atol=1e-6)


def test_long_text_batched_with_short_ones_keeps_every_word_and_offset(ner, tokenizer):
    long = " ".join(f"w{index % 97}\t" if index % 5 else "Zoë\u00a0" for index in range(10_000))
    texts = [long, "", "Ann Lee"]
    results = ner(texts, batch_size=4, ignore_labels=[])
    offsets = [tuple(pair) for pair in tokenizer(long, return_offsets_mapping=True)["offset_mapping"]]
    assert len(offsets) == 10_000
    assert [(token["start"], token["end"]) for token in results[0]] == offsets
    assert all(token["word"] == long[token["start"] : token["end"]] for token in results[0])
    assert [spans(result) for result in results[1:]] == [spans(ner(text, ignore_labels=[])) for text in texts[1:]]


def test_tuple_of_texts_is_a_batch(ner, extractor):
    texts = ("Ann Lee", "", "São Paulo")
    assert [spans(result) for result in ner(texts)] == [spans(ner(text)) for text in texts]
    assert extractor(texts) == [extractor(text) for text in texts]


@pytest.mark.parametrize(
    "inputs", [None, 3, 2.5, True, b"Ann Lee", bytearray(b"Ann"), memoryview(b"Ann"), {"text": "Ann"}, {"Ann"}]
)
def test_inputs_of_another_type_raise_a_type_error_naming_it(ner, extractor, inputs):
    for pipe in (ner, extractor):
        with pytest.raises(TypeError, match=f"expects a str, .*; got {type(inputs).__name__}\\."):
            pipe(inputs)


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize(
    ("item", "message"),
    [(None, "got NoneType.$"), (b"Lee", "got bytes.$"), (["Ann"], "got list; .*is_split_into_words=True")],
)
def test_an_item_of_another_type_in_a_batch_is_named(ner, extractor, batch_size, item, message):
    for pipe in (ner, extractor):
        with pytest.raises(ValueError, match=f"Each input must be a str, {message}"):
            pipe(["Ann", item], batch_size=batch_size)


def test_empty_batch_is_refused(ner, extractor):
    for pipe in (ner, extractor):
        for inputs in ([], ()):
            with pytest.raises(ValueError, match="At least one input is required"):
                pipe(inputs)


def test_empty_word_list_is_one_sentence_without_words(ner, extractor):
    assert ner([], is_split_into_words=True) == [[]]
    assert ner([[]], is_split_into_words=True, batch_size=4) == [[]]
    assert extractor([], is_split_into_words=True) == extractor("")


@pytest.mark.parametrize("delimiter", [" ", "||", "", "\u00a0", "😀"])
def test_pre_split_offsets_hold_in_the_words_joined_by_any_delimiter(ner, delimiter):
    joined = delimiter.join(WORDS)
    [tokens] = ner(WORDS, is_split_into_words=True, delimiter=delimiter, ignore_labels=[])
    assert [token["word"] for token in tokens] == WORDS
    assert [joined[token["start"] : token["end"]] for token in tokens] == WORDS
    [groups] = ner(WORDS, is_split_into_words=True, delimiter=delimiter, aggregation_strategy="simple")
    assert all(group["word"] == joined[group["start"] : group["end"]] for group in groups)


def test_a_generator_of_word_lists_tags_every_sentence(ner, extractor):
    """The stock `__call__` used the generator up looking for lists and returned no results."""
    sentences = [WORDS, [], ["Ann", "Lee"]]
    expected = [spans(ner(words, is_split_into_words=True, ignore_labels=[])[0]) for words in sentences]
    streamed = ner((words for words in sentences), is_split_into_words=True, ignore_labels=[], batch_size=2)
    assert [spans(result) for result in streamed] == expected
    streamed = extractor((words for words in sentences), is_split_into_words=True)
    assert list(streamed) == [extractor(words, is_split_into_words=True) for words in sentences]


def test_a_generator_of_texts_tags_every_text(ner):
    texts = ["Ann Lee", "", HOSTILE[1]]
    assert [spans(result) for result in ner(text for text in texts)] == [spans(ner(text)) for text in texts]


def test_split_and_delimiter_given_when_the_pipeline_is_built_hold(tagger, ner):
    """The stock `__call__` reset both: a list of words became one-word sentences, offsets used a space."""
    for built_with in ({"is_split_into_words": True, "delimiter": "||"}, {"delimiter": "||"}):
        built = tagging_pipeline(tagger, ignore_labels=[], **built_with)
        call = {} if "is_split_into_words" in built_with else {"is_split_into_words": True}
        [tokens] = built(WORDS, **call)
        assert spans(tokens) == spans(ner(WORDS, is_split_into_words=True, delimiter="||", ignore_labels=[])[0])
        [tokens] = built(WORDS, delimiter="", **call)  # a delimiter given to the call wins
        assert spans(tokens) == spans(ner(WORDS, is_split_into_words=True, delimiter="", ignore_labels=[])[0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"is_split_into_words": True, "delimiter": 3}, "delimiter must be a str .*got int"),
        ({"ignore_labels": 1}, "ignore_labels must be a list of labels, got int; pass a list of str"),
        ({"ignore_labels": [None, "O"]}, "ignore_labels must be a list of labels, got a list holding NoneType"),
        ({"ignore_labels": "O"}, "ignore_labels must be a list of labels, got the str 'O'"),
        ({"aggregation_strategy": 3}, r"must be one of \[.*\] \(a str or AggregationStrategy\), got int"),
        ({"aggregation_strategy": ["simple"]}, r"aggregation_strategy must be one of \[.*got list"),
    ],
)
def test_bad_parameters_raise_a_type_error_naming_them(ner, tagger, kwargs, message):
    words = WORDS if kwargs.get("is_split_into_words") else "Ann Lee"
    with pytest.raises(TypeError, match=message):
        ner(words, **kwargs)
    with pytest.raises(TypeError, match=message):
        tagging_pipeline(tagger, **kwargs)


def test_ignore_labels_as_a_tuple_or_set_and_strategy_as_an_enum_work_as_a_list_and_str(ner):
    text = HOSTILE[0]
    as_list = spans(ner(text, ignore_labels=["O", "I-LOC"]))
    assert spans(ner(text, ignore_labels=("O", "I-LOC"))) == as_list
    assert spans(ner(text, ignore_labels={"O", "I-LOC"})) == as_list
    as_enum = ner(text, aggregation_strategy=AggregationStrategy.MAX)
    assert spans(as_enum) == spans(ner(text, aggregation_strategy="MAX"))


@pytest.mark.parametrize(
    ("id2label", "unnamed"),
    [
        ({0: "O", 1: "B-LOC", 2: "I-LOC", 3: "B-PER", 5: "I-PER"}, r"\[4\]"),
        ({str(index): label for index, label in TAGS.items()}, r"\[0, 1, 2, 3, 4\]"),
        ({**TAGS, 1: 1}, r"\[1\]"),
    ],
)
def test_label_names_missing_for_an_output_are_refused_when_built_or_changed(tagger, id2label, unnamed):
    """The stock postprocess failed with a KeyError deep inside (or on a name that is no str), only for texts where
    the unnamed output won."""
    built = ElmoTokenClassificationPipeline(model=tagger, tokenizer=ElmoTokenizer())
    labels = tagger.config.id2label
    try:
        try:
            tagger.config.id2label = id2label
        except StrictDataclassFieldValidationError:  # older transformers' config refuses a name that is no str itself
            assert not all(isinstance(label, str) for label in id2label.values())
            return
        for pipe in (built, ElmoTokenClassificationPipeline(model=tagger, tokenizer=ElmoTokenizer())):
            for strategy in ("none", "simple"):
                with pytest.raises(ValueError, match=f"names no label .* output\\(s\\) {unnamed} of 0..4"):
                    pipe("Ann", aggregation_strategy=strategy)
    finally:
        tagger.config.id2label = labels
