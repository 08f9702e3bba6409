"""The fast inference path: equal to a plain step-by-step computation, trainable, bounded on long inputs."""

import pytest
import torch
from conftest import tiny_config

from benchmarks.plain_elmo import plain_elmo_layers
from elmo_hf import ElmoModel, modeling_elmo
from elmo_hf.modeling_elmo import linear, onednn_linear_available, onednn_weight

SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    [],
    ["the"],
    ["Dogs", "bark", "the", "the", "cat", "Dogs"],
    ["Über", "naïve", "café", "😀"],
    [],
]


def encode(tokenizer, sentences, **kwargs):
    return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt", **kwargs)


def test_linear_uses_onednn_only_without_autograd_and_agrees_with_addmm():
    torch.manual_seed(0)
    inputs, weight, bias, add = torch.randn(5, 7), torch.randn(11, 7, requires_grad=True), torch.randn(11), None
    add = torch.randn(5, 11)
    expected = torch.addmm(bias, inputs, weight.detach().t()) + add
    with torch.inference_mode():
        assert onednn_linear_available(inputs, weight) == torch.backends.mkldnn.is_available()
        torch.testing.assert_close(linear(inputs, weight, bias, add=add), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(linear(inputs, weight), inputs @ weight.t(), atol=1e-5, rtol=1e-5)
    assert not onednn_linear_available(inputs, weight)
    assert not onednn_linear_available(inputs.double(), weight.detach().double())
    outputs = linear(inputs, weight, bias, add=add)
    assert outputs.requires_grad
    torch.testing.assert_close(outputs, expected)


def test_onednn_weight_is_reordered_once_and_remade_when_the_weight_changes():
    torch.manual_seed(0)
    weight, inputs = torch.nn.Parameter(torch.randn(11, 7)), torch.randn(5, 7)
    with torch.inference_mode():
        packed = onednn_weight(weight)
        assert onednn_weight(weight) is packed
        expected = inputs @ weight.t()
        torch.testing.assert_close(linear(inputs, weight, weight_onednn=packed), expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        weight.mul_(2)  # an in-place update, as an optimizer step
    with torch.inference_mode():
        assert onednn_weight(weight) is not packed
        updated = linear(inputs, weight, weight_onednn=onednn_weight(weight))
        torch.testing.assert_close(updated, inputs @ weight.t(), atol=1e-5, rtol=1e-5)
        inference_weight = torch.randn(11, 7)
        assert onednn_weight(inference_weight) is inference_weight  # inference tensors have no version to track


def test_inference_follows_weight_updates_and_loaded_weights(tokenizer):
    """The oneDNN copies of the LSTM weights never go stale: after an optimizer step or `load_state_dict`, inference
    equals a fresh model holding the same weights."""
    torch.manual_seed(0)
    model, inputs = ElmoModel(tiny_config()).eval(), encode(tokenizer, SENTENCES)
    with torch.inference_mode():
        model(**inputs)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter)
    optimizer.step()
    fresh = ElmoModel(tiny_config()).eval()
    fresh.load_state_dict(model.state_dict())
    with torch.inference_mode():
        torch.testing.assert_close(model(**inputs).last_hidden_state, fresh(**inputs).last_hidden_state)
        torch.manual_seed(1)
        model.load_state_dict(ElmoModel(tiny_config()).state_dict())
        fresh.load_state_dict(model.state_dict())
        torch.testing.assert_close(model(**inputs).last_hidden_state, fresh(**inputs).last_hidden_state)


def test_fast_path_equals_the_plain_step_by_step_computation(tiny_model, tokenizer):
    inputs = encode(tokenizer, SENTENCES)
    with torch.inference_mode():
        layers = tiny_model(**inputs, output_hidden_states=True).hidden_states
        for row, words in enumerate(SENTENCES):
            if words:
                char_ids = tokenizer(words, is_split_into_words=True, return_tensors="pt")["input_ids"][0]
                for fast, plain in zip(layers, plain_elmo_layers(tiny_model, char_ids)):
                    torch.testing.assert_close(fast[row, : len(words)], plain, atol=1e-5, rtol=0)
            assert all(torch.all(layer[row, len(words) :] == 0) for layer in layers)


def test_fast_path_equals_the_autograd_path_in_float64_statefully(tiny_model, tokenizer):
    """Inference (oneDNN, float32) against the training path (autograd, `F.linear`) on a float64 copy, threading
    `lstm_state` through three batches of different sizes."""
    reference = ElmoModel(tiny_config()).double()
    reference.load_state_dict(tiny_model.state_dict())
    batches = [SENTENCES, SENTENCES[3:], SENTENCES[:4][::-1]]
    fast_state = reference_state = None
    for sentences in batches:
        inputs = encode(tokenizer, sentences)
        with torch.inference_mode():
            fast = tiny_model(**inputs, lstm_state=fast_state, output_lstm_state=True, output_hidden_states=True)
        plain = reference(**inputs, lstm_state=reference_state, output_lstm_state=True, output_hidden_states=True)
        assert plain.last_hidden_state.requires_grad
        for fast_layer, plain_layer in zip(fast.hidden_states, plain.hidden_states):
            torch.testing.assert_close(fast_layer.double(), plain_layer.detach(), atol=1e-5, rtol=0)
        for fast_part, plain_part in zip(fast.lstm_state, plain.lstm_state):
            torch.testing.assert_close(fast_part.double(), plain_part.detach(), atol=1e-5, rtol=0)
        fast_state, reference_state = fast.lstm_state, tuple(part.detach() for part in plain.lstm_state)


def test_gradients_flow_in_training_mode_and_match_inference(tokenizer):
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).train()
    inputs = encode(tokenizer, SENTENCES)
    outputs = model(**inputs, output_hidden_states=True)
    assert outputs.last_hidden_state.requires_grad
    sum(layer.pow(2).sum() for layer in outputs.hidden_states).backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    with torch.inference_mode():
        inference = model(**inputs).last_hidden_state
    torch.testing.assert_close(inference, outputs.last_hidden_state.detach(), atol=1e-5, rtol=0)


def test_each_distinct_word_goes_through_the_char_cnn_once(tiny_model, tokenizer):
    encoded_rows = []
    tiny_model.token_encoder.char_cnn.register_forward_hook(
        lambda module, args, output: encoded_rows.append(len(output))
    )
    with torch.inference_mode():
        tiny_model(**encode(tokenizer, SENTENCES))
    distinct = {word for words in SENTENCES for word in words}
    assert sum(encoded_rows) == len(distinct) + 2  # and <S>, </S>


def test_long_document_runs(tiny_model):
    """A 5,000-word document in one call: memory grows linearly with the words (see `test_blocks_...` below)."""
    torch.manual_seed(1)
    char_ids = torch.randint(1, 262, (1, 5000, tiny_model.config.max_characters_per_token))
    threads = torch.get_num_threads()
    # One thread: the tiny model's 5,000 steps are too small to share, and a busy machine makes sharing them slow.
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            top = tiny_model(input_ids=char_ids).last_hidden_state
    finally:
        torch.set_num_threads(threads)
    assert top.shape == (1, 5000, tiny_model.config.hidden_size)
    assert torch.isfinite(top).all() and torch.all(top.abs().sum(-1) > 0)


def test_blocks_of_words_and_of_gate_inputs_do_not_change_the_result(tiny_model, tokenizer, monkeypatch):
    """The char CNN runs on chunks of words and the input-to-gate products on blocks of rows (bounded memory for any
    length); small chunks and blocks give the result of one chunk and one block."""
    inputs = encode(tokenizer, SENTENCES)
    with torch.inference_mode():
        monkeypatch.setattr(modeling_elmo, "GATE_INPUT_BLOCK_ROWS", 3)
        monkeypatch.setattr(tiny_model.token_encoder, "chunk_size", 2)
        blocked = tiny_model(**inputs, output_hidden_states=True).hidden_states
        monkeypatch.setattr(modeling_elmo, "GATE_INPUT_BLOCK_ROWS", 10**9)
        monkeypatch.setattr(tiny_model.token_encoder, "chunk_size", 10**9)
        whole = tiny_model(**inputs, output_hidden_states=True).hidden_states
    for blocked_layer, whole_layer in zip(blocked, whole):
        torch.testing.assert_close(blocked_layer, whole_layer, atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_other_dtypes_run_close_to_float32(tiny_model, tokenizer, dtype):
    inputs = encode(tokenizer, SENTENCES)
    other = ElmoModel(tiny_config()).to(dtype).eval()
    other.load_state_dict(tiny_model.state_dict())
    with torch.inference_mode():
        expected = tiny_model(**inputs).last_hidden_state
        actual = other(**inputs, output_lstm_state=True)
    assert actual.last_hidden_state.dtype == dtype and actual.lstm_state[1].dtype == dtype
    tolerance = 0.1 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(actual.last_hidden_state.float(), expected, atol=tolerance, rtol=0)
