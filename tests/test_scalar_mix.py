"""ElmoScalarMix: the weighted sum against a float64 reference, fixed weights, layer norms, the L2 penalty."""

import numpy as np
import pytest
import torch
from conftest import tiny_config

from elmo_hf import ElmoForTokenClassification, ElmoScalarMix

LABELS = {0: "O", 1: "B-LOC", 2: "I-LOC"}


def random_layers(batch_size=2, sequence_length=4, dim=6, num_layers=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    layers = tuple(torch.randn(batch_size, sequence_length, dim, generator=generator) for _ in range(num_layers))
    mask = torch.ones(batch_size, sequence_length, dtype=torch.bool)
    mask[1, 2:] = False
    return tuple(layer * mask.unsqueeze(-1) for layer in layers), mask


def reference_mix(layers, mask, scalars, gamma, layer_norm):
    """`gamma * sum_j softmax(s)_j * norm(h_j)` in float64 NumPy, zero at padding."""
    weights = np.exp(scalars) / np.exp(scalars).sum()
    keep = mask.numpy()[..., None].astype(np.float64)
    total = 0.0
    for weight, layer in zip(weights, layers):
        layer = layer.double().numpy()
        if layer_norm == "token":
            layer = (layer - layer.mean(-1, keepdims=True)) / np.sqrt(layer.var(-1, keepdims=True) + 1e-12)
        elif layer_norm == "batch":
            count = keep.sum() * layer.shape[-1]
            mean = (layer * keep).sum() / count
            variance = (((layer - mean) * keep) ** 2).sum() / count
            layer = (layer - mean) / np.sqrt(variance + 1e-12)
        total = total + weight * layer
    return gamma * total * keep


@pytest.mark.parametrize("layer_norm", [None, "token", "batch"])
def test_mix_equals_hand_computed_weighted_sum(layer_norm):
    layers, mask = random_layers()
    mix = ElmoScalarMix(3, layer_norm=layer_norm)
    with torch.no_grad():
        mix.scalar_parameters.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.gamma.fill_(1.5)
    expected = reference_mix(layers, mask, np.array([0.5, -1.0, 2.0]), 1.5, layer_norm)
    np.testing.assert_allclose(mix(layers, mask).detach().double().numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("layer_norm", [None, "token", "batch"])
def test_the_mask_may_stay_on_the_host_while_the_layers_are_elsewhere(layer_norm):
    """As `ElmoModel` takes the tokenizer's host tensors on a GPU, its mix takes the host mask with layers on another
    device (here `meta`, where reading values would fail): the mask goes to the layers (it failed with torch's
    device error before), and the output has the layers' device and the host mix's shape."""
    layers, mask = random_layers()
    mix = ElmoScalarMix(3, layer_norm=layer_norm)
    expected = mix(layers, mask)
    mixed = mix.to("meta")(tuple(layer.to("meta") for layer in layers), mask)
    assert mixed.device.type == "meta" and mixed.shape == expected.shape and mixed.dtype == expected.dtype


def test_equal_weights_and_gamma_one_by_default():
    layers, mask = random_layers()
    mix = ElmoScalarMix(3)
    torch.testing.assert_close(mix(layers, mask), sum(layers) / 3)


def test_token_norm_is_batch_invariant_and_batch_norm_is_not():
    layers, mask = random_layers()
    for layer_norm, invariant in (("token", True), ("batch", False), (None, True)):
        mix = ElmoScalarMix(3, layer_norm=layer_norm)
        in_batch = mix(layers, mask)[0]
        alone = mix(tuple(layer[:1] for layer in layers), mask[:1])[0]
        assert torch.allclose(in_batch, alone, atol=1e-6) == invariant, layer_norm


def test_dropout_applies_in_training_only():
    layers, mask = random_layers()
    mix = ElmoScalarMix(3, dropout=0.5)
    torch.testing.assert_close(mix.eval()(layers, mask), sum(layers) / 3)
    dropped = mix.train()(layers, mask)
    assert (dropped[mask] == 0).float().mean() > 0.2


def test_wrong_number_of_layers():
    layers, mask = random_layers()
    with pytest.raises(ValueError, match="mixes 4 layers, got 3"):
        ElmoScalarMix(4)(layers, mask)


def test_l2_penalty_is_added_to_the_head_loss(tokenizer):
    inputs = tokenizer([["Paris", "is", "big"]], is_split_into_words=True, return_tensors="pt")
    labels = torch.tensor([[1, 0, 0]])
    losses = {}
    for coefficient in (0.0, 0.25):
        torch.manual_seed(0)
        model = ElmoForTokenClassification(
            tiny_config(id2label=LABELS, elmo_dropout=0.0, scalar_mix_l2_coefficient=coefficient)
        ).eval()
        with torch.no_grad():
            model.scalar_mix.scalar_parameters.copy_(torch.tensor([1.0, -2.0, 0.5]))
        losses[coefficient] = model(**inputs, labels=labels).loss
    torch.testing.assert_close(losses[0.25] - losses[0.0], torch.tensor(0.25 * (1.0 + 4.0 + 0.25)))


def test_fixed_weights_stay_fixed_through_training_and_reloading(tokenizer, tmp_path):
    fixed = [1.0, 0.0, -1.0]
    model = ElmoForTokenClassification(
        tiny_config(id2label=LABELS, scalar_mix_parameters=fixed, scalar_mix_l2_coefficient=1.0)
    )
    mix = model.scalar_mix
    assert not mix.scalar_parameters.requires_grad and not mix.gamma.requires_grad
    torch.testing.assert_close(mix.scalar_parameters, torch.tensor(fixed))
    inputs = tokenizer([["Paris", "is", "big"]], is_split_into_words=True, return_tensors="pt")
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    model(**inputs, labels=torch.tensor([[1, 0, 0]])).loss.backward()
    optimizer.step()
    torch.testing.assert_close(mix.scalar_parameters, torch.tensor(fixed))
    torch.testing.assert_close(mix.gamma, torch.ones(1))

    model.save_pretrained(tmp_path)
    reloaded = ElmoForTokenClassification.from_pretrained(tmp_path).scalar_mix
    torch.testing.assert_close(reloaded.scalar_parameters, torch.tensor(fixed))
    assert not reloaded.scalar_parameters.requires_grad and not reloaded.gamma.requires_grad
    assert reloaded.l2_penalty() == 0


def test_top_layer_average_and_given_weights():
    layers, mask = random_layers()
    torch.testing.assert_close(ElmoScalarMix.top_layer(3)(layers), layers[-1])
    torch.testing.assert_close(ElmoScalarMix.average(3)(layers), sum(layers) / 3)
    mix = ElmoScalarMix.from_weights([0.2, 0.3, 0.5], gamma=2.0)
    torch.testing.assert_close(mix.weights(), torch.tensor([0.2, 0.3, 0.5]))
    torch.testing.assert_close(mix(layers, mask), 2.0 * (0.2 * layers[0] + 0.3 * layers[1] + 0.5 * layers[2]))
    for fixed in (mix, ElmoScalarMix.top_layer(3)):
        assert not any(parameter.requires_grad for parameter in fixed.parameters())
        assert fixed.l2_penalty() == 0


def test_fixed_weights_in_the_constructor_are_pre_softmax_as_documented():
    mix = ElmoScalarMix(3, fixed_weights=[0.0, 0.0, 1.0])
    np.testing.assert_allclose(mix.weights().numpy(), [0.212, 0.212, 0.576], atol=1e-3)
    assert "pre-softmax" in ElmoScalarMix.__doc__ and "top_layer" in ElmoScalarMix.__doc__


@pytest.mark.parametrize(
    "weights, message",
    [
        ([0.5, 0.6, -0.1], "non-negative"),
        ([0.5, 0.5, 0.5], "must sum to 1"),
        ([], "non-negative"),
        ([1, float("nan")], "non-negative"),
    ],
)
def test_from_weights_rejects_what_is_not_a_convex_combination(weights, message):
    with pytest.raises(ValueError, match=message):
        ElmoScalarMix.from_weights(weights)


def test_inference_mode_outputs_give_an_error_that_says_what_to_do(tiny_model, tokenizer):
    inputs = tokenizer(["ELMo reads characters ."], return_tensors="pt")
    with torch.inference_mode():
        frozen = tiny_model(**inputs, output_hidden_states=True).hidden_states
    mix = ElmoScalarMix(3)
    with pytest.raises(RuntimeError, match=r"torch.inference_mode\(\).*torch.no_grad\(\) instead"):
        mix(frozen)
    with torch.inference_mode():  # only the output needed: fine
        mixed = mix(frozen)
    with torch.no_grad():  # the documented way to train the mix on a frozen biLM
        layers = tiny_model(**inputs, output_hidden_states=True).hidden_states
    mix(layers).sum().backward()
    assert mix.scalar_parameters.grad is not None and mix.gamma.grad is not None
    torch.testing.assert_close(mix(layers).detach(), mixed)
    torch.testing.assert_close(ElmoScalarMix.top_layer(3)(frozen), frozen[-1])  # a fixed mix takes them anywhere


def test_mask_is_optional_for_elmo_outputs_and_required_for_batch_norm(tiny_model, tokenizer):
    inputs = tokenizer(["A longer sentence here .", "Short ."], padding=True, return_tensors="pt")
    with torch.no_grad():
        layers = tiny_model(**inputs, output_hidden_states=True).hidden_states
    mask = inputs["attention_mask"]
    for layer_norm in (None, "token"):
        mix = ElmoScalarMix(3, layer_norm=layer_norm)
        torch.testing.assert_close(mix(layers), mix(layers, mask))
    with pytest.raises(ValueError, match="layer_norm='batch' needs the word mask"):
        ElmoScalarMix(3, layer_norm="batch")(layers)


def test_model_outputs_instead_of_layers_are_refused(tiny_model, tokenizer):
    outputs = tiny_model(**tokenizer(["Hi ."], return_tensors="pt"))
    with pytest.raises(TypeError, match="output_hidden_states=True and pass outputs.hidden_states"):
        ElmoScalarMix(3)(outputs)
    with pytest.raises(TypeError, match="output_hidden_states=True"):
        ElmoScalarMix(3)(outputs.hidden_states)


@pytest.mark.parametrize("layer_norm", ["Token", "layer", "bogus", ""])
def test_layer_norms_the_config_refuses_are_refused(layer_norm):
    with pytest.raises(ValueError, match=r"layer_norm must be one of \(None, 'token', 'batch'\)"):
        ElmoScalarMix(3, layer_norm=layer_norm)


@pytest.mark.parametrize("count", [0, -1, 2.0, True])
def test_a_mix_of_no_layers_is_refused(count):
    with pytest.raises(ValueError, match="at least one layer to mix"):
        ElmoScalarMix(count)


def test_fixed_weights_of_the_wrong_length_are_refused():
    with pytest.raises(ValueError, match="fixed_weights has 2 values for 3 layers"):
        ElmoScalarMix(3, fixed_weights=[0.0, 1.0])


def test_layers_of_different_shapes_are_refused():
    layers = [torch.zeros(2, 4, 6), torch.zeros(2, 4, 6), torch.zeros(2, 4, 1)]
    with pytest.raises(ValueError, match=r"layers of one shape, got shapes \[\(2, 4, 6\), \(2, 4, 6\), \(2, 4, 1\)\]"):
        ElmoScalarMix(3)(layers)


@pytest.mark.parametrize("shape", [(2, 5), (4, 2), (2, 4, 1)])
def test_a_mask_of_the_wrong_shape_is_refused(shape):
    layers = [torch.zeros(2, 4, 6)] * 3
    with pytest.raises(ValueError, match=r"mask must have the layers' shape without their last axis, \(2, 4\)"):
        ElmoScalarMix(3, layer_norm="batch")(layers, torch.ones(shape, dtype=torch.bool))
