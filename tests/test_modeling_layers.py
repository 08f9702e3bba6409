"""The paper's layers one by one (`modeling_elmo.py`): the character CNN, the highway layers, one biLSTM layer with its
residual, the task encoder, each against hand-computed numbers or an independent computation."""

import pytest
import torch
from conftest import tiny_config

from elmo_hf.modeling_elmo import ElmoCharCnn, ElmoHighway, ElmoHighwayLayer, ElmoLstmLayer, ElmoTaskEncoder
from elmo_hf.reference_elmo import SequenceBatch


def test_char_cnn_is_max_pooled_convolutions_then_the_activation():
    """One width-2 filter with weights 1 over embeddings [1, 2, 3]: windows sum to 3 and 5, max 5; relu keeps it."""
    cnn = ElmoCharCnn(tiny_config(char_embedding_dim=1, filters=[[2, 1], [1, 1]], activation="relu"))
    with torch.no_grad():
        cnn.convolutions[0].weight.fill_(1.0)
        cnn.convolutions[0].bias.fill_(0.5)
        cnn.convolutions[1].weight.fill_(-1.0)
        cnn.convolutions[1].bias.zero_()
    chars = torch.tensor([[[1.0], [2.0], [3.0]]])  # (num_words, max_characters_per_token, char_embedding_dim)
    # width 2: max(1 + 2, 2 + 3) + 0.5 = 5.5; width 1 with weight -1: max(-1, -2, -3) = -1, relu -> 0
    torch.testing.assert_close(cnn(chars), torch.tensor([[5.5, 0.0]]), atol=0, rtol=0)


def test_highway_layer_gates_the_transformed_branch():
    layer = ElmoHighwayLayer(2)
    with torch.no_grad():
        layer.transform.weight.copy_(torch.eye(2) * 2)
        layer.transform.bias.zero_()
        layer.gate.weight.zero_()
        layer.gate.bias.fill_(0.0)  # g = sigmoid(0) = 0.5
    x = torch.tensor([[1.0, -1.0]])
    # 0.5 * relu(2x) + 0.5 * x = [0.5 * 2 + 0.5, 0 - 0.5]
    torch.testing.assert_close(layer(x), torch.tensor([[1.5, -0.5]]), atol=1e-7, rtol=0)


def test_highway_stack_applies_its_layers_in_order():
    torch.manual_seed(0)
    highway = ElmoHighway(tiny_config(num_highway_layers=2))
    x = torch.randn(3, highway.layers[0].gate.in_features)
    torch.testing.assert_close(highway(x), highway.layers[1](highway.layers[0](x)), atol=0, rtol=0)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("residual", [False, True])
def test_bilm_layer_runs_each_direction_on_its_own_inputs_and_adds_the_residual(packed, residual):
    """Both directions through their own cells, the backward one on each row reversed within its length; with the
    residual, the layer's input is added to each direction's output. Checked against the cells run one row at a
    time on the plainly reversed sequence."""
    torch.manual_seed(0)
    config = tiny_config(cell_clip=1.0, projection_clip=0.5)
    layer = ElmoLstmLayer(config, residual=residual).eval()
    lengths = torch.tensor([4, 2])
    # zero beyond each row's length, as ElmoModel's token layer is
    sequences = torch.randn(2, 4, config.projection_dim) * (torch.arange(4) < lengths.unsqueeze(1)).unsqueeze(-1)
    batch = SequenceBatch(lengths, steps=4, packed=packed)
    zeros = (torch.zeros(2, config.projection_dim), torch.zeros(2, config.lstm_dim))
    forward_inputs, backward_inputs = batch.directions(sequences)
    with torch.no_grad():
        forward_outputs, backward_outputs, _ = layer(forward_inputs, backward_inputs, batch, (zeros, zeros))
        merged = batch.merge(forward_outputs, backward_outputs)
        for row, length in enumerate(lengths.tolist()):
            words = sequences[row : row + 1, :length]
            alone = SequenceBatch(torch.tensor([length]), steps=length, packed=True)
            state = (torch.zeros(1, config.projection_dim), torch.zeros(1, config.lstm_dim))
            forward_alone, _ = layer.forward_cell(words[0], alone, state)
            backward_alone, _ = layer.backward_cell(words[0].flip(0), alone, state)
            if residual:
                forward_alone, backward_alone = forward_alone + words[0], backward_alone + words[0].flip(0)
            torch.testing.assert_close(merged[row, :length, : config.projection_dim], forward_alone)
            torch.testing.assert_close(merged[row, :length, config.projection_dim :], backward_alone.flip(0))
            assert bool((merged[row, length:] == 0).all())


def test_task_encoder_is_an_lstm_over_each_rows_words_alone():
    """Packed and padded (the export path) runs give what `nn.LSTM` gives on each row's words alone."""
    torch.manual_seed(0)
    encoder = ElmoTaskEncoder(tiny_config(task_lstm_dim=3, task_lstm_layers=2)).eval()
    features = torch.randn(2, 5, encoder.lstm.input_size)
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]], dtype=torch.bool)  # left padding in row 1
    with torch.no_grad():
        packed = encoder(features, mask)
        encoder.config.elmo_implementation = "export"
        padded = encoder(features, mask)
        for row in range(2):
            alone, _ = encoder.lstm(features[row : row + 1, mask[row]])
            torch.testing.assert_close(packed[row, mask[row]], alone[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(padded, packed, atol=1e-6, rtol=1e-5)
    assert bool((packed[~mask] == 0).all()) and bool((padded[~mask] == 0).all())
