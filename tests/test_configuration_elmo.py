"""ElmoConfig (`configuration_elmo.py`): every field checked wherever a config can change (constructor, attribute
assignment, `from_pretrained` keywords, `update`, aliases), related fields checked together, and again by a model."""

import math

import pytest
import torch
from conftest import tiny_config
from transformers import AutoConfig

from elmo_hf import ElmoConfig, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel

TAGS = {0: "O", 1: "B-PER", 2: "B-LOC"}

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
    ("projection_clip", 1e300, "projection_clip must be positive or None .* at most float32's largest value"),
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


def test_integers_are_accepted_where_a_field_takes_numbers(base_folder):
    """`scalar_mix_parameters=[0, 0, 1]` (the example of `ElmoScalarMix`'s docstring) and `initializer_range=0` were
    refused by the dataclass's types (list[float], float) with an error that is not a ValueError, although the
    fields' rules take any finite numbers, as `elmo_dropout` and the clips do."""
    config = tiny_config(scalar_mix_parameters=[0, 0, 1], initializer_range=0)
    assert config.scalar_mix_parameters == [0, 0, 1] and config.initializer_range == 0
    config.scalar_mix_parameters = [1, 0.5, 0]
    config.update({"scalar_mix_parameters": [0, 1, 0], "initializer_range": 1})
    loaded = ElmoConfig.from_pretrained(base_folder, scalar_mix_parameters=[2, 0, 0])
    assert loaded.scalar_mix_parameters == [2, 0, 0]
    model = ElmoForSequenceClassification(config)
    assert model.scalar_mix.weights().argmax() == 1 and not model.scalar_mix.scalar_parameters.requires_grad


@pytest.mark.parametrize("fields", [
    {},
    {"num_layers": 3, "num_highway_layers": 2, "lstm_dim": 12, "word_vocab_size": 5},
    {"num_highway_layers": 0, "filters": [[1, 3], [4, 5]], "char_embedding_dim": 6, "word_vocab_size": None},
    {"char_vocab_size": 20, "word_embedding_vocab_size": 7, "word_embedding_dim": 4,
     "boundary_input_ids": [[1] * 50 + [1], [2] * 50 + [2]], "word_vocab_size": 9},
])
def test_the_parameter_count_from_the_sizes_is_the_models(fields):
    """`bilm_parameter_count` counts what `ElmoModel` (and with the softmax, `ElmoForPreTraining`) builds, without
    building it: a dictionary (ELMoForManyLangs) model's word embedding included."""
    from elmo_hf import ElmoForPreTraining

    config = tiny_config(**fields)
    assert config.bilm_parameter_count() == sum(parameter.numel() for parameter in ElmoModel(config).parameters())
    if config.word_vocab_size:
        pretraining = ElmoForPreTraining(config)
        assert config.bilm_parameter_count(softmax=True) == sum(p.numel() for p in pretraining.parameters())
    assert ElmoConfig(num_layers=2**70).bilm_parameter_count() > 2**90  # counted, not built
