"""Fine-tuning the heads with Trainer as a transformers user does it, from a hostile sweep: datasets and plain lists,
the stock collators, ragged `predict`, batches without a labelled word, extra columns, length grouping, bf16 on CPU,
resuming, the best checkpoint, token counts, float targets, wrong labels and a save-and-reload round trip. Each
either works as asserted or raises one clear error."""

import datasets
import numpy as np
import pytest
import torch
from conftest import tiny_config
from test_trainer import ID2LABEL, TAGGED, tagged_examples, token_model, training_arguments
from transformers import (
    AutoModelForTokenClassification,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

from elmo_hf import ElmoForSequenceClassification


def zero_word_example(tokenizer) -> dict:
    return {**tokenizer([], is_split_into_words=True), "labels": []}


def unlabelled(example: dict) -> dict:
    return {**example, "labels": [-100] * len(example["labels"])}


def sentence_examples(tokenizer, labels: list) -> list[dict]:
    """One example per `TAGGED` sentence (its words only), with the given sentence labels."""
    return [
        {**tokenizer([pair.rsplit("/", 1)[0] for pair in sentence.split()], is_split_into_words=True), "labels": label}
        for sentence, label in zip(TAGGED, labels)
    ]


def sequence_model(num_labels: int, problem_type: str | None = None) -> ElmoForSequenceClassification:
    torch.manual_seed(0)
    config = tiny_config(num_labels=num_labels, problem_type=problem_type, elmo_dropout=0.0)
    return ElmoForSequenceClassification(config)


def trainable(model) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.named_parameters() if value.requires_grad}


def own_logits(model, collator, examples: list[dict]) -> list[torch.Tensor]:
    """Each example's logits from the model's own forward, alone."""
    model.eval()
    with torch.no_grad():
        return [model(**collator([example])).logits[0] for example in examples]


def test_a_datasets_dataset_trains_as_the_list_of_dicts_it_holds(tokenizer, tmp_path):
    examples = tagged_examples(tokenizer)
    collator = DataCollatorForTokenClassification(tokenizer)
    updated = []
    for train in (examples, datasets.Dataset.from_list(examples)):
        model = token_model()
        args = training_arguments(tmp_path, max_steps=2)
        Trainer(model=model, args=args, train_dataset=train, data_collator=collator).train()
        updated.append(trainable(model))
    for name, value in updated[0].items():
        torch.testing.assert_close(updated[1][name], value, msg=name)


def test_predict_on_ragged_batches_gives_each_sentence_its_own_logits_and_compute_metrics_gets_them(
    tokenizer, tmp_path
):
    """Sentences of 0 to 7 words in batches of 4: each row of `predictions` starts with the sentence's own logits, and
    `label_ids` is -100 beyond its words (where a metric must skip the padding's logits)."""
    examples = [zero_word_example(tokenizer), *tagged_examples(tokenizer)]
    collator = DataCollatorForTokenClassification(tokenizer)
    model = token_model()
    received = {}

    def compute_metrics(prediction):
        received["shapes"] = prediction.predictions.shape, prediction.label_ids.shape
        return {}

    args = training_arguments(tmp_path, per_device_eval_batch_size=4)
    trainer = Trainer(model=model, args=args, data_collator=collator, compute_metrics=compute_metrics)
    output = trainer.predict(examples)
    assert received["shapes"] == (output.predictions.shape, output.label_ids.shape) == ((7, 7, 7), (7, 7))
    for row, (example, logits) in enumerate(zip(examples, own_logits(model, collator, examples))):
        words = len(example["labels"])
        np.testing.assert_allclose(output.predictions[row, :words], logits.numpy(), atol=1e-6)
        assert output.label_ids[row, :words].tolist() == example["labels"]
        assert (output.label_ids[row, words:] == -100).all()
    assert np.isfinite(output.metrics["test_loss"])


def test_an_eval_set_without_a_labelled_word_has_loss_zero(tokenizer, tmp_path):
    """Every label -100, or no words at all: loss 0 (the documented loss of a batch without a labelled item), not
    NaN."""
    examples = [unlabelled(example) for example in tagged_examples(tokenizer)] + [zero_word_example(tokenizer)] * 2
    collator = DataCollatorForTokenClassification(tokenizer)
    trainer = Trainer(model=token_model(), args=training_arguments(tmp_path), data_collator=collator)
    assert trainer.evaluate(examples)["eval_loss"] == 0.0
    assert trainer.predict(examples[-2:]).predictions.shape == (2, 0, len(ID2LABEL))


@pytest.mark.parametrize("without_labels", ["all -100", "zero words"])
def test_accumulating_a_batch_without_a_labelled_word_equals_one_larger_batch(without_labels, tokenizer, tmp_path):
    """gradient_accumulation_steps=3 over batches of 1, one of which has no labelled word: the same SGD step as the
    three examples in one batch, every weight finite."""
    examples = tagged_examples(tokenizer)[:2]
    examples.append(unlabelled(examples[0]) if without_labels == "all -100" else zero_word_example(tokenizer))
    updated = []
    for batch_size, accumulation in ((3, 1), (1, 3)):
        model = token_model(scalar_mix_l2_coefficient=0.5)
        args = training_arguments(
            tmp_path,
            max_steps=1,
            optim="sgd",
            learning_rate=0.5,
            max_grad_norm=0.0,
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation,
        )
        collator = DataCollatorForTokenClassification(tokenizer)
        Trainer(model=model, args=args, train_dataset=examples, data_collator=collator).train()
        updated.append(trainable(model))
    for name, value in updated[1].items():
        assert torch.isfinite(value).all(), name
        torch.testing.assert_close(value, updated[0][name], atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("head", ["token", "sequence"])
def test_label_names_default_to_labels(head, tmp_path):
    model = token_model() if head == "token" else sequence_model(2)
    assert Trainer(model=model, args=training_arguments(tmp_path)).label_names == ["labels"]


def test_remove_unused_columns_drops_string_columns_and_keeping_them_is_the_collators_error(tokenizer, tmp_path):
    """String columns ("tokens", "ner_tags") beside the model's inputs are dropped by default; kept
    (`remove_unused_columns=False`), the stock collator names the one it cannot make a tensor of (transformers' own
    error, as for any model)."""
    examples = [
        {**example, "tokens": ["w"] * len(example["labels"]), "ner_tags": ["O"] * len(example["labels"])}
        for example in tagged_examples(tokenizer)
    ]
    train = datasets.Dataset.from_list(examples)
    collator = DataCollatorForTokenClassification(tokenizer)
    args = training_arguments(tmp_path, max_steps=2)
    trainer = Trainer(model=token_model(), args=args, train_dataset=train, data_collator=collator)
    assert np.isfinite(trainer.train().training_loss)
    args = training_arguments(tmp_path, max_steps=2, remove_unused_columns=False)
    with pytest.raises(ValueError, match="`tokens`"):
        Trainer(model=token_model(), args=args, train_dataset=train, data_collator=collator).train()


def test_group_by_length_groups_sentences_by_their_word_count(tokenizer, tmp_path):
    examples = [zero_word_example(tokenizer), *tagged_examples(tokenizer)]
    args = training_arguments(tmp_path, max_steps=2, train_sampling_strategy="group_by_length")
    for train in (examples, datasets.Dataset.from_list(examples)):
        trainer = Trainer(
            model=token_model(),
            args=args,
            train_dataset=train,
            data_collator=DataCollatorForTokenClassification(tokenizer),
            processing_class=tokenizer,
        )
        assert trainer._get_train_sampler().lengths == [len(example["labels"]) for example in examples]
        assert np.isfinite(trainer.train().training_loss)


def test_bf16_on_cpu_trains_with_a_finite_loss_and_predicts_as_the_forward(tokenizer, tmp_path):
    examples = tagged_examples(tokenizer)
    collator = DataCollatorForTokenClassification(tokenizer)
    model = token_model()
    args = training_arguments(tmp_path, max_steps=2, bf16=True, logging_strategy="steps", logging_steps=1)
    trainer = Trainer(model=model, args=args, train_dataset=examples, data_collator=collator)
    trainer.train()
    assert all(np.isfinite(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry)
    output = trainer.predict(examples)
    for row, logits in enumerate(own_logits(model, collator, examples)):
        np.testing.assert_allclose(output.predictions[row, : len(logits)], logits.float().numpy(), atol=1e-2)


def test_resuming_from_a_checkpoint_ends_as_the_uninterrupted_run(tokenizer, tmp_path):
    examples = tagged_examples(tokenizer)
    collator = DataCollatorForTokenClassification(tokenizer)
    args = training_arguments(
        tmp_path, max_steps=4, per_device_train_batch_size=2, save_strategy="steps", save_steps=2, torch_compile=False
    )
    uninterrupted = token_model()
    Trainer(model=uninterrupted, args=args, train_dataset=examples, data_collator=collator).train()
    (tmp_path / "trainer" / "checkpoint-4").rename(tmp_path / "last")  # as if stopped after step 2's checkpoint
    resumed = token_model()
    resuming = Trainer(model=resumed, args=args, train_dataset=examples, data_collator=collator)
    resuming.train(resume_from_checkpoint=True)
    expected = trainable(uninterrupted)
    for name, value in trainable(resumed).items():
        torch.testing.assert_close(value, expected[name], msg=name)
    assert not any(parameter.requires_grad for parameter in resumed.elmo.parameters())


def test_load_best_model_at_end_restores_the_best_checkpoint_with_the_bilm_still_frozen(tokenizer, tmp_path):
    examples = tagged_examples(tokenizer)

    def accuracy(prediction):
        words = prediction.label_ids != -100
        return {"accuracy": float((prediction.predictions.argmax(-1)[words] == prediction.label_ids[words]).mean())}

    args = training_arguments(
        tmp_path,
        max_steps=4,
        per_device_train_batch_size=2,
        save_strategy="steps",
        save_steps=2,
        eval_strategy="steps",
        eval_steps=2,
        load_best_model_at_end=True,
        metric_for_best_model="accuracy",
    )
    model = token_model()
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=examples,
        eval_dataset=examples,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        compute_metrics=accuracy,
    )
    trainer.train()
    assert trainer.evaluate()["eval_accuracy"] == trainer.state.best_metric
    assert not any(parameter.requires_grad for parameter in model.elmo.parameters())


def test_num_input_tokens_seen_non_padding_counts_words_and_all_counts_character_ids(tokenizer, tmp_path):
    """`include_num_input_tokens_seen="non_padding"` counts the words (the attention mask). `True` ("all") is
    transformers' `input_ids.numel()`: for ELMo's `(batch, words, 50)` ids, 50 per word slot, padding included."""
    examples = tagged_examples(tokenizer)[:4]
    collator = DataCollatorForTokenClassification(tokenizer)
    batches = [collator(examples[:2]), collator(examples[2:])]
    seen = {}
    for setting in ("non_padding", True):
        args = training_arguments(
            tmp_path, max_steps=2, per_device_train_batch_size=2, include_num_input_tokens_seen=setting
        )
        trainer = Trainer(model=token_model(), args=args, train_dataset=examples, data_collator=collator)
        trainer.train()
        seen[setting] = trainer.state.num_input_tokens_seen
    assert seen["non_padding"] == sum(len(example["labels"]) for example in examples)
    assert seen[True] == sum(batch["input_ids"].numel() for batch in batches)


def test_average_tokens_across_devices_on_one_device_trains_the_same(tokenizer, tmp_path):
    updated = []
    for average in (True, False):
        model = token_model()
        args = training_arguments(
            tmp_path, max_steps=2, gradient_accumulation_steps=2, average_tokens_across_devices=average
        )
        collator = DataCollatorForTokenClassification(tokenizer)
        Trainer(model=model, args=args, train_dataset=tagged_examples(tokenizer), data_collator=collator).train()
        updated.append(trainable(model))
    for name, value in updated[0].items():
        torch.testing.assert_close(updated[1][name], value, msg=name)


@pytest.mark.parametrize(
    "num_labels, config_problem_type, labels, problem_type",
    [
        (1, None, [0.1 * row for row in range(6)], "regression"),
        (3, None, [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]] * 3, "multi_label_classification"),
        (3, "multi_label_classification", [[1, 0, 1], [0, 1, 0]] * 3, "multi_label_classification"),
    ],
)
def test_float_target_heads_train_and_predict_with_data_collator_with_padding(
    num_labels, config_problem_type, labels, problem_type, tokenizer, tmp_path
):
    """Regression and multi-label sequence heads (the problem type read from the targets, or integer multi-hot
    targets under an explicit one), with bf16 on CPU: a finite loss, and predictions of shape (examples,
    num_labels)."""
    model = sequence_model(num_labels, config_problem_type)
    examples = sentence_examples(tokenizer, labels)
    args = training_arguments(tmp_path, max_steps=2, bf16=True)
    trainer = Trainer(model=model, args=args, train_dataset=examples, data_collator=DataCollatorWithPadding(tokenizer))
    assert np.isfinite(trainer.train().training_loss)
    output = trainer.predict(examples)
    assert model.config.problem_type == problem_type
    assert output.predictions.shape == (6, num_labels) and np.isfinite(output.metrics["test_loss"])


def test_integer_multi_hot_targets_without_a_problem_type_name_the_problem_type(tokenizer, tmp_path):
    """Lists of 0/1 ints (a common multi-hot column) read as class ids: the error says how to mark them multi-label."""
    examples = sentence_examples(tokenizer, [[1, 0, 1]] * 6)
    args = training_arguments(tmp_path, max_steps=1)
    collator = DataCollatorWithPadding(tokenizer)
    trainer = Trainer(model=sequence_model(3), args=args, train_dataset=examples, data_collator=collator)
    message = r"shape \(batch_size,\), got \(3, 3\).*problem_type='multi_label_classification'"
    with pytest.raises(ValueError, match=message):
        trainer.train()


def float_labels_collator(tokenizer):
    """DataCollatorForTokenClassification, then labels cast to float (a custom collator's mistake)."""
    collator = DataCollatorForTokenClassification(tokenizer)
    return lambda features: {**(batch := collator(features)), "labels": batch["labels"].float()}


@pytest.mark.parametrize(
    "change, collate, error, message",
    [
        (None, float_labels_collator, TypeError, r"labels must hold integer class ids, got dtype torch.float32"),
        (
            lambda labels: [len(ID2LABEL)] * len(labels),
            DataCollatorForTokenClassification,
            ValueError,
            rf"labels hold id {len(ID2LABEL)}, outside 0..{len(ID2LABEL) - 1}",
        ),
    ],
    ids=["float labels", "id out of range"],
)
def test_wrong_token_labels_are_one_clear_error_in_train_and_evaluate(
    change, collate, error, message, tokenizer, tmp_path
):
    examples = tagged_examples(tokenizer)
    if change is not None:
        examples = [{**example, "labels": change(example["labels"])} for example in examples]
    args = training_arguments(tmp_path, max_steps=1)
    trainer = Trainer(model=token_model(), args=args, train_dataset=examples, data_collator=collate(tokenizer))
    with pytest.raises(error, match=message):
        trainer.train()
    with pytest.raises(error, match=message):
        trainer.evaluate(examples)


def test_labels_beyond_a_sentences_words_are_refused_not_trained_on_padding(tokenizer, tmp_path):
    """`truncation=True, max_length=2` cuts the words but not the labels; the collator pads both to the batch's
    longest sentence, so a short sentence's extra labels sat on padding positions and were trained on silently."""
    examples = tagged_examples(tokenizer)
    words = ["The", "dog", "barked", "."]
    examples[0] = {**tokenizer(words, is_split_into_words=True, truncation=True, max_length=2), "labels": [0, 1, 2, 3]}
    args = training_arguments(tmp_path, max_steps=1, per_device_train_batch_size=len(examples))
    collator = DataCollatorForTokenClassification(tokenizer)
    trainer = Trainer(model=token_model(), args=args, train_dataset=examples, data_collator=collator)
    message = r"labels give position 2 of row \d label id \d+, but that position is padding \(words in the row: 2\)"
    with pytest.raises(ValueError, match=message + r".*truncation=True"):
        trainer.train()
    with pytest.raises(ValueError, match=message):
        trainer.predict(examples[:2])


def test_a_saved_fine_tuned_head_reloads_to_the_same_predictions(tokenizer, tmp_path):
    examples = tagged_examples(tokenizer)
    collator = DataCollatorForTokenClassification(tokenizer)
    model = token_model(task_lstm_dim=4, concatenate_elmo_to_task_output=True)
    args = training_arguments(tmp_path, max_steps=2)
    trainer = Trainer(
        model=model, args=args, train_dataset=examples, data_collator=collator, processing_class=tokenizer
    )
    trainer.train()
    trainer.save_model(str(tmp_path / "tagger"))
    reloaded = AutoModelForTokenClassification.from_pretrained(tmp_path / "tagger")
    fresh_args = TrainingArguments(str(tmp_path / "again"), use_cpu=True, report_to=[])
    again = Trainer(model=reloaded, args=fresh_args, data_collator=collator)
    np.testing.assert_array_equal(again.predict(examples).predictions, trainer.predict(examples).predictions)
