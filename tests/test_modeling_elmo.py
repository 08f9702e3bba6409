"""ElmoModel: shapes, padding, statefulness, gradients, save/load, and every bad input."""

import math

import pytest
import torch
from conftest import encode, tiny_config
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from elmo_hf import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoScalarMix,
    modeling_elmo,
)
from elmo_hf.modeling_elmo import ElmoLstmCellWithProjection
from elmo_hf.reference_elmo import SequenceBatch

SENTENCES = [["The", "cat", "sat", "."], ["Dogs", "bark"], ["Über", "naïve", "café", "😀", "x", "y"]]


def test_output_shapes_and_padding_zeros(tiny_model, tokenizer):
    inputs = encode(tokenizer, SENTENCES)
    with torch.no_grad():
        outputs = tiny_model(**inputs, output_hidden_states=True)
    width = tiny_model.config.hidden_size
    assert outputs.last_hidden_state.shape == (3, 6, width)
    assert len(outputs.hidden_states) == tiny_model.config.num_layers + 1
    assert all(layer.shape == (3, 6, width) for layer in outputs.hidden_states)
    assert outputs.lstm_state is None
    token_layer = outputs.hidden_states[0]
    half = tiny_model.config.projection_dim
    torch.testing.assert_close(token_layer[..., :half], token_layer[..., half:])
    assert torch.equal(outputs.hidden_states[-1], outputs.last_hidden_state)
    for row, words in enumerate(SENTENCES):
        assert all(torch.all(layer[row, len(words) :] == 0) for layer in outputs.hidden_states)
        assert torch.all(outputs.last_hidden_state[row, : len(words)].abs().sum(-1) > 0)


def test_return_tuple(tiny_model, tokenizer):
    inputs = encode(tokenizer, SENTENCES[:1])
    with torch.no_grad():
        as_tuple = tiny_model(**inputs, return_dict=False)
        as_output = tiny_model(**inputs)
    assert isinstance(as_tuple, tuple)
    assert torch.equal(as_tuple[0], as_output.last_hidden_state)


def test_mask_derived_from_ids_equals_given_mask(tiny_model, tokenizer):
    inputs = encode(tokenizer, SENTENCES)
    with torch.no_grad():
        with_mask = tiny_model(**inputs).last_hidden_state
        without_mask = tiny_model(input_ids=inputs["input_ids"]).last_hidden_state
    assert torch.equal(with_mask, without_mask)


def test_left_padding_gives_the_same_vectors(tiny_model, tokenizer):
    right = encode(tokenizer, SENTENCES)
    left = encode(tokenizer, SENTENCES, padding_side="left")
    with torch.no_grad():
        right_out = tiny_model(**right, output_hidden_states=True).hidden_states
        left_out = tiny_model(**left, output_hidden_states=True).hidden_states
    for row, words in enumerate(SENTENCES):
        for right_layer, left_layer in zip(right_out, left_out):
            torch.testing.assert_close(left_layer[row, -len(words) :], right_layer[row, : len(words)])
            assert torch.all(left_layer[row, : 6 - len(words)] == 0)


class MixedDevices(TorchDispatchMode):
    """Records every op given tensors on more than one device (0-dim ones aside): an index left on the host that
    torch would copy to the device itself, waiting for it."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor) and leaf.dim()]
        if len({tensor.device for tensor in tensors}) > 1:
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("implementation", ["auto", "export"])
def test_ids_on_the_host_are_read_there_and_the_model_computes_on_its_own_device(tokenizer, implementation):
    """A model on another device (here `meta`, which holds no values: any read of the data there would fail) given
    the tokenizer's CPU tensors, left padding and a hole included: every check and layout is computed on the host, the
    device gets its inputs and indices moved explicitly (no op mixes devices), and the outputs come out with the
    shapes of the same model on the host, on the model's device."""
    inputs = encode(tokenizer, SENTENCES, padding_side="left")
    inputs["attention_mask"][0, -2] = 0
    config = tiny_config(elmo_implementation=implementation)
    torch.manual_seed(0)
    on_host = ElmoModel(config).eval()
    elsewhere = ElmoModel(config).eval().to("meta")
    state = tuple(torch.zeros(4, len(SENTENCES) + 1, dim) for dim in (8, 16))
    with torch.no_grad():
        expected = on_host(**inputs, lstm_state=state, output_hidden_states=True, output_lstm_state=True)
        with MixedDevices() as mixed:
            meta_state = tuple(tensor.to("meta") for tensor in state)
            outputs = elsewhere(**inputs, lstm_state=meta_state, output_hidden_states=True, output_lstm_state=True)
    assert mixed.ops == []
    got_all, want_all = (*outputs.hidden_states, *outputs.lstm_state), (*expected.hidden_states, *expected.lstm_state)
    for got, want in zip(got_all, want_all):
        assert got.device.type == "meta" and got.shape == want.shape and got.dtype == want.dtype


@pytest.mark.parametrize("head, implementation, task_lstm_dim", [
    (ElmoForTokenClassification, "auto", None), (ElmoForTokenClassification, "export", 4),
    (ElmoForSequenceClassification, "auto", None), (ElmoForSequenceClassification, "export", 4),
    (ElmoForPreTraining, "auto", None),
])
def test_heads_read_ids_on_the_host_and_compute_on_their_own_device(tokenizer, head, implementation, task_lstm_dim):
    """As `ElmoModel`, the heads (task heads, with a task biLSTM on the export path; pretraining) on another device
    (`meta`: no values to read) take the tokenizer's CPU tensors: no op mixes devices, and the outputs have the host
    model's shapes, on the model's device. Not run here, for reads `meta` cannot serve: labels (checked where the
    ids or the logits are, then moved to the logits), the packed task biLSTM (torch's `pad_packed_sequence`) and
    pretraining on the export path (its check that the rows are right-padded reads the mask on the model's
    device)."""
    inputs = encode(tokenizer, SENTENCES, padding_side="left" if head is not ElmoForPreTraining else "right")
    config = tiny_config(
        elmo_implementation=implementation, num_labels=3, word_vocab_size=11, task_lstm_dim=task_lstm_dim
    )
    torch.manual_seed(0)
    on_host = head(config).eval()
    elsewhere = head(config).eval().to("meta")
    with torch.no_grad():
        expected = on_host(**inputs, output_hidden_states=True)
        with MixedDevices() as mixed:
            outputs = elsewhere(**inputs, output_hidden_states=True)
    assert mixed.ops == []
    for got, want in zip(outputs.to_tuple(), expected.to_tuple()):
        got, want = (value if isinstance(value, tuple) else (value,) for value in (got, want))
        for got_tensor, want_tensor in zip(got, want):
            assert got_tensor.device.type == "meta" and got_tensor.shape == want_tensor.shape


def test_empty_sentences_give_zero_rows(tiny_model, tokenizer):
    with torch.no_grad():
        empty = tiny_model(**tokenizer("", return_tensors="pt"))
        mixed = tiny_model(**encode(tokenizer, [[], ["a", "b"]]))
    assert empty.last_hidden_state.shape == (1, 0, tiny_model.config.hidden_size)
    assert torch.all(mixed.last_hidden_state[0] == 0)


def test_stateful_rows_carry_row_by_row(tiny_model, tokenizer):
    first = encode(tokenizer, SENTENCES)
    second = encode(tokenizer, [["again"], ["and", "again"]])
    with torch.no_grad():
        state = tiny_model(**first, output_lstm_state=True).lstm_state
        assert state[0].shape == (4, 3, tiny_model.config.projection_dim)
        assert state[1].shape == (4, 3, tiny_model.config.lstm_dim)
        carried = tiny_model(**second, lstm_state=state, output_lstm_state=True)
        # Row i continues from row i: the same as running row i alone from its own state.
        for row in range(2):
            alone = tiny_model(
                input_ids=second["input_ids"][row : row + 1],
                lstm_state=tuple(part[:, row : row + 1] for part in state),
            )
            words = int(second["attention_mask"][row].sum())
            torch.testing.assert_close(
                carried.last_hidden_state[row, :words], alone.last_hidden_state[0, :words], atol=1e-6, rtol=0
            )
        stateless = tiny_model(**second).last_hidden_state
    assert not torch.allclose(carried.last_hidden_state, stateless)
    # Rows beyond the smaller batch pass through unchanged, as in the original.
    assert carried.lstm_state[0].shape[1] == 3
    assert torch.equal(carried.lstm_state[0][:, 2], state[0][:, 2])
    assert torch.equal(carried.lstm_state[1][:, 2], state[1][:, 2])
    # The caller's state is not modified in place.
    assert not torch.equal(carried.lstm_state[0][:, 0], state[0][:, 0])


def test_missing_state_rows_start_from_zeros(tiny_model, tokenizer):
    one = encode(tokenizer, SENTENCES[:1])
    three = encode(tokenizer, SENTENCES)
    with torch.no_grad():
        state = tiny_model(**one, output_lstm_state=True).lstm_state
        carried = tiny_model(**three, lstm_state=state).last_hidden_state
        fresh = tiny_model(**three).last_hidden_state
    torch.testing.assert_close(carried[1:], fresh[1:])
    assert not torch.allclose(carried[0], fresh[0])


def test_zero_state_equals_stateless(tiny_model, tokenizer):
    inputs = encode(tokenizer, SENTENCES)
    zeros = (torch.zeros(4, 3, 8), torch.zeros(4, 3, 16))
    with torch.no_grad():
        with_zeros = tiny_model(**inputs, lstm_state=zeros).last_hidden_state
        assert torch.equal(with_zeros, tiny_model(**inputs).last_hidden_state)


@pytest.mark.parametrize("implementation", ["eager", "auto"])
def test_without_the_final_state_each_direction_skips_the_far_boundary(
    tiny_model, tokenizer, implementation, monkeypatch
):
    """A sentence of n words runs n + 1 steps per direction unless the final state is asked for (n + 2 then): the
    step at the far boundary (`</S>` forward, `<S>` backward) makes only that boundary's output and the final
    state. The layers `forward` returns are the same either way: bit for bit on the CPU kernels, whose rows do not
    depend on the rows beside them; within float32 rounding on the reference modules, whose products of fewer rows
    may sum in another order."""
    tiny_model.config.elmo_implementation = implementation
    batches = []

    class RecordedBatch(modeling_elmo.SequenceBatch):
        def __init__(self, *args):
            super().__init__(*args)
            batches.append(self)

    monkeypatch.setattr(modeling_elmo, "SequenceBatch", RecordedBatch)
    inputs = encode(tokenizer, SENTENCES)
    words, rows = int(inputs["attention_mask"].sum()), len(SENTENCES)
    with torch.inference_mode():
        skipped = tiny_model(**inputs, output_hidden_states=True)
        full = tiny_model(**inputs, output_hidden_states=True, output_lstm_state=True)
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        boundaries, state = tiny_model.boundary_layers(ids, mask, final_steps=False)
        every, _ = tiny_model.boundary_layers(ids, mask)
    assert [sum(batch.batch_sizes) for batch in batches] == [words + rows, words + 2 * rows] * 2
    assert skipped.lstm_state is None and state is None
    for layer, expected in zip(skipped.hidden_states, full.hidden_states, strict=True):
        if implementation == "auto":
            assert torch.equal(layer, expected)
        else:
            torch.testing.assert_close(layer, expected, rtol=1e-6, atol=1e-6)
    # In the boundary layers, the skipped steps' outputs are zero: forward halves at </S>, backward halves at <S>.
    dim, ends = tiny_model.config.projection_dim, mask.sum(1) + 1
    forward_kept = torch.ones(rows, ids.shape[1] + 2, dtype=torch.bool)
    forward_kept[torch.arange(rows), ends] = False
    for layer, expected in zip(boundaries[1:], every[1:], strict=True):
        assert not layer[torch.arange(rows), ends, :dim].any() and not layer[:, 0, dim:].any()
        torch.testing.assert_close(
            layer[..., :dim][forward_kept], expected[..., :dim][forward_kept], rtol=1e-6, atol=1e-6
        )
        torch.testing.assert_close(layer[:, 1:, dim:], expected[:, 1:, dim:], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("implementation", ["eager", "auto"])
def test_lstm_cell_scan_matches_a_plain_cell(implementation):
    """The scan over a packed, length-sorted batch against a step-by-step loop per row, on both paths."""
    torch.manual_seed(0)
    config = tiny_config(projection_dim=3, lstm_dim=5, cell_clip=0.5, projection_clip=0.7)
    config.elmo_implementation = implementation
    cell_module = ElmoLstmCellWithProjection(config)
    lengths, batch_sizes = [4, 2, 1], [3, 2, 1, 1]
    inputs = [torch.randn(length, 3) for length in lengths]
    # Packed time-major: step t holds the rows still running at t.
    packed = torch.stack([inputs[row][step] for step, active in enumerate(batch_sizes) for row in range(active)])
    initial = (torch.randn(3, 3), torch.randn(3, 5))
    with torch.no_grad():
        batch = SequenceBatch(torch.tensor(lengths), steps=4, packed=True)
        assert batch.batch_sizes == batch_sizes
        outputs, (hidden, cell) = cell_module(packed, batch, initial)
    input_weight, projection = cell_module.input_to_gates.weight.detach(), cell_module.projection.weight.detach()
    weight, bias = cell_module.hidden_to_gates.weight.detach(), cell_module.hidden_to_gates.bias.detach()
    positions = [[sum(batch_sizes[:step]) + row for step in range(length)] for row, length in enumerate(lengths)]
    for row, length in enumerate(lengths):
        h, c = initial[0][row], initial[1][row]
        for step in range(length):
            i, f, g, o = (input_weight @ inputs[row][step] + weight @ h + bias).chunk(4)
            c = (torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)).clamp(-0.5, 0.5)
            h = (projection @ (torch.sigmoid(o) * torch.tanh(c))).clamp(-0.7, 0.7)
            torch.testing.assert_close(outputs[positions[row][step]], h)
        torch.testing.assert_close(hidden[row], h)
        torch.testing.assert_close(cell[row], c)


def test_skip_connections_and_clips_follow_the_config(tokenizer):
    inputs = encode(tokenizer, SENTENCES)
    outputs = {}
    for skip in (True, False):
        torch.manual_seed(0)
        model = ElmoModel(tiny_config(use_skip_connections=skip, cell_clip=None, projection_clip=0.01)).eval()
        with torch.no_grad():
            outputs[skip] = model(**inputs, output_hidden_states=True).hidden_states
    assert outputs[False][2].abs().max() <= 0.01 + 1e-7
    # With the residual, layer 2 = its clipped LSTM output + layer 1.
    assert (outputs[True][2] - outputs[True][1]).abs().max() <= 0.01 + 1e-6
    torch.testing.assert_close(outputs[True][1], outputs[False][1])


def test_gradients_reach_every_parameter(tokenizer):
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).train()
    outputs = model(**encode(tokenizer, SENTENCES), output_hidden_states=True)
    sum(layer.pow(2).sum() for layer in outputs.hidden_states).backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_fresh_model_initialisation():
    model = ElmoModel(tiny_config())
    assert torch.all(model.token_encoder.char_embeddings.weight[0] == 0)
    assert model.token_encoder.char_embeddings.weight[1:].std() > 0


def test_save_and_load_round_trip(tiny_model, tokenizer, tmp_path):
    from transformers import AutoModel

    tiny_model.save_pretrained(tmp_path)
    reloaded = AutoModel.from_pretrained(tmp_path).eval()
    assert type(reloaded) is ElmoModel
    inputs = encode(tokenizer, SENTENCES)
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).last_hidden_state, tiny_model(**inputs).last_hidden_state)
    assert reloaded.config.filters == tiny_model.config.filters


def test_loaded_weights_lie_aligned_and_compute_the_saved_models_bits(tiny_model, tokenizer, tmp_path):
    """safetensors maps tensors at any offset of the file, and MKL picks its code paths by alignment: a loaded
    model's tensors are moved to aligned memory (`align_in_memory`), so its reference modules compute the bits of the
    model it was saved from (before, a reloaded PEFT adapter predicted 1 ulp away from the trained one)."""
    tiny_model.save_pretrained(tmp_path)
    reloaded, info = ElmoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"]
    tensors = [*reloaded.parameters(), *reloaded.buffers()]
    assert all(tensor.data_ptr() % modeling_elmo.MEMORY_ALIGNMENT == 0 for tensor in tensors)
    # A tensor at an odd offset, as a memory map hands them out, is moved: same values, same parameter object.
    linear = nn.Linear(3, 2)
    weight = linear.weight
    weight.data = torch.arange(7.0)[1:].view(2, 3)
    assert weight.data_ptr() % modeling_elmo.MEMORY_ALIGNMENT
    modeling_elmo.align_in_memory(linear)
    assert linear.weight is weight and weight.data_ptr() % modeling_elmo.MEMORY_ALIGNMENT == 0
    assert torch.equal(weight, torch.arange(1.0, 7.0).view(2, 3))
    for model in (tiny_model, reloaded):
        model.config.elmo_implementation = "eager"
    inputs = encode(tokenizer, SENTENCES)
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).last_hidden_state, tiny_model(**inputs).last_hidden_state)


@pytest.mark.parametrize(
    ("make_inputs", "error", "message"),
    [
        (lambda ids, mask: dict(input_ids=ids.tolist()), TypeError, "must be a torch.Tensor"),
        (lambda ids, mask: dict(input_ids=ids.float()), TypeError, "integer character ids"),
        (lambda ids, mask: dict(input_ids=ids[0]), ValueError, "must have shape"),
        (lambda ids, mask: dict(input_ids=ids[..., :20]), ValueError, "max_characters_per_token=50"),
        (lambda ids, mask: dict(input_ids=ids + 300), ValueError, "outside 0..261"),
        (lambda ids, mask: dict(input_ids=ids - 5), ValueError, "outside 0..261"),
        (lambda ids, mask: dict(input_ids=ids, attention_mask=mask[:, :2]), ValueError, "attention_mask must have"),
        (lambda ids, mask: dict(input_ids=ids, attention_mask=torch.ones_like(mask)), ValueError, "padding row"),
        (lambda ids, mask: dict(input_ids=ids[:0]), ValueError, "empty batch"),
        (lambda ids, mask: dict(input_ids=ids.to("meta")), ValueError, "input_ids are on meta but the model on cpu"),
        (
            lambda ids, mask: dict(input_ids=ids, attention_mask=mask.to("meta")),
            ValueError,
            "attention_mask is on meta but input_ids on cpu",
        ),
        (lambda ids, mask: dict(), ValueError, "needs input_ids"),
        (lambda ids, mask: dict(input_ids=ids, lstm_state=torch.zeros(3)), TypeError, "lstm_state"),
        (
            lambda ids, mask: dict(input_ids=ids, lstm_state=(torch.zeros(4, 3, 8), torch.zeros(4, 3, 9))),
            ValueError,
            r"lstm_state c must have shape \(4, batch_size, 16\)",
        ),
    ],
)
def test_bad_inputs_raise_clear_errors(tiny_model, tokenizer, make_inputs, error, message):
    inputs = encode(tokenizer, SENTENCES)
    with pytest.raises(error, match=message):
        tiny_model(**make_inputs(inputs["input_ids"], inputs["attention_mask"]))


@pytest.mark.parametrize("implementation", ["auto", "eager"])
def test_token_encoder_takes_input_ids_of_any_leading_shape(tiny_model, tokenizer, implementation):
    """The token layer alone maps each row of ids to its vector, whatever the leading dimensions (a batch's
    `input_ids` as the tokenizer returns them, words in rows, no words), and names the expected shape otherwise."""
    tiny_model.config.elmo_implementation = implementation
    input_ids = encode(tokenizer, SENTENCES)["input_ids"]
    with torch.no_grad():
        batched = tiny_model.token_encoder(input_ids)
        rows = tiny_model.token_encoder(input_ids.reshape(-1, input_ids.shape[-1]))
        single = tiny_model.token_encoder(input_ids[0, 0])
    assert batched.shape == (*input_ids.shape[:2], tiny_model.config.projection_dim)
    assert torch.equal(batched.reshape(rows.shape), rows)
    torch.testing.assert_close(single, rows[0])  # alone: a product of another row count
    no_words = tiny_model.token_encoder(input_ids[:0])
    assert no_words.shape == (0, input_ids.shape[1], tiny_model.config.projection_dim)
    for bad in (input_ids[..., :20], torch.tensor(3)):
        with pytest.raises(ValueError, match=r"rows of 50 ids per word \(shape \(\.\.\., 50\)"):
            tiny_model.token_encoder(bad)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("activation", "gelu", "activation must be one of"),
        ("projection_dim", 0, "projection_dim must be a positive integer"),
        ("filters", [[60, 4]], "wider than max_characters_per_token"),
        ("filters", [[2]], r"\[width, num_filters\]"),
        ("cell_clip", -1.0, "cell_clip must be positive or None"),
        ("max_characters_per_token", 2, "at least 3"),
        ("lstm_dim", "big", "lstm_dim"),
    ],
)
def test_config_validation_names_the_field(field, value, message):
    with pytest.raises(Exception, match=message):
        ElmoConfig(**{field: value})


def test_config_hidden_size_and_aliases():
    config = ElmoConfig()
    assert config.hidden_size == 1024 and config.num_filters == 2048
    assert config.vocab_size == 262 and config.num_hidden_layers == 2


def test_arguments_a_model_does_not_read_are_refused_not_dropped(tiny_model, tokenizer):
    """`**kwargs` dropped them silently: a head given a previous call's `lstm_state` ran from zero states, and
    `inputs_embeds` beside `input_ids` were never read."""
    inputs = encode(tokenizer, SENTENCES)
    with torch.no_grad():
        state = tiny_model(**inputs, output_lstm_state=True).lstm_state
    embeddings = torch.zeros(3, 6, tiny_model.config.projection_dim)
    with pytest.raises(TypeError, match="ElmoModel does not take inputs_embeds: .* pass input_ids"):
        tiny_model(**inputs, inputs_embeds=embeddings)
    torch.manual_seed(0)
    models = [
        ElmoForTokenClassification(tiny_config(num_labels=2)),
        ElmoForSequenceClassification(tiny_config(num_labels=2)),
        ElmoForPreTraining(tiny_config(word_vocab_size=5)),
    ]
    for model in models:
        arguments = (
            ("lstm_state", state), ("output_lstm_state", True), ("inputs_embeds", embeddings),
            ("label", torch.zeros(3, dtype=torch.long)), ("label_ids", torch.zeros(3, dtype=torch.long)),
        )
        for name, value in arguments:
            with pytest.raises(TypeError, match=f"{type(model).__name__} does not take {name}"):
                model(**inputs, **{name: value})
        model(**inputs, lstm_state=None, output_lstm_state=False)  # the defaults say nothing


def test_scalar_mix_arguments_that_would_mix_wrongly_are_refused(tiny_model, tokenizer):
    """A NaN or +inf fixed weight made every mixed vector NaN, a negative `l2_coefficient` rewarded uneven weights,
    `top_layer(0)` built a one-layer mix and `average(0)` divided by zero, and a mask given as a list failed inside
    the check; the config refuses the same values for the heads' mixes."""
    for weights in ([0.0, math.nan, 1.0], [0.0, math.inf, 1.0], [-math.inf] * 3):
        with pytest.raises(ValueError, match="fixed_weights must be pre-softmax numbers"):
            ElmoScalarMix(3, fixed_weights=weights)
    for coefficient in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="l2_coefficient must be a finite number >= 0"):
            ElmoScalarMix(3, l2_coefficient=coefficient)
    for build in (ElmoScalarMix.top_layer, ElmoScalarMix.average):
        with pytest.raises(ValueError, match="needs at least one layer to mix, got num_representations=0"):
            build(0)
    inputs = encode(tokenizer, SENTENCES)
    with torch.no_grad():
        layers = tiny_model(**inputs, output_hidden_states=True).hidden_states
    with pytest.raises(TypeError, match="mask must be a torch.Tensor, got list"):
        ElmoScalarMix(3)(layers, inputs["attention_mask"].tolist())
    dropped = ElmoScalarMix.from_weights([0.0, 0.0, 1.0])  # -inf pre-softmax weights drop layers
    torch.testing.assert_close(dropped(layers), layers[-1], atol=0, rtol=0)
