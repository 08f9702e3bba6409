"""Inference always uses the weights as they are now, whatever route changed them (no stale copies on the CPU path).

Each test runs inference once (so that any copy of the weights the fast path might keep exists), changes the weights
through one route torch offers, and compares with a fresh model holding the same weights.
"""

import pytest
import torch
from conftest import MIXED_SENTENCES, encode, tiny_config

from elmo_hf import ElmoForTokenClassification, ElmoModel
from elmo_hf.cpu_kernels import ReorderedWeights, ReorderTimings


@pytest.fixture
def inputs(tokenizer):
    return encode(tokenizer, MIXED_SENTENCES)


@pytest.fixture(autouse=True)
def kept_copies(monkeypatch):
    """Every cell's call takes the kept reordered copies of its weights (whatever the timings say), so each test
    checks that a kept copy never goes stale."""
    monkeypatch.setattr(ReorderTimings, "saving", classmethod(lambda cls, weight, rows, threads: 1.0))
    calls = []
    copies = ReorderedWeights.copies
    monkeypatch.setattr(
        ReorderedWeights, "copies", classmethod(lambda cls, *args: calls.append(args) or copies(*args))
    )
    yield
    assert calls


def infer(model: torch.nn.Module, inputs) -> torch.Tensor:
    with torch.inference_mode():
        return model(**inputs, output_hidden_states=True).hidden_states


def assert_matches_fresh_model(model: ElmoModel, inputs):
    """`model` gives what a newly built model with its current weights gives."""
    fresh = ElmoModel(tiny_config()).to(next(model.parameters()).dtype).eval()
    fresh.load_state_dict(model.state_dict())
    for actual, expected in zip(infer(model, inputs), infer(fresh, inputs), strict=True):
        torch.testing.assert_close(actual, expected, atol=1e-6, rtol=0)


def recurrent_weights(model: ElmoModel) -> list[torch.nn.Parameter]:
    return [
        weight
        for layer in model.bilm.layers
        for cell in (layer.forward_cell, layer.backward_cell)
        for weight in (cell.hidden_to_gates.weight, cell.projection.weight)
    ]


@pytest.mark.parametrize(
    "edit",
    [
        lambda weight: weight.data.copy_(torch.randn_like(weight)),
        lambda weight: weight.data.normal_(),
        lambda weight: weight.data.__setitem__(slice(None), 0.0),
    ],
    ids=["data.copy_", "data.normal_", "data[:] = 0"],
)
def test_in_place_edits_through_data(tiny_model, inputs, edit):
    infer(tiny_model, inputs)
    torch.manual_seed(1)
    for weight in recurrent_weights(tiny_model):
        edit(weight)
    assert_matches_fresh_model(tiny_model, inputs)


@pytest.mark.parametrize("implementation", [{"fused": True}, {"foreach": True}, {"foreach": False}])
def test_optimizer_steps(tiny_model, inputs, implementation):
    """Fused optimizers update the weights without bumping their version counter."""
    infer(tiny_model, inputs)
    optimizer = torch.optim.AdamW(tiny_model.parameters(), lr=0.1, **implementation)
    torch.manual_seed(1)
    for parameter in tiny_model.parameters():
        parameter.grad = torch.randn_like(parameter)
    optimizer.step()
    assert_matches_fresh_model(tiny_model, inputs)


def test_swapped_parameters_convert_and_load(tiny_model, inputs):
    """With torch's parameter swapping on, `.to()` and `load_state_dict` swap tensors: nothing may hold on to them."""
    infer(tiny_model, inputs)
    swapping = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        tiny_model.to(torch.float64)
        infer(tiny_model, inputs)
        torch.manual_seed(1)
        tiny_model.load_state_dict(ElmoModel(tiny_config()).double().state_dict())
        assert_matches_fresh_model(tiny_model, inputs)
        tiny_model.to(torch.float32)
        assert_matches_fresh_model(tiny_model, inputs)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swapping)


def test_load_state_dict_with_assign(tiny_model, inputs):
    infer(tiny_model, inputs)
    torch.manual_seed(1)
    tiny_model.load_state_dict(ElmoModel(tiny_config()).state_dict(), assign=True)
    assert_matches_fresh_model(tiny_model, inputs)


def test_conversion_round_trip_with_new_weights(tiny_model, inputs):
    """`.to()` makes new tensors, which may land at the addresses of the old ones."""
    infer(tiny_model, inputs)
    tiny_model.to(torch.bfloat16)
    torch.manual_seed(1)
    with torch.no_grad():
        for weight in recurrent_weights(tiny_model):
            weight.normal_()
    tiny_model.to(torch.float32)
    assert_matches_fresh_model(tiny_model, inputs)


def test_shared_memory_and_an_edit(tiny_model, inputs):
    infer(tiny_model, inputs)
    tiny_model.share_memory()
    infer(tiny_model, inputs)
    torch.manual_seed(1)
    for weight in recurrent_weights(tiny_model):
        weight.data.mul_(-1.5)
    assert_matches_fresh_model(tiny_model, inputs)


def test_trainer_predictions_equal_the_saved_weights(tmp_path, tokenizer):
    """`Trainer` (default fused AdamW) fine-tunes the biLM, evaluating after each epoch; its predictions afterwards
    are those of the saved weights loaded into a fresh model."""
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = tiny_config(id2label={0: "O", 1: "X"}, freeze_bilm=False, elmo_dropout=0.0)
    model = ElmoForTokenClassification(config)
    sentences = [words for words in MIXED_SENTENCES if words] * 2
    rows = [dict(tokenizer(words, is_split_into_words=True)) for words in sentences]
    for row, words in zip(rows, sentences):
        row["labels"] = [len(word) % 2 for word in words]
    dataset = rows
    arguments = TrainingArguments(
        tmp_path / "run", num_train_epochs=2, per_device_train_batch_size=4, learning_rate=0.05,
        eval_strategy="epoch", save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
    )
    trainer = Trainer(
        model, arguments, train_dataset=dataset, eval_dataset=dataset,
        data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    assert "fused" in trainer.args.optim.value
    trainer.train()
    predicted = trainer.predict(dataset).predictions
    trainer.save_model(tmp_path / "saved")
    reloaded = Trainer(
        ElmoForTokenClassification.from_pretrained(tmp_path / "saved"), arguments, eval_dataset=dataset,
        data_collator=DataCollatorForTokenClassification(tokenizer),
    ).predict(dataset).predictions
    assert abs(predicted - reloaded).max() < 1e-5
