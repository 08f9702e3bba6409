"""The heads and the biLM as an experienced transformers user drives them: the PreTrainedModel API (config changes
after building, activation (gradient) checkpointing) and Trainer's switches."""

import pytest
import torch
from conftest import tiny_config
from test_trainer import ID2LABEL, tagged_examples, training_arguments
from transformers import DataCollatorForTokenClassification, Trainer

from elmo_hf import ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification

SENTENCES = [["Ann", "lives", "here", "now"], ["Hi"], ["Dogs", "bark"]]


@pytest.fixture(scope="module")
def inputs(tokenizer):
    return tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")


@pytest.mark.parametrize(
    "model_class, new_num_labels, labels",
    [
        (ElmoForTokenClassification, 7, torch.tensor([[1, 0, 5, 2], [0, -100, -100, -100], [1, 2, -100, -100]])),
        (ElmoForSequenceClassification, 6, torch.tensor([5, 0, 1])),
        # one label reads as regression: the stock MSE would broadcast (3, 3) logits against (3,) targets
        (ElmoForSequenceClassification, 1, torch.tensor([0.5, 1.0, 2.0])),
    ],
)
def test_num_labels_changed_after_building_is_refused_naming_the_fix(model_class, new_num_labels, labels, inputs):
    torch.manual_seed(0)
    model = model_class(tiny_config(num_labels=3, elmo_dropout=0.0))
    model.config.num_labels = new_num_labels
    message = rf"num_labels is {new_num_labels}.*built with 3 outputs.*from_pretrained"
    for call in ({"labels": labels}, {}):
        with pytest.raises(ValueError, match=message):
            model(**inputs, **call)
    model.config.num_labels = 3  # back to the classifier's size: it runs again
    assert model(**inputs).logits.shape[-1] == 3


def test_resize_token_embeddings_below_elmos_character_ids_is_refused_before_anything_changes(inputs):
    """Fewer than 262 character ids: the model resized, then its forward refused the tokenizer's ids and
    save_pretrained its config; now refused up front. Growing (padded to a multiple too) still works."""
    model = ElmoForTokenClassification(tiny_config(num_labels=3))
    before = model.get_input_embeddings().weight.detach().clone()
    with pytest.raises(ValueError, match=r"resize_token_embeddings\(100\) is refused.*at least 262"):
        model.resize_token_embeddings(100)
    assert model.config.char_vocab_size == 262 and torch.equal(model.get_input_embeddings().weight, before)
    assert model.resize_token_embeddings(270, pad_to_multiple_of=64).weight.shape[0] == 320
    assert model.config.char_vocab_size == 320 and model(**inputs).logits.shape[-1] == 3



@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ((300.0,), TypeError, "new_num_tokens must be an int, got 300.0"),
        (("300",), TypeError, "new_num_tokens must be an int, got '300'"),
        ((True,), TypeError, "new_num_tokens must be an int, got True"),
        ((300, 2.0), TypeError, "pad_to_multiple_of must be an int, got 2.0"),
        ((300, 0), ValueError, "pad_to_multiple_of must be positive, got 0"),
        ((300, -8), ValueError, "pad_to_multiple_of must be positive, got -8"),
    ],
)
def test_resize_token_embeddings_to_a_size_that_is_no_positive_int_is_refused_by_name(arguments, error, message):
    """A float, string or bool size reached the config's strict field, whose error named only the field; a multiple of
    0 divided by zero and a negative one shrank the table. Refused by the argument's name, nothing changed."""
    model = ElmoForTokenClassification(tiny_config(num_labels=3))
    before = model.get_input_embeddings().weight.detach().clone()
    with pytest.raises(error, match=f"resize_token_embeddings: {message}"):
        model.resize_token_embeddings(*arguments)
    assert model.config.char_vocab_size == 262 and torch.equal(model.get_input_embeddings().weight, before)

def pretraining_model() -> ElmoForPreTraining:
    torch.manual_seed(0)
    return ElmoForPreTraining(tiny_config(word_vocab_size=10, pretraining_dropout=0.3))


def unfrozen_tagger() -> ElmoForTokenClassification:
    torch.manual_seed(0)
    return ElmoForTokenClassification(tiny_config(num_labels=3, freeze_bilm=False, task_lstm_dim=4, elmo_dropout=0.3))


PRETRAINING_LABELS = {
    "labels": torch.tensor([[1, 2, 3, 4, 0], [5, 0, -100, -100, -100], [6, 7, 0, -100, -100]]),
    "backward_labels": torch.tensor([[0, 1, 2, 3, 4], [0, 5, -100, -100, -100], [0, 6, 7, -100, -100]]),
}
TAGS = {"labels": torch.tensor([[1, 0, 1, 2], [0, -100, -100, -100], [2, 1, -100, -100]])}


@pytest.mark.parametrize("build, labels", [(pretraining_model, PRETRAINING_LABELS), (unfrozen_tagger, TAGS)])
def test_activation_checkpointing_gives_the_same_gradients_and_saves_less(build, labels, inputs):
    """Dropout on (the RNG is replayed), every biLSTM layer (and the task biLSTM) computed again in backward."""
    results = []
    for checkpointing in (False, True):
        model = build().train()
        if checkpointing:
            model.activation_checkpointing_enable()
        saved = [0]

        def pack(tensor):
            saved[0] += tensor.numel()
            return tensor

        torch.manual_seed(1)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = model(**inputs, **labels).loss
        loss.backward()
        grads = {name: parameter.grad for name, parameter in model.named_parameters() if parameter.grad is not None}
        results.append((loss.detach(), grads, saved[0]))
    (loss, grads, saved), (loss_checkpointed, grads_checkpointed, saved_checkpointed) = results
    assert model.is_activation_checkpointing
    assert saved_checkpointed < 0.8 * saved
    torch.testing.assert_close(loss_checkpointed, loss, rtol=0, atol=0)
    assert grads_checkpointed.keys() == grads.keys() and len(grads) > 10
    for name, grad in grads.items():
        torch.testing.assert_close(grads_checkpointed[name], grad, rtol=0, atol=0, msg=name)


def test_trainer_with_activation_checkpointing_trains_as_without(tokenizer, tmp_path):
    examples = tagged_examples(tokenizer)
    collator = DataCollatorForTokenClassification(tokenizer)
    trained = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = ElmoForTokenClassification(tiny_config(id2label=ID2LABEL, freeze_bilm=False, task_lstm_dim=4))
        args = training_arguments(tmp_path, max_steps=3, learning_rate=0.01, activation_checkpointing=checkpointing)
        Trainer(model=model, args=args, train_dataset=examples, data_collator=collator).train()
        assert model.is_activation_checkpointing == checkpointing
        trained.append({name: value.detach().clone() for name, value in model.named_parameters()})
    for name, value in trained[0].items():
        torch.testing.assert_close(trained[1][name], value, msg=name)
