"""Hostile input (issue 9, items 2, 4, 5 and 7): config values checked wherever a config changes, text without words
in every head and pipeline, and clear errors for inputs that used to crash deep inside torch or give wrong results."""

import math

import h5py
import numpy as np
import pytest
import torch
from conftest import FIXTURES, tiny_config
from transformers import AutoConfig, DataCollatorForTokenClassification, Trainer, TrainingArguments, pipeline

from elmo_hf import (
    ElmoConfig,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenClassificationPipeline,
    ElmoTokenizer,
)
from elmo_hf.conversion.checkpoint import ConversionError
from elmo_hf.conversion.convert import convert_checkpoint

TAGS = {0: "O", 1: "B-PER", 2: "B-LOC"}

# One value per field that breaks the field's own rule, with the words the error must contain.
BAD_FIELD_VALUES = [
    ("char_vocab_size", 0, "char_vocab_size must be a positive integer"),
    ("max_characters_per_token", 2, "max_characters_per_token must be an integer of at least 3"),
    ("char_embedding_dim", 0, "char_embedding_dim must be a positive integer"),
    ("filters", [[2]], r"\[width, num_filters\]"),
    ("filters", [], r"non-empty list of \[width, num_filters\]"),
    ("activation", "gelu", "activation must be one of"),
    ("num_highway_layers", -1, "num_highway_layers must be an integer >= 0"),
    ("projection_dim", 0, "projection_dim must be a positive integer"),
    ("lstm_dim", -4, "lstm_dim must be a positive integer"),
    ("num_layers", 0, "num_layers must be a positive integer"),
    ("cell_clip", -1, "cell_clip must be positive or None"),
    ("cell_clip", 0, "cell_clip must be positive or None"),
    ("cell_clip", math.nan, "cell_clip must be positive or None"),
    ("projection_clip", -3.0, "projection_clip must be positive or None"),
    ("initializer_range", -0.1, "initializer_range must be a finite number >= 0"),
    ("scalar_mix_parameters", [0.0, math.nan, 0.0], "scalar_mix_parameters must be None"),
    ("scalar_mix_parameters", [], "scalar_mix_parameters must be None"),
    ("scalar_mix_layer_norm", "bogus", "scalar_mix_layer_norm must be one of"),
    ("elmo_dropout", 1.0, r"elmo_dropout must be in \[0, 1\)"),
    ("elmo_dropout", -0.1, r"elmo_dropout must be in \[0, 1\)"),
    ("elmo_dropout", math.nan, r"elmo_dropout must be in \[0, 1\)"),
    ("scalar_mix_l2_coefficient", -1.0, "scalar_mix_l2_coefficient must be a finite number >= 0"),
    ("task_lstm_dim", 0, "task_lstm_dim must be a positive integer or None"),
    ("task_lstm_layers", 0, "task_lstm_layers must be a positive integer"),
    ("elmo_implementation", "fast", "elmo_implementation must be one of"),
]
FIELD_IDS = [f"{field}={value!r}" for field, value, _ in BAD_FIELD_VALUES]


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("base")
    torch.manual_seed(0)
    ElmoModel(tiny_config()).save_pretrained(folder)
    return folder


# Item 2: config values are checked wherever a config can change.


@pytest.mark.parametrize(("field", "value", "message"), BAD_FIELD_VALUES, ids=FIELD_IDS)
def test_bad_field_is_refused_by_the_constructor_and_by_attribute_assignment(field, value, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**{field: value})
    config = tiny_config()
    before = config.to_dict()
    with pytest.raises(ValueError, match=message):
        setattr(config, field, value)
    assert config.to_dict() == before


@pytest.mark.parametrize(("field", "value", "message"), BAD_FIELD_VALUES, ids=FIELD_IDS)
def test_bad_field_is_refused_as_a_from_pretrained_keyword(base_folder, field, value, message):
    with pytest.raises(ValueError, match=message):
        ElmoConfig.from_pretrained(base_folder, **{field: value})
    with pytest.raises(ValueError, match=message):
        ElmoForTokenClassification.from_pretrained(base_folder, id2label=TAGS, **{field: value})


@pytest.mark.parametrize(("field", "value", "message"), BAD_FIELD_VALUES, ids=FIELD_IDS)
def test_bad_field_is_refused_by_update_which_changes_nothing(field, value, message):
    config = tiny_config()
    before = config.to_dict()
    with pytest.raises(ValueError, match=message):
        config.update({"elmo_dropout": 0.25, field: value})
    assert config.to_dict() == before


@pytest.mark.parametrize(
    ("alias", "value", "message"),
    [("vocab_size", 0, "char_vocab_size must be"), ("num_hidden_layers", 0, "num_layers must be")],
)
def test_aliases_are_checked_as_their_fields(alias, value, message):
    config = tiny_config()
    with pytest.raises(ValueError, match=message):
        setattr(config, alias, value)


@pytest.mark.parametrize(
    "overrides",
    [{"scalar_mix_parameters": [1.0]}, {"num_layers": 3, "scalar_mix_parameters": [0.0, 0.0, 0.0]}],
)
def test_related_fields_are_checked_together_after_from_pretrained_overrides(base_folder, overrides):
    """A one-value mix used to be broadcast silently to every layer."""
    for load in (ElmoConfig.from_pretrained, AutoConfig.from_pretrained):
        with pytest.raises(Exception, match=r"scalar_mix_parameters needs num_layers \+ 1 = \d values, got"):
            load(base_folder, **overrides)
    with pytest.raises(Exception, match="scalar_mix_parameters needs num_layers \\+ 1"):
        ElmoForSequenceClassification.from_pretrained(base_folder, num_labels=2, **overrides)


def test_update_changes_related_fields_together_and_is_atomic():
    config = tiny_config(scalar_mix_parameters=[0.0, 1.0, 2.0])
    config.update({"num_layers": 3, "scalar_mix_parameters": [0.0, 1.0, 2.0, 3.0]})
    assert config.num_layers == 3 and config.scalar_mix_parameters == [0.0, 1.0, 2.0, 3.0]
    before = config.to_dict()
    with pytest.raises(Exception, match="scalar_mix_parameters needs num_layers \\+ 1 = 2"):
        config.update({"num_layers": 1})
    assert config.to_dict() == before
    with pytest.raises(ValueError, match="elmo_dropout must be in"):
        config.update_from_string("cell_clip=2.0,elmo_dropout=1.5")
    assert config.to_dict() == before


@pytest.mark.parametrize("model_class", [ElmoModel, ElmoForTokenClassification, ElmoForSequenceClassification])
def test_building_a_model_checks_the_config_again(model_class):
    """A value that passes its own rule but not the relations between fields is caught when a model is built."""
    config = tiny_config(id2label=TAGS)
    config.scalar_mix_parameters = [0.0]
    with pytest.raises(Exception, match="scalar_mix_parameters needs num_layers \\+ 1 = 3 values, got 1"):
        model_class(config)
    config = tiny_config(id2label=TAGS)
    config.filters = [[7, 4]]
    config.max_characters_per_token = 5
    with pytest.raises(Exception, match="width 7, wider than max_characters_per_token"):
        model_class(config)
    config = tiny_config(id2label=TAGS)
    config.char_vocab_size = 100
    with pytest.raises(Exception, match="char_vocab_size must be at least 262"):
        model_class(config)
    config = tiny_config(id2label=TAGS)
    config.__dict__["cell_clip"] = -1.0  # behind __setattr__
    with pytest.raises(Exception, match="cell_clip must be positive or None"):
        model_class(config)


def test_concatenating_a_mix_needs_a_task_lstm():
    with pytest.raises(Exception, match="there is no task biLSTM"):
        tiny_config(concatenate_elmo_to_task_output=True)
    tiny_config(concatenate_elmo_to_task_output=True, task_lstm_dim=4)


def test_valid_overrides_still_load(base_folder):
    model = ElmoForTokenClassification.from_pretrained(
        base_folder, id2label=TAGS, elmo_dropout=0.0, scalar_mix_layer_norm="token", cell_clip=2, task_lstm_dim=3
    )
    assert model.config.elmo_dropout == 0.0 and model.config.cell_clip == 2 and model.config.task_lstm_dim == 3
    assert model.scalar_mix.layer_norm == "token"


# Items 4 and 5: text without words, in every head and pipeline.

NO_WORDS = [("", False), ("   \n", False), ([""], False), ([[]], True)]


def token_head(task_lstm_dim=4):
    torch.manual_seed(0)
    return ElmoForTokenClassification(tiny_config(id2label=TAGS, task_lstm_dim=task_lstm_dim)).eval()


def sequence_head(task_lstm_dim=None):
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config(num_labels=3, task_lstm_dim=task_lstm_dim)).eval()
    with torch.no_grad():
        model.classifier.bias.copy_(torch.tensor([0.5, -1.0, 2.0]))
    return model


@pytest.mark.parametrize(("text", "is_split"), NO_WORDS)
@pytest.mark.parametrize("task_lstm_dim", [None, 4])
def test_token_head_on_text_without_words_predicts_nothing(tokenizer, text, is_split, task_lstm_dim):
    model = token_head(task_lstm_dim)
    inputs = tokenizer(text, is_split_into_words=is_split, return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (1, 0, len(TAGS))
    ner = ElmoTokenClassificationPipeline(model=model, tokenizer=tokenizer)
    assert ner("") == [] and ner("   ") == []
    empty, words = ner(["", "Ann lives"], ignore_labels=[])
    assert empty == [] and [entity["word"] for entity in words] == ["Ann", "lives"]


def test_token_head_with_task_lstm_on_a_batch_with_an_empty_text(tokenizer):
    model = token_head()
    batch = tokenizer(["", "Ann lives here"], padding=True, return_tensors="pt")
    alone = tokenizer(["Ann lives here"], return_tensors="pt")
    with torch.no_grad():
        together, single = model(**batch).logits, model(**alone).logits
    torch.testing.assert_close(together[1], single[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize(("text", "is_split"), NO_WORDS)
@pytest.mark.parametrize("task_lstm_dim", [None, 4])
def test_sequence_head_on_text_without_words_predicts_from_the_bias(tokenizer, text, is_split, task_lstm_dim):
    """The rule: a text without words pools to the zero vector, so its logits are the classifier's bias, whether it
    is alone or in a batch."""
    model = sequence_head(task_lstm_dim)
    with torch.no_grad():
        alone = model(**tokenizer(text, is_split_into_words=is_split, return_tensors="pt")).logits
        batch = model(**tokenizer(["", "Ann lives here"], padding=True, return_tensors="pt")).logits
    torch.testing.assert_close(alone, model.classifier.bias[None], atol=0, rtol=0)
    torch.testing.assert_close(batch[0], model.classifier.bias, atol=0, rtol=0)


def test_text_classification_pipeline_on_empty_text(tokenizer):
    model = sequence_head()
    classifier = pipeline("text-classification", model=model, tokenizer=tokenizer)
    scores = {item["label"]: item["score"] for item in classifier("", top_k=None)}
    expected = torch.softmax(model.classifier.bias.detach(), dim=0)
    assert scores == pytest.approx({f"LABEL_{index}": float(p) for index, p in enumerate(expected)}, abs=1e-6)


def test_feature_extraction_on_empty_text_gives_no_vectors(tokenizer, tiny_model):
    with torch.no_grad():
        outputs = tiny_model(**tokenizer("", return_tensors="pt"), output_hidden_states=True)
    assert outputs.last_hidden_state.shape == (1, 0, 16)
    assert all(layer.shape == (1, 0, 16) for layer in outputs.hidden_states)
    assert pipeline("feature-extraction", model=tiny_model, tokenizer=tokenizer)("") == [[]]


# Item 7: smaller inputs that crashed deep inside torch or gave wrong answers.


@pytest.fixture(scope="module")
def batch(tokenizer):
    return tokenizer(["Ann lives here", "Hi"], padding=True, return_tensors="pt")


def test_attention_mask_as_a_list_is_a_clear_error(tiny_model, batch):
    with pytest.raises(TypeError, match="attention_mask must be a torch.Tensor, got list"):
        tiny_model(batch["input_ids"], attention_mask=batch["attention_mask"].tolist())


@pytest.mark.parametrize(
    ("head", "labels"),
    [("token", [[0, 1, 2], [1, -100, -100]]), ("sequence", [0, 2])],
)
def test_labels_as_a_list_is_a_clear_error(batch, head, labels):
    model = token_head(None) if head == "token" else sequence_head()
    with pytest.raises(TypeError, match="labels must be a torch.Tensor, got list"):
        model(**batch, labels=labels)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
def test_narrow_integer_input_ids_are_refused_not_misread(tiny_model, batch, dtype):
    """uint8 wraps 259/260 (begin/end of word) around; the old range check compared in uint8 and named wrong values."""
    with pytest.raises(TypeError, match=f"dtype {dtype}, which cannot hold character ids up to 261"):
        tiny_model(batch["input_ids"].to(dtype), attention_mask=batch["attention_mask"])


def test_out_of_range_ids_are_reported_with_their_real_values(tiny_model, batch):
    ids = batch["input_ids"].to(torch.int16)
    ids[0, 0, 1] = 300
    with pytest.raises(ValueError, match=r"outside 0\.\.261 \(found 0\.\.300\)"):
        tiny_model(ids, attention_mask=batch["attention_mask"])
    outputs = tiny_model(batch["input_ids"].to(torch.int16), attention_mask=batch["attention_mask"])
    torch.testing.assert_close(outputs.last_hidden_state, tiny_model(**batch).last_hidden_state, atol=0, rtol=0)


def test_zero_dim_sequence_labels_are_a_clear_error(tokenizer):
    model = sequence_head()
    with pytest.raises(ValueError, match="labels is a 0-dim tensor; it needs a batch axis"):
        model(**tokenizer(["Hi"], return_tensors="pt"), labels=torch.tensor(1))


def test_empty_batch_has_a_two_dimensional_mask(tokenizer):
    encoding = tokenizer([], return_tensors="pt", return_special_tokens_mask=True, return_offsets_mapping=True)
    assert encoding["input_ids"].shape == (0, 0, 50)
    assert encoding["attention_mask"].shape == (0, 0)
    assert encoding["special_tokens_mask"].shape == (0, 0)
    assert encoding["offset_mapping"].shape == (0, 0, 2)


def test_collator_on_examples_without_words_keeps_the_character_axis(tokenizer):
    collator = DataCollatorForTokenClassification(tokenizer)
    features = [{**tokenizer(""), "labels": []}, {**tokenizer("  "), "labels": []}]
    batch = collator(features)
    assert batch["input_ids"].shape == (2, 0, 50)
    assert batch["attention_mask"].shape == (2, 0) and batch["labels"].shape == (2, 0)
    logits = token_head()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert logits.shape == (2, 0, len(TAGS))
    padded = tokenizer.pad([{"input_ids": []}], return_tensors="np")
    assert padded["input_ids"].shape == (1, 0, 50)


@pytest.mark.parametrize("max_length", [0, 1])
def test_boundaries_that_cannot_fit_max_length_are_refused(max_length):
    tokenizer = ElmoTokenizer(add_bos_eos=True)
    with pytest.raises(ValueError, match=f"max_length={max_length} cannot hold the <S> and </S> rows"):
        tokenizer("a b c", truncation=True, max_length=max_length)
    assert len(tokenizer("a b c", truncation=True, max_length=2)["input_ids"]) == 2
    assert len(tokenizer("a b c", truncation=True, max_length=1, add_special_tokens=False)["input_ids"]) == 1


def test_nan_weights_are_reported_as_such_not_as_a_wrong_layout(tmp_path):
    weights = tmp_path / "weights.hdf5"
    weights.write_bytes((FIXTURES / "allennlp" / "lm_weights.hdf5").read_bytes())
    with h5py.File(weights, "r+") as file:
        file["CNN_proj/W_proj"][0, 0] = np.nan
    with pytest.raises(ConversionError, match="NaN") as raised:
        convert_checkpoint(FIXTURES / "allennlp" / "options.json", weights, tmp_path / "out")
    assert "layout" not in str(raised.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("num_items_in_batch", [None, 0, 7])
@pytest.mark.parametrize(
    ("head", "texts", "labels"),
    [
        ("token", ["", "  "], torch.zeros(2, 0, dtype=torch.long)),
        ("token", ["Ann lives", "Hi"], torch.full((2, 2), -100)),
        ("sequence", ["", "Hi"], torch.tensor([-100, -100])),
    ],
)
def test_a_batch_without_labelled_items_has_zero_loss_and_gradients(
    tokenizer, head, texts, labels, num_items_in_batch
):
    """Trainer meets such batches with texts without words (group_by_length batches them together); the stock losses
    are 0/0 there, and one NaN gradient step ruins every trainable weight."""
    model = (token_head() if head == "token" else sequence_head()).train()
    kwargs = {} if num_items_in_batch is None else {"num_items_in_batch": torch.tensor(num_items_in_batch)}
    loss = model(**tokenizer(texts, padding=True, return_tensors="pt"), labels=labels, **kwargs).loss
    assert loss.item() == 0.0
    loss.backward()
    gradients = [parameter.grad for parameter in model.parameters() if parameter.grad is not None]
    assert gradients and all(bool((gradient == 0).all()) for gradient in gradients)


def test_trainer_on_texts_without_words_keeps_every_weight_finite(tokenizer, tmp_path):
    """group_by_length puts the texts without words of a dataset into the same batches: training must go on."""
    model = token_head()
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    texts = ["", "  ", "", "\n", "Ann lives here", "Bo went home"]
    train = [{**tokenizer(text), "labels": [0] * len(tokenizer.tokenize(text))} for text in texts]
    arguments = TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
        disable_tqdm=True, seed=0, learning_rate=0.05, per_device_train_batch_size=2, max_steps=3,
        train_sampling_strategy="group_by_length",
    )
    Trainer(
        model=model, args=arguments, train_dataset=train, data_collator=DataCollatorForTokenClassification(tokenizer)
    ).train()
    assert all(bool(torch.isfinite(parameter).all()) for parameter in model.parameters())
    assert not torch.equal(model.classifier.weight, before["classifier.weight"])  # the words' batch did train
