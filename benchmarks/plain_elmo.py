"""A plain, step-by-step ELMo for one sentence, straight from the equations: the reference for the fast path.

No batching, packing, word de-duplication or fused kernels: `nn.Conv1d` for the character CNN, then one
matrix-vector product per gate block and time step (`elmo_reference.md` §4). Slow by design; used by
`bench_inference.py` (the "max abs diff" column) and `tests/test_fast_path.py`.
"""

import torch

from elmo_hf import ElmoModel
from elmo_hf.tokenization_elmo import BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN, word_to_char_ids


def plain_token_layer(model: ElmoModel, char_ids: torch.Tensor) -> torch.Tensor:
    """`(num_words, max_characters_per_token)` -> `(num_words, projection_dim)`, one direct convolution per bank."""
    encoder = model.token_encoder
    # (num_words, char_embedding_dim, max_characters_per_token) for Conv1d
    embedded = encoder.char_embeddings(char_ids).transpose(1, 2)
    features = torch.cat([conv(embedded).amax(dim=-1) for conv in encoder.char_cnn.convolutions], dim=-1)
    features = encoder.char_cnn.activation(features)
    for layer in encoder.highway.layers:
        gate = torch.sigmoid(layer.gate(features))
        features = gate * torch.relu(layer.transform(features)) + (1 - gate) * features
    return encoder.projection(features)


def plain_lstm(cell, inputs: torch.Tensor) -> torch.Tensor:
    """One direction from zero state, one time step at a time: `(steps, projection_dim)` -> same shape."""
    lstm_dim = cell.projection.weight.shape[1]
    hidden, memory = inputs.new_zeros(cell.projection.weight.shape[0]), inputs.new_zeros(lstm_dim)
    outputs = []
    for token in inputs:
        gates = cell.input_to_gates.weight @ token + cell.hidden_to_gates.weight @ hidden + cell.hidden_to_gates.bias
        input_gate, forget_gate, candidate, output_gate = gates.chunk(4)
        memory = torch.sigmoid(forget_gate) * memory + torch.sigmoid(input_gate) * torch.tanh(candidate)
        if cell.cell_clip is not None:
            memory = memory.clamp(-cell.cell_clip, cell.cell_clip)
        hidden = cell.projection.weight @ (torch.sigmoid(output_gate) * torch.tanh(memory))
        if cell.projection_clip is not None:
            hidden = hidden.clamp(-cell.projection_clip, cell.projection_clip)
        outputs.append(hidden)
    return torch.stack(outputs)


def plain_elmo_layers(model: ElmoModel, char_ids: torch.Tensor) -> list[torch.Tensor]:
    """Stateless ELMo of one sentence, `(num_words, max_characters_per_token)` character ids (no padding rows).

    Returns the `num_layers + 1` layers, each `(num_words, 2 * projection_dim)`, as `ElmoModel`'s `hidden_states`.
    """
    chars = model.config.max_characters_per_token
    boundaries = [
        torch.tensor([word_to_char_ids(token, chars)]) for token in (BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN)
    ]
    tokens = plain_token_layer(model, torch.cat([boundaries[0], char_ids.cpu(), boundaries[1]]).to(char_ids.device))
    layers = [torch.cat([tokens, tokens], dim=-1)]
    forward_inputs, backward_inputs = tokens, tokens.flip(0)
    for layer in model.bilm.layers:
        forward_outputs = plain_lstm(layer.forward_cell, forward_inputs)
        backward_outputs = plain_lstm(layer.backward_cell, backward_inputs)
        if layer.residual:
            forward_outputs, backward_outputs = forward_outputs + forward_inputs, backward_outputs + backward_inputs
        forward_inputs, backward_inputs = forward_outputs, backward_outputs
        layers.append(torch.cat([forward_outputs, backward_outputs.flip(0)], dim=-1))
    return [layer[1:-1] for layer in layers]
