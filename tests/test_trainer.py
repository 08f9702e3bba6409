"""Fine-tuning the heads with Trainer: the loss falls, frozen means frozen, save and reload, and gradient
accumulation equals one larger batch (`num_items_in_batch` honoured, the L2 term counted once)."""

import pytest
import torch
from conftest import tiny_config
from transformers import (
    AutoModelForTokenClassification,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification

# A few Brown-style part-of-speech sentences (words and coarse tags), enough for a tiny model to learn from.
TAGGED = [
    ("The/DET dog/NOUN barked/VERB ./."),
    ("A/DET cat/NOUN sat/VERB on/ADP the/DET mat/NOUN ./."),
    ("She/PRON reads/VERB old/ADJ books/NOUN ./."),
    ("They/PRON walked/VERB to/ADP the/DET old/ADJ town/NOUN ./."),
    ("The/DET big/ADJ dog/NOUN ran/VERB home/NOUN ./."),
    ("He/PRON saw/VERB a/DET small/ADJ cat/NOUN ./."),
]
TAGS = sorted({pair.rsplit("/", 1)[1] for sentence in TAGGED for pair in sentence.split()})
ID2LABEL = dict(enumerate(TAGS))


def tagged_examples(tokenizer) -> list[dict]:
    """One Trainer example per sentence: character ids and a tag id per word."""
    examples = []
    for sentence in TAGGED:
        words, tags = zip(*(pair.rsplit("/", 1) for pair in sentence.split()))
        encoding = tokenizer(list(words), is_split_into_words=True)
        examples.append({**encoding, "labels": [TAGS.index(tag) for tag in tags]})
    return examples


def training_arguments(tmp_path, **overrides) -> TrainingArguments:
    fields = {
        "output_dir": str(tmp_path / "trainer"),
        "use_cpu": True,
        "report_to": [],
        "save_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
        "learning_rate": 0.05,
        "per_device_train_batch_size": 3,
        "max_steps": 15,
    }
    fields.update(overrides)
    return TrainingArguments(**fields)


def token_model(**overrides) -> ElmoForTokenClassification:
    torch.manual_seed(0)
    return ElmoForTokenClassification(tiny_config(id2label=ID2LABEL, elmo_dropout=0.0, **overrides))


def mean_loss(model, batch) -> float:
    model.eval()
    with torch.no_grad():
        return model(**batch).loss.item()


def test_trainer_lowers_the_loss_keeps_the_bilm_frozen_and_reloads(converted, tokenizer, tmp_path):
    examples = tagged_examples(tokenizer)
    collator = DataCollatorForTokenClassification(tokenizer)
    batch = collator(examples)
    torch.manual_seed(0)
    model = ElmoForTokenClassification.from_pretrained(
        converted["allennlp"], id2label=ID2LABEL, elmo_dropout=0.0, task_lstm_dim=8
    )
    bilm_before = {name: value.clone() for name, value in model.elmo.state_dict().items()}
    mix_before = model.scalar_mix.scalar_parameters.detach().clone()
    loss_before = mean_loss(model, batch)

    trainer = Trainer(
        model=model,
        args=training_arguments(tmp_path),
        train_dataset=examples,
        data_collator=collator,
        processing_class=tokenizer,
    )
    trainer.train()
    loss_after = mean_loss(model, batch)
    assert loss_after < 0.6 * loss_before
    for name, value in model.elmo.state_dict().items():
        assert torch.equal(value, bilm_before[name]), name
    assert not torch.equal(model.scalar_mix.scalar_parameters, mix_before)

    trainer.save_model(str(tmp_path / "tagger"))
    reloaded = AutoModelForTokenClassification.from_pretrained(tmp_path / "tagger")
    assert type(reloaded) is ElmoForTokenClassification and reloaded.config.id2label == ID2LABEL
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits)


def test_trainer_fine_tunes_the_bilm_when_not_frozen(tokenizer, tmp_path):
    examples = tagged_examples(tokenizer)
    model = token_model(freeze_bilm=False)
    bilm_before = {name: value.clone() for name, value in model.elmo.state_dict().items()}
    args = training_arguments(tmp_path, max_steps=2, learning_rate=0.01)
    Trainer(
        model=model, args=args, train_dataset=examples, data_collator=DataCollatorForTokenClassification(tokenizer)
    ).train()
    changed = [name for name, value in model.elmo.state_dict().items() if not torch.equal(value, bilm_before[name])]
    assert "token_encoder.char_embeddings.weight" in changed
    assert "bilm.layers.1.backward_cell.projection.weight" in changed


def sequence_examples(tokenizer) -> list[dict]:
    """Regression targets: the sentence length in words, scaled."""
    return [
        {
            **tokenizer([pair.rsplit("/", 1)[0] for pair in sentence.split()], is_split_into_words=True),
            "labels": 0.1 * len(sentence.split()),
        }
        for sentence in TAGGED[:4]
    ]


@pytest.mark.parametrize("task", ["token", "regression"])
def test_gradient_accumulation_equals_one_larger_batch(task, tokenizer, tmp_path):
    """One SGD step on 4 sentences as one batch, and as 2 accumulated batches of 2: the same update, with the mixes'
    L2 penalty on (added once per step), dropout off and no gradient clipping."""
    if task == "token":
        examples, collator = tagged_examples(tokenizer)[:4], DataCollatorForTokenClassification(tokenizer)
    else:
        examples, collator = sequence_examples(tokenizer), DataCollatorWithPadding(tokenizer)
    updated = []
    for batch_size, accumulation in ((4, 1), (2, 2)):
        torch.manual_seed(0)
        fields = {"elmo_dropout": 0.0, "scalar_mix_l2_coefficient": 0.5}
        if task == "token":
            model = ElmoForTokenClassification(tiny_config(id2label=ID2LABEL, **fields))
        else:
            model = ElmoForSequenceClassification(tiny_config(num_labels=1, **fields))
        with torch.no_grad():
            model.scalar_mix.scalar_parameters.copy_(torch.tensor([0.3, -0.2, 0.1]))
        args = training_arguments(
            tmp_path,
            max_steps=1,
            optim="sgd",
            learning_rate=0.5,
            lr_scheduler_type="constant",
            max_grad_norm=0.0,
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation,
        )
        Trainer(model=model, args=args, train_dataset=examples, data_collator=collator).train()
        updated.append(
            {name: value.detach().clone() for name, value in model.named_parameters() if value.requires_grad}
        )
    start = torch.tensor([0.3, -0.2, 0.1])
    assert not torch.allclose(updated[0]["scalar_mix.scalar_parameters"], start)
    for name, value in updated[0].items():
        torch.testing.assert_close(updated[1][name], value, atol=1e-6, rtol=1e-5, msg=name)
