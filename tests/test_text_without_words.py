"""One rule for every head and pipeline (docs/guarantees.md): a text without words is a sentence with no words, not an
error; and batches without a labelled item train to zero loss and zero gradients."""

import pytest
import torch
from conftest import tiny_config
from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments, pipeline

from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoTokenClassificationPipeline

TAGS = {0: "O", 1: "B-PER", 2: "B-LOC"}


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


@pytest.mark.parametrize(
    ("head", "labels"),
    [("token", [[0, 1, 2], [1, -100, -100]]), ("sequence", [0, 2])],
)
def test_labels_as_a_list_is_a_clear_error(batch, head, labels):
    model = token_head(None) if head == "token" else sequence_head()
    with pytest.raises(TypeError, match="labels must be a torch.Tensor, got list"):
        model(**batch, labels=labels)


def test_zero_dim_sequence_labels_are_a_clear_error(tokenizer):
    model = sequence_head()
    with pytest.raises(ValueError, match="labels is a 0-dim tensor; it needs a batch axis"):
        model(**tokenizer(["Hi"], return_tensors="pt"), labels=torch.tensor(1))


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
