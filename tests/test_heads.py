"""ElmoForTokenClassification and ElmoForSequenceClassification: one contract over all head variants, freezing,
loading a head on a base checkpoint, the Auto classes, and bad labels."""

import pytest
import torch
from conftest import tiny_config
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel

SENTENCES = [["Ann", "lives", "in", "São", "Paulo", "."], ["Hi", "!"]]
TAGS = {0: "O", 1: "B-PER", 2: "B-LOC", 3: "I-LOC"}
TOKEN_LABELS = torch.tensor([[1, 0, 0, 2, 3, 0], [0, 0, -100, -100, -100, -100]])
HEADS = {
    "token": (ElmoForTokenClassification, {"id2label": TAGS}, TOKEN_LABELS),
    "token+lstm": (ElmoForTokenClassification, {"id2label": TAGS, "task_lstm_dim": 5}, TOKEN_LABELS),
    "token+lstm+mix": (
        ElmoForTokenClassification,
        {
            "id2label": TAGS,
            "task_lstm_dim": 5,
            "concatenate_elmo_to_task_output": True,
            "scalar_mix_layer_norm": "token",
        },
        TOKEN_LABELS,
    ),
    "single": (ElmoForSequenceClassification, {"num_labels": 3}, torch.tensor([2, 0])),
    "multi": (
        ElmoForSequenceClassification,
        {"num_labels": 3, "problem_type": "multi_label_classification", "task_lstm_dim": 5},
        torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]),
    ),
    "regression": (ElmoForSequenceClassification, {"num_labels": 1}, torch.tensor([0.5, -1.0])),
}


def build(name, **overrides):
    model_class, fields, labels = HEADS[name]
    torch.manual_seed(0)
    return model_class(tiny_config(elmo_dropout=0.0, **fields, **overrides)), labels


def logits_shape(name):
    return (2, 6, len(TAGS)) if name.startswith("token") else (2, HEADS[name][1].get("num_labels"))


@pytest.fixture(scope="module")
def inputs(tokenizer):
    return tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")


@pytest.mark.parametrize("name", list(HEADS))
def test_head_contract(name, inputs, tmp_path):
    """Forward shapes, a finite loss, gradients on every trainable parameter and none on the frozen biLM, save and
    reload with the same logits, tuple output."""
    model, labels = build(name)
    outputs = model(**inputs, labels=labels, output_hidden_states=True)
    assert outputs.logits.shape == logits_shape(name)
    assert len(outputs.hidden_states) == model.config.num_layers + 1
    assert torch.isfinite(outputs.loss)
    outputs.loss.backward()
    for parameter_name, parameter in model.named_parameters():
        if parameter_name.startswith("elmo."):
            assert not parameter.requires_grad and parameter.grad is None, parameter_name
        else:
            assert parameter.requires_grad and parameter.grad is not None, parameter_name
            assert parameter.grad.abs().sum() > 0, parameter_name

    model.eval().save_pretrained(tmp_path)
    reloaded = type(model).from_pretrained(tmp_path)
    assert not any(parameter.requires_grad for parameter in reloaded.elmo.parameters())
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits, model(**inputs).logits)
        as_tuple = reloaded(**inputs, labels=labels, return_dict=False)
    torch.testing.assert_close(as_tuple[0], outputs.loss)


def test_padding_does_not_change_a_sentence(inputs, tokenizer):
    for name in ("token+lstm+mix", "multi"):
        model = build(name)[0].eval()
        alone = tokenizer(SENTENCES[1:], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            batched, single = model(**inputs).logits[1], model(**alone).logits[0]
        torch.testing.assert_close(batched[: single.shape[0]], single, atol=1e-5, rtol=1e-5)


def test_unfrozen_bilm_gets_gradients(inputs):
    model, labels = build("token", freeze_bilm=False)
    model(**inputs, labels=labels).loss.backward()
    assert all(parameter.requires_grad for parameter in model.elmo.parameters())
    assert model.elmo.token_encoder.char_embeddings.weight.grad.abs().sum() > 0
    assert model.elmo.bilm.layers[0].forward_cell.hidden_to_gates.weight.grad.abs().sum() > 0


def test_freeze_bilm_that_disagrees_with_the_bilms_parameters_is_an_error_when_training(inputs):
    """The flag freezes the biLM when a head is built or loaded: set to False afterwards it left every biLM weight
    frozen and the training step silently trained the head alone; set to True over trainable biLM parameters, these
    would never learn. A forward without gradients (evaluation, inference) is not concerned."""
    model, labels = build("token")
    model.config.freeze_bilm = False
    with pytest.raises(ValueError, match="freeze_bilm is False, but every parameter of the biLM is frozen"):
        model(**inputs, labels=labels)
    with torch.no_grad():
        model(**inputs, labels=labels)
    model.elmo.requires_grad_(True)
    model(**inputs, labels=labels).loss.backward()
    assert model.elmo.token_encoder.char_embeddings.weight.grad.abs().sum() > 0
    model.config.freeze_bilm = True
    with pytest.raises(ValueError, match="freeze_bilm is True, .* would never learn"):
        model(**inputs, labels=labels)
    model.config.freeze_bilm = False
    model.requires_grad_(False)  # frozen whole for inference, run with autograd on: nothing trains, no error
    assert model(**inputs).logits.shape == (2, 6, len(TAGS))


def test_two_mixes_share_one_bilm_run(inputs):
    model, _ = build("token+lstm+mix")
    calls = []
    model.elmo.register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        model.task_output_scalar_mix.scalar_parameters.fill_(3.0)
        model(**inputs)
    assert len(calls) == 1
    assert model.task_output_scalar_mix is not None
    assert not torch.equal(model.scalar_mix.scalar_parameters, model.task_output_scalar_mix.scalar_parameters)
    assert model.classifier.in_features == 2 * 5 + model.config.hidden_size


def test_return_dict_false_in_config(inputs):
    model, labels = build("token", return_dict=False)
    outputs = model(**inputs, labels=labels)
    assert isinstance(outputs, tuple) and outputs[1].shape == logits_shape("token")


def test_head_on_base_checkpoint_initialises_new_weights(converted, inputs):
    base = ElmoModel.from_pretrained(converted["allennlp"])
    model = ElmoForTokenClassification.from_pretrained(
        converted["allennlp"], id2label=TAGS, task_lstm_dim=4, concatenate_elmo_to_task_output=True
    )
    for mix in (model.scalar_mix, model.task_output_scalar_mix):
        assert torch.equal(mix.scalar_parameters, torch.zeros(base.config.num_layers + 1))
        assert torch.equal(mix.gamma, torch.ones(1))
    weight = model.classifier.weight
    assert weight.shape == (len(TAGS), 2 * 4 + base.config.hidden_size)
    assert torch.isfinite(weight).all() and 0 < weight.std() < 0.05
    assert torch.equal(model.classifier.bias, torch.zeros(len(TAGS)))
    assert all(torch.isfinite(p).all() and p.abs().max() < 1 for p in model.task_encoder.parameters())
    for (name, loaded), (_, original) in zip(model.elmo.state_dict().items(), base.state_dict().items()):
        assert torch.equal(loaded, original), name
    assert not any(parameter.requires_grad for parameter in model.elmo.parameters())
    with torch.no_grad():
        assert torch.isfinite(model.eval()(**inputs).logits).all()


def test_auto_classes_load_the_heads(tmp_path):
    for name, auto_class in (
        ("token", AutoModelForTokenClassification),
        ("single", AutoModelForSequenceClassification),
    ):
        model, _ = build(name)
        model.save_pretrained(tmp_path / name)
        assert type(auto_class.from_pretrained(tmp_path / name)) is type(model)


@pytest.mark.parametrize(
    ("name", "labels", "message"),
    [
        ("token", torch.zeros(2, 5, dtype=torch.long), r"labels must have shape \(batch_size, sequence_length\)"),
        ("token", torch.zeros(2, dtype=torch.long), r"= \(2, 6\), one id per word"),
        ("token", torch.full((2, 6), 4), r"labels hold id 4, outside 0..3 \(num_labels=4\)"),
        ("token", torch.full((2, 6), -1), "labels hold id -1"),
        ("single", torch.tensor([0, 3]), "labels hold id 3, outside 0..2"),
        ("single", torch.tensor([0]), "labels has 1 rows for a batch of 2 sentences"),
        ("single", torch.zeros(2, 3, dtype=torch.long), r"class-id labels must have shape \(batch_size,\)"),
        (
            "multi",
            torch.zeros(2, 2),
            r"multi-label labels must have shape \(batch_size, num_labels\) = \(2, 3\), got \(2, 2\)",
        ),
    ],
)
def test_bad_labels(name, labels, message, inputs):
    model, _ = build(name)
    with pytest.raises(ValueError, match=message):
        model(**inputs, labels=labels)


@pytest.mark.parametrize("implementation", ["auto", "export"])
def test_task_bilstm_on_a_batch_of_only_empty_texts(tokenizer, implementation):
    """The padded (export) path's recurrence over zero steps: no output rows, the same as the packed path's."""
    torch.manual_seed(0)
    config = tiny_config(num_labels=3, task_lstm_dim=4, elmo_implementation=implementation)
    model = ElmoForTokenClassification(config).eval()
    with torch.no_grad():
        logits = model(**tokenizer(["", "  "], padding=True, return_tensors="pt")).logits
    assert logits.shape == (2, 0, 3)
