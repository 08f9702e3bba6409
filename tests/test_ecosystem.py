"""The everyday tools of the ecosystem see and change every layer: hooks, PEFT LoRA adapters, torchao int8 weights,
torch.compile. Each runs where the CPU kernels would otherwise be taken (CPU, no autograd)."""

import numpy as np
import pytest
import torch
from conftest import MIXED_SENTENCES, encode, tiny_config
from torch import nn

from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel

TAGS = {0: "O", 1: "B", 2: "I"}
# Every nn.Linear / nn.Conv1d of the tiny ElmoModel: 3 convolutions, 1 highway layer (gate, transform), the token
# projection, and 2 layers x 2 directions x (input_to_gates, hidden_to_gates, projection).
TINY_ELMO_LAYERS = 3 + 2 + 1 + 2 * 2 * 3
LORA_TARGETS = ["input_to_gates", "hidden_to_gates", "projection", "gate", "transform"]


@pytest.fixture
def inputs(tokenizer):
    return encode(tokenizer, MIXED_SENTENCES)


@pytest.mark.parametrize(
    "model_class, extra_layers",
    [(ElmoModel, 0), (ElmoForTokenClassification, 1), (ElmoForSequenceClassification, 1)],
    ids=["base", "token-classification", "sequence-classification"],
)
def test_forward_hooks_fire_on_every_linear_and_convolution(inputs, model_class, extra_layers):
    torch.manual_seed(0)
    model = model_class(tiny_config(id2label=TAGS)).eval()
    layers = {name: module for name, module in model.named_modules() if type(module) in (nn.Linear, nn.Conv1d)}
    assert len(layers) == TINY_ELMO_LAYERS + extra_layers  # the heads add their classifier
    fired = set()
    for name, module in layers.items():
        module.register_forward_hook(lambda module, args, output, name=name: fired.add(name))
    with torch.inference_mode():
        model(**inputs)
    assert fired == set(layers)


@pytest.fixture
def real_model(converted) -> ElmoModel:
    """The converted AllenNLP fixture checkpoint (real weights, tiny architecture)."""
    return ElmoModel.from_pretrained(converted["allennlp"]).eval()


def test_a_hook_that_changes_an_output_changes_the_model(real_model, inputs):
    with torch.inference_mode():
        before = real_model(**inputs).last_hidden_state
        real_model.bilm.layers[1].backward_cell.projection.register_forward_hook(lambda module, args, out: out * 0)
        after = real_model(**inputs).last_hidden_state
    half = real_model.config.projection_dim
    torch.testing.assert_close(after[..., :half], before[..., :half])
    assert not torch.allclose(after[..., half:], before[..., half:])


def lora_model(model: nn.Module, **kwargs):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=2, lora_alpha=4, target_modules=LORA_TARGETS, **kwargs)
    return get_peft_model(model, config)


def test_lora_adapters_change_the_output_and_get_gradients(real_model, inputs):
    """Non-zero initialised adapters on every linear layer of the biLM and the token layer."""
    with torch.inference_mode():
        before = real_model(**inputs).last_hidden_state
    targets = [name for name, module in real_model.named_modules() if name.rsplit(".", 1)[-1] in LORA_TARGETS]
    assert len(targets) == 2 * 2 + 1 + 2 * 2 * 3  # 2 highway layers, the token projection, 4 cells
    torch.manual_seed(1)
    model = lora_model(real_model, init_lora_weights=False)
    adapters = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    assert all("lora_" in name for name in adapters) and len(adapters) == 2 * len(targets)  # A and B per layer
    with torch.inference_mode():
        after = model(**inputs).last_hidden_state
    assert (after - before).abs().max() > 1e-3
    model(**inputs).last_hidden_state.pow(2).sum().backward()
    assert all(parameter.grad is not None for parameter in model.parameters() if parameter.requires_grad)


def test_trainer_trains_lora_adapters_and_the_reloaded_adapter_predicts_the_same(tmp_path, tokenizer):
    from peft import PeftModel
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    torch.manual_seed(0)
    # freeze_bilm=False: the head then runs the biLM with autograd, so its adapters get gradients (PEFT freezes the
    # biLM's own weights).
    base = ElmoForTokenClassification(tiny_config(id2label=TAGS, elmo_dropout=0.0, freeze_bilm=False))
    base.save_pretrained(tmp_path / "base")
    base_weights = {name: value.clone() for name, value in base.elmo.state_dict().items()}
    model = lora_model(base, modules_to_save=["classifier", "scalar_mix"])
    sentences = [words for words in MIXED_SENTENCES if words]
    rows = [dict(tokenizer(words, is_split_into_words=True)) for words in sentences]
    for row, words in zip(rows, sentences):
        row["labels"] = [min(len(word), 3) - 1 for word in words]
    dataset = rows
    collator = DataCollatorForTokenClassification(tokenizer)
    arguments = TrainingArguments(
        tmp_path / "run", max_steps=12, per_device_train_batch_size=4, learning_rate=0.05, logging_steps=1,
        save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, remove_unused_columns=False,
    )
    trainer = Trainer(model, arguments, train_dataset=dataset, eval_dataset=dataset, data_collator=collator)
    loss_before = trainer.evaluate()["eval_loss"]
    trainer.train()
    loss_after = trainer.evaluate()["eval_loss"]
    assert loss_after < loss_before
    trained = {name for name, value in model.named_parameters() if "lora_B" in name and value.abs().sum() > 0}
    assert len(trained) == len([name for name, _ in model.named_parameters() if "lora_B" in name])
    # The biLM's own weights did not move (PEFT names a wrapped layer's weight `...base_layer.weight`).
    elmo_weights = {
        name.replace(".base_layer", ""): value
        for name, value in model.base_model.model.elmo.state_dict().items()
        if "lora_" not in name
    }
    assert elmo_weights.keys() == base_weights.keys()
    assert all(torch.equal(elmo_weights[name], value) for name, value in base_weights.items())

    predictions = trainer.predict(dataset).predictions
    model.save_pretrained(tmp_path / "adapter")
    base_again = ElmoForTokenClassification.from_pretrained(tmp_path / "base")
    reloaded = PeftModel.from_pretrained(base_again, tmp_path / "adapter")
    reloaded_predictions = Trainer(reloaded, arguments, eval_dataset=dataset, data_collator=collator).predict(dataset)
    np.testing.assert_array_equal(reloaded_predictions.predictions, predictions)


def test_int8_weights_run_on_cpu_close_to_float32(real_model, converted, tokenizer):
    """torchao's int8 weight-only quantisation of every linear layer of a converted checkpoint (real weights),
    on real sentences: the quantised layers are used (the outputs move) and stay close to float32."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    model = real_model
    quantized = ElmoModel.from_pretrained(converted["allennlp"]).eval()
    quantize_(quantized, Int8WeightOnlyConfig())
    assert type(quantized.bilm.layers[0].forward_cell.hidden_to_gates.weight) is not nn.Parameter
    inputs = encode(tokenizer, [["The", "cat", "sat", "on", "the", "mat", "."], ["Dogs", "bark", "at", "night"]])
    with torch.inference_mode():
        expected = model(**inputs).last_hidden_state
        actual = quantized(**inputs).last_hidden_state
    deviation = (actual - expected).abs().max().item()
    assert 0 < deviation < 0.05 * expected.abs().max().item()


def test_torch_compile_matches_eager(tokenizer):
    """One biLSTM layer and two short sentences keep the compile time small (the scan unrolls over the steps)."""
    torch.manual_seed(0)
    model = ElmoModel(tiny_config(num_layers=1)).eval()
    inputs = encode(tokenizer, [["The", "cat", "sat"], ["Dogs"]])
    compiled = torch.compile(model)
    with torch.inference_mode():
        expected = model(**inputs, output_hidden_states=True).hidden_states
        actual = compiled(**inputs, output_hidden_states=True).hidden_states
    for actual_layer, expected_layer in zip(actual, expected, strict=True):
        torch.testing.assert_close(actual_layer, expected_layer, atol=1e-5, rtol=0)
