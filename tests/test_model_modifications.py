"""A model changed or wrapped the ways torch and its ecosystem allow computes what the reference computes with the same
change: the dispatcher (`kernels_elmo.runs_as_written`) takes a kernel only where the kernel reads every change.

Each test changes a model where the CPU kernels would otherwise run, and compares it with the same model and the same
change forced to the reference (`config.elmo_implementation = "eager"`).
"""

import copy

import numpy as np
import pytest
import torch
from conftest import MIXED_SENTENCES, encode, tiny_config
from torch import nn

from elmo_hf import ElmoForTokenClassification, ElmoModel


@pytest.fixture
def inputs(tokenizer):
    return encode(tokenizer, MIXED_SENTENCES)


def model_and_reference(change) -> tuple[ElmoModel, ElmoModel]:
    """The tiny model with `change` applied, and a copy with the same change forced to the reference."""
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).eval()
    reference = copy.deepcopy(model)
    reference.config.elmo_implementation = "eager"
    for changed in (model, reference):
        torch.manual_seed(1)
        change(changed)
    return model, reference


def layers_of(model: ElmoModel, grad: bool, inputs) -> list[torch.Tensor]:
    with torch.enable_grad() if grad else torch.inference_mode():
        return list(model(**inputs, output_hidden_states=True).hidden_states)


def assert_same_layers(model: ElmoModel, reference: ElmoModel, inputs, grad: bool = False):
    for actual, expected in zip(layers_of(model, grad, inputs), layers_of(reference, grad, inputs), strict=True):
        assert np.allclose(actual.detach().numpy(), expected.detach().numpy(), atol=1e-6, rtol=1e-5)


def cells(model: ElmoModel) -> list[nn.Module]:
    return [cell for layer in model.bilm.layers for cell in (layer.forward_cell, layer.backward_cell)]


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "autograd"])
@pytest.mark.parametrize("name", ["input_to_gates", "projection"])
def test_a_cell_layer_replaced_by_a_linear_with_a_bias_adds_the_bias(inputs, name, grad):
    """`nn.Linear`'s default `bias=True`: ELMo's cells have no bias there, and the recurrence kernels read none."""

    def with_bias(model):
        for cell in cells(model):
            stock = getattr(cell, name)
            replaced = nn.Linear(stock.in_features, stock.out_features)
            with torch.no_grad():
                replaced.weight.copy_(stock.weight)
                replaced.bias.normal_()
            setattr(cell, name, replaced)

    assert_same_layers(*model_and_reference(with_bias), inputs, grad)


@pytest.mark.parametrize("setting", [{"dilation": 2}, {"padding": 1}, {"stride": 2}])
def test_a_convolution_replaced_by_one_of_other_settings_is_computed_with_them(inputs, setting):
    def convolution_with_setting(model):
        convolutions = model.token_encoder.char_cnn.convolutions
        stock = convolutions[2]
        replaced = nn.Conv1d(stock.in_channels, stock.out_channels, stock.kernel_size, **setting)
        replaced.load_state_dict(stock.state_dict())
        convolutions[2] = replaced

    assert_same_layers(*model_and_reference(convolution_with_setting), inputs)


@pytest.mark.parametrize(
    "change",
    [
        lambda model: setattr(model.config, "activation", "tanh"),
        lambda model: setattr(model.token_encoder.char_cnn, "activation", torch.tanh),
    ],
    ids=["config changed after building", "cnn's activation replaced"],
)
def test_the_character_cnn_applies_its_own_activation(inputs, change):
    assert_same_layers(*model_and_reference(change), inputs)


def test_a_forward_replaced_on_an_instance_is_called(inputs):
    """As accelerate's hooks and monkey-patches replace a layer's `forward`."""

    def halved_projection(model):
        projection = model.bilm.layers[0].forward_cell.projection
        stock = projection.forward
        projection.forward = lambda hidden: stock(hidden) / 2

    assert_same_layers(*model_and_reference(halved_projection), inputs)


def test_a_global_backward_pre_hook_changes_the_gradients_of_every_linear(inputs):
    def doubled(module, grad_outputs):
        return tuple(2 * grad for grad in grad_outputs) if isinstance(module, nn.Linear) else None

    model, reference = model_and_reference(lambda model: None)
    handle = nn.modules.module.register_module_full_backward_pre_hook(doubled)
    try:
        gradients = []
        for changed in (model, reference):
            changed(**inputs).last_hidden_state.square().sum().backward()
            gradients.append([parameter.grad for parameter in changed.parameters()])
    finally:
        handle.remove()
    for actual, expected in zip(*gradients, strict=True):
        assert np.allclose(actual.numpy(), expected.numpy(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("offload", ["cpu_offload", "disk_offload"])
def test_accelerate_offloaded_weights_are_loaded_for_the_call(inputs, tmp_path, offload):
    """accelerate keeps the weights on the meta device and loads each layer's in its hook: the kernels would read
    placeholders, and the dispatcher must not fail on the meta device."""
    import accelerate

    def offloaded(model):
        if offload == "cpu_offload":
            accelerate.cpu_offload(model, execution_device=torch.device("cpu"))
        else:
            accelerate.disk_offload(model, tmp_path / str(id(model)), execution_device=torch.device("cpu"))

    model, reference = model_and_reference(lambda model: None)
    expected = layers_of(reference, False, inputs)
    offloaded(model)
    for actual, stock in zip(layers_of(model, False, inputs), expected, strict=True):
        assert np.allclose(actual.numpy(), stock.numpy(), atol=1e-6, rtol=1e-5)


def test_a_weight_held_as_a_buffer_of_another_dtype_gets_torchs_dtype_error(inputs):
    def float64_buffer(model):
        projection = model.bilm.layers[0].forward_cell.projection
        weight = projection.weight.detach().double()
        del projection.weight
        projection.register_buffer("weight", weight)

    model, _ = model_and_reference(float64_buffer)
    with pytest.raises(RuntimeError, match="same dtype"):
        layers_of(model, False, inputs)


@pytest.mark.parametrize("model_class", [ElmoModel, ElmoForTokenClassification])
def test_a_model_built_on_the_meta_device_and_loaded_computes_as_built(model_class, inputs):
    """`to_empty` gives uninitialised memory to every tensor, the boundary rows' buffer too, which no state dict
    restores (non-persistent): they are made again from the config."""
    torch.manual_seed(0)
    built = model_class(tiny_config(num_labels=3)).eval()
    with torch.device("meta"):
        empty = model_class(tiny_config(num_labels=3))
    empty.to_empty(device="cpu")
    empty.load_state_dict(built.state_dict())
    empty.eval()
    with torch.inference_mode():
        expected, actual = built(**inputs), empty(**inputs)
    key = "logits" if model_class is ElmoForTokenClassification else "last_hidden_state"
    assert torch.equal(actual[key], expected[key])
