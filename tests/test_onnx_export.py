"""The export path: it equals the eager model, exports with dynamic batch and length (torch.export, ONNX), and the
ONNX graph run by onnxruntime equals the eager model on every layer, with lstm_state in and out."""

import shutil
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from conftest import FIXTURES, expected_top_layer, fixture_sentences, tiny_config
from safetensors.torch import load_file, save_file
from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from elmo_hf.cli import main as cli_main
from elmo_hf.conversion.onnx import ONNX_OPSET, ElmoOnnxSignature, OnnxExportError, export_onnx, export_program

# float32 agreement of the export path (eager, torch.export, onnxruntime) with the default eager path, all layers
TOLERANCE = 1e-5


def batch(shape: tuple[int, int], lengths: list[int], seed: int, left_padded: bool = False):
    """Random character ids `(batch_size, sequence_length, 50)` with rows of the given lengths, and their mask."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, 262, (*shape, 50), generator=generator)
    mask = (torch.arange(shape[1]) < torch.tensor(lengths).unsqueeze(1)).long()
    if left_padded:
        mask = mask.flip(1)
    return input_ids * mask.unsqueeze(-1), mask


def random_state(config, batch_size: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    rows = 2 * config.num_layers
    return (
        torch.randn(rows, batch_size, config.projection_dim, generator=generator),
        torch.randn(rows, batch_size, config.lstm_dim, generator=generator),
    )


def eager_outputs(model: ElmoModel, input_ids, mask, state=None) -> list[torch.Tensor]:
    """The default path's outputs in the ONNX signature's order."""
    with torch.no_grad():
        outputs = model(input_ids, mask, lstm_state=state, output_hidden_states=True, output_lstm_state=True)
    return [outputs.last_hidden_state, *outputs.hidden_states, *(outputs.lstm_state if state is not None else ())]


def max_difference(actual, expected) -> float:
    return max(float(np.abs(np.asarray(a) - np.asarray(e)).max(initial=0.0)) for a, e in zip(actual, expected))


@pytest.fixture(scope="module")
def fixture_folder(converted, tmp_path_factory):
    """A copy of the converted AllenNLP fixture checkpoint (real weights), to export into."""
    folder = tmp_path_factory.mktemp("export") / "allennlp"
    shutil.copytree(converted["allennlp"], folder)
    return folder


@pytest.fixture(scope="module")
def stateful_session(fixture_folder):
    """The fixture checkpoint exported through `elmo-hf export-onnx --lstm-state`, in onnxruntime."""
    assert cli_main(["export-onnx", "--model", str(fixture_folder), "--lstm-state"]) == 0
    return onnxruntime.InferenceSession(str(fixture_folder / "onnx" / "model.onnx"))


@pytest.mark.parametrize(
    "shape, lengths, left_padded",
    [((4, 9), [9, 3, 0, 1], False), ((3, 7), [7, 5, 2], True), ((1, 1), [1], False), ((2, 0), [0, 0], False)],
    ids=["right-padded-with-empty-sentence", "left-padded", "one-word", "only-empty-sentences"],
)
def test_export_path_in_eager_mode_equals_the_default_path(tiny_model, shape, lengths, left_padded):
    input_ids, mask = batch(shape, lengths, seed=0, left_padded=left_padded)
    state = random_state(tiny_model.config, shape[0], seed=1)
    expected = eager_outputs(tiny_model, input_ids, mask, state)
    tiny_model.config.elmo_implementation = "export"
    actual = eager_outputs(tiny_model, input_ids, mask, state)
    assert max_difference(actual, expected) <= TOLERANCE


@pytest.mark.parametrize(
    "shape, lengths, left_padded",
    [((2, 5), [5, 3], False), ((4, 9), [9, 1, 0, 6], False), ((3, 8), [8, 2, 5], True), ((1, 1), [1], False)],
    ids=["2x5", "4x9-with-empty-sentence", "left-padded", "one-word"],
)
def test_onnxruntime_equals_eager_on_every_layer_and_the_state(fixture_folder, stateful_session, shape, lengths,
                                                               left_padded):
    model = ElmoModel.from_pretrained(fixture_folder).eval()
    input_ids, mask = batch(shape, lengths, seed=sum(shape), left_padded=left_padded)
    state = random_state(model.config, shape[0], seed=3)
    feeds = dict(zip(["input_ids", "attention_mask", "lstm_state_h", "lstm_state_c"], [input_ids, mask, *state]))
    actual = stateful_session.run(None, {name: tensor.numpy() for name, tensor in feeds.items()})
    assert [output.name for output in stateful_session.get_outputs()] == [
        "last_hidden_state", "hidden_states_0", "hidden_states_1", "hidden_states_2",
        "final_lstm_state_h", "final_lstm_state_c",
    ]
    assert max_difference(actual, eager_outputs(model, input_ids, mask, state)) <= TOLERANCE


def test_onnxruntime_reproduces_the_original_statefully(fixture_folder, stateful_session):
    """The fixture's 10 batches of 3 sentences, the state threaded through the graph, against the original's outputs
    with the original's own criterion."""
    tokenizer = ElmoTokenizer.from_pretrained(fixture_folder)
    sentences = fixture_sentences("allennlp")
    config = ElmoModel.config_class.from_pretrained(fixture_folder)
    hidden = np.zeros((2 * config.num_layers, 3, config.projection_dim), np.float32)
    cell = np.zeros((2 * config.num_layers, 3, config.lstm_dim), np.float32)
    for index in range(10):
        batch_sentences = [sentences[row][index] for row in range(3)]
        inputs = tokenizer(batch_sentences, is_split_into_words=True, padding=True, return_tensors="np")
        feeds = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
        top, *_, hidden, cell = stateful_session.run(None, {**feeds, "lstm_state_h": hidden, "lstm_state_c": cell})
        for row, sentence in enumerate(batch_sentences):
            expected = expected_top_layer("allennlp", row, index)
            np.testing.assert_allclose(top[row, : len(sentence)], expected, atol=1e-6, rtol=1e-5)


def test_onnx_graph_has_dynamic_axes_scan_loops_and_the_stated_opset(fixture_folder, stateful_session):
    import onnx

    graph = onnx.load(str(fixture_folder / "onnx" / "model.onnx"))
    assert {opset.version for opset in graph.opset_import if opset.domain in ("", "ai.onnx")} == {ONNX_OPSET}
    # 2 layers x 2 directions, each an explicit loop body (ONNX's LSTM op has no projection or cell clip)
    assert [node.op_type for node in graph.graph.node].count("Scan") == 4
    input_ids = stateful_session.get_inputs()[0]
    assert isinstance(input_ids.shape[0], str) and isinstance(input_ids.shape[1], str) and input_ids.shape[2] == 50


def test_export_path_of_a_head_with_a_task_bilstm_equals_the_default_path():
    torch.manual_seed(0)
    head = ElmoForTokenClassification(tiny_config(num_labels=3, task_lstm_dim=5, task_lstm_layers=2)).eval()
    input_ids, mask = batch((3, 6), [6, 0, 2], seed=4, left_padded=True)
    with torch.no_grad():
        expected = head(input_ids, attention_mask=mask).logits
        head.config.elmo_implementation = "export"
        assert max_difference([head(input_ids, attention_mask=mask).logits], [expected]) <= TOLERANCE


@pytest.mark.parametrize("task_lstm", [False, True], ids=["linear", "task-bilstm"])
def test_exported_token_classification_head_predicts_as_eager(tmp_path, task_lstm):
    torch.manual_seed(0)
    task_fields = dict(task_lstm_dim=5, concatenate_elmo_to_task_output=True) if task_lstm else {}
    head = ElmoForTokenClassification(tiny_config(num_labels=5, **task_fields)).eval()
    head.save_pretrained(tmp_path)
    path, difference = export_onnx(tmp_path)
    assert difference <= TOLERANCE
    session = onnxruntime.InferenceSession(str(path))
    assert [output.name for output in session.get_outputs()] == ["logits"]
    for shape, lengths, left_padded in (((3, 6), [6, 0, 2], False), ((2, 4), [1, 4], True)):
        input_ids, mask = batch(shape, lengths, seed=7, left_padded=left_padded)
        (logits,) = session.run(None, {"input_ids": input_ids.numpy(), "attention_mask": mask.numpy()})
        with torch.no_grad():
            expected = head(input_ids, attention_mask=mask).logits
        assert max_difference([logits], [expected]) <= TOLERANCE
        words = mask.bool().numpy()
        assert (logits.argmax(-1)[words] == expected.argmax(-1).numpy()[words]).all()


@pytest.mark.parametrize(
    "model_class, task_lstm_dim",
    [(ElmoModel, None), (ElmoForTokenClassification, None), (ElmoForSequenceClassification, 4)],
)
def test_torch_export_has_dynamic_batch_and_length(model_class, task_lstm_dim):
    torch.manual_seed(0)
    model = model_class(tiny_config(num_labels=3, task_lstm_dim=task_lstm_dim)).eval()
    program = export_program(model)
    signature = ElmoOnnxSignature(model)
    exported = program.module()
    for shape, lengths in (((1, 1), [1]), ((5, 11), [11, 4, 0, 7, 1])):
        input_ids, mask = batch(shape, lengths, seed=5)
        with torch.no_grad():
            assert max_difference(exported(input_ids, mask), signature(input_ids, mask)) <= TOLERANCE


def test_torch_compile_fullgraph_on_the_export_path():
    torch.manual_seed(0)
    model = ElmoModel(tiny_config(elmo_implementation="export")).eval()
    # fullgraph=True fails on any graph break; dynamic=True: one graph for every batch size and length
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend="eager")
    for shape, lengths in (((2, 6), [6, 3]), ((3, 9), [2, 9, 0])):
        input_ids, mask = batch(shape, lengths, seed=11)
        state = random_state(model.config, shape[0], seed=12)
        with torch.no_grad():
            actual = compiled(input_ids, mask, lstm_state=state, output_hidden_states=True, output_lstm_state=True)
        model.config.elmo_implementation = "auto"
        expected = eager_outputs(model, input_ids, mask, state)
        model.config.elmo_implementation = "export"
        outputs = [actual.last_hidden_state, *actual.hidden_states, *actual.lstm_state]
        assert max_difference(outputs, expected) <= TOLERANCE


def test_export_path_in_eager_mode_still_checks_values(tiny_model):
    tiny_model.config.elmo_implementation = "export"
    input_ids, mask = batch((1, 2), [2], seed=0)
    with pytest.raises(ValueError, match="character ids outside"):
        tiny_model(input_ids * 0 + 262, mask)


def test_export_onnx_refuses_bad_folders_and_existing_output_without_writing(tmp_path, tiny_model):
    with pytest.raises(OnnxExportError, match="is neither a folder holding a config.json nor the name of a model"):
        export_onnx(tmp_path)
    tiny_model.save_pretrained(tmp_path)
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "model.onnx").write_bytes(b"keep me")
    with pytest.raises(OnnxExportError, match="--overwrite"):
        export_onnx(tmp_path)
    assert (tmp_path / "onnx" / "model.onnx").read_bytes() == b"keep me"
    with pytest.raises(OnnxExportError, match="lstm_state inputs and outputs exist for the base model"):
        ElmoOnnxSignature(ElmoForTokenClassification(tiny_model.config), lstm_state=True)


def test_tracing_is_refused_since_a_trace_would_fix_the_sentence_lengths(tiny_model):
    input_ids, mask = batch((2, 3), [3, 1], seed=0)
    with pytest.raises(RuntimeError, match="cannot be traced"):
        torch.jit.trace(tiny_model, (input_ids, mask), strict=False)


def _with_bias(model):
    """`model` with a non-zero classifier bias, which the logits of a text without words must equal."""
    if hasattr(model, "classifier"):
        with torch.no_grad():
            model.classifier.bias.copy_(torch.arange(model.classifier.bias.shape[0]) - 1.5)
    return model.eval()


HEADS = {
    "sequence-classification": lambda: ElmoForSequenceClassification(tiny_config(num_labels=3)),
    "sequence-classification-task-bilstm": lambda: ElmoForSequenceClassification(
        tiny_config(num_labels=3, task_lstm_dim=5)),
    "token-classification-task-bilstm": lambda: ElmoForTokenClassification(
        tiny_config(num_labels=3, task_lstm_dim=5, concatenate_elmo_to_task_output=True)),
    "base-model": lambda: ElmoModel(tiny_config()),
}


@pytest.mark.parametrize("name", HEADS)
def test_onnx_signature_padding_word_changes_no_output(name):
    """The graph's signature appends one padding word (onnxruntime's Scan cannot run zero steps): by the model's own
    padding rule it changes no output, whatever the padding: the signature on either path (eager) equals the model on
    its default path on the inputs as they are."""
    torch.manual_seed(0)
    model = _with_bias(HEADS[name]())
    signature = ElmoOnnxSignature(model, lstm_state=isinstance(model, ElmoModel))
    padding = (((3, 6), [6, 0, 2], False), ((3, 5), [5, 1, 3], True), ((2, 0), [0, 0], False))
    for shape, lengths, left_padded in padding:
        inputs = batch(shape, lengths, seed=21, left_padded=left_padded)
        state = random_state(model.config, shape[0], seed=22) if signature.lstm_state else ()
        model.config.elmo_implementation = "auto"
        with torch.no_grad():
            plain = signature.model_outputs(*inputs, *state)
        for implementation in ("auto", "export"):
            model.config.elmo_implementation = implementation
            with torch.no_grad():
                padded = signature(*inputs, *state)
            assert [tensor.shape for tensor in padded] == [tensor.shape for tensor in plain]
            assert max_difference(padded, plain) <= TOLERANCE


@pytest.mark.parametrize("name", HEADS)
def test_onnx_graph_on_texts_without_words_equals_eager(tmp_path, name):
    """Issue 23 item 9: a batch of only texts without words gives the eager model's outputs (for a sequence head the
    classifier's bias, the documented zero-word rule), not NaN, and a task biLSTM runs in onnxruntime's Scan."""
    torch.manual_seed(0)
    model = _with_bias(HEADS[name]())
    model.save_pretrained(tmp_path)
    path, _ = export_onnx(tmp_path, lstm_state=isinstance(model, ElmoModel))
    session = onnxruntime.InferenceSession(str(path))
    for shape, lengths in (((2, 0), [0, 0]), ((3, 4), [0, 4, 0])):
        input_ids, mask = batch(shape, lengths, seed=5)
        state = random_state(model.config, shape[0], seed=6) if isinstance(model, ElmoModel) else ()
        feeds = dict(zip([item.name for item in session.get_inputs()], [input_ids, mask, *state]))
        actual = session.run(None, {key: value.numpy() for key, value in feeds.items()})
        with torch.no_grad():
            expected = ElmoOnnxSignature(model, bool(state)).model_outputs(input_ids, mask, *state)
        assert all(np.isfinite(output).all() for output in actual)
        assert [output.shape for output in actual] == [tuple(output.shape) for output in expected]
        assert max_difference(actual, expected) <= TOLERANCE
    if isinstance(model, ElmoForSequenceClassification):
        bias = model.classifier.bias.detach().expand(2, -1).numpy()
        np.testing.assert_allclose(actual[0][[0, 2]], bias, atol=1e-6)


def test_export_onnx_of_a_converted_manylangs_folder(tmp_path):
    """Issue 23 item 9: a dictionary model's rows hold the word id after the characters (`row_width` ids)."""
    from elmo_hf.conversion.manylangs import convert_manylangs

    folder = convert_manylangs(FIXTURES / "manylangs" / "model", tmp_path / "zh", language="zh")
    path, difference = export_onnx(folder)
    assert difference <= TOLERANCE
    tokenizer, model = ElmoTokenizer.from_pretrained(folder), ElmoModel.from_pretrained(folder).eval()
    sentences = [["潮水", "退", "了"], ["好"], []]
    inputs = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    session = onnxruntime.InferenceSession(str(path))
    assert session.get_inputs()[0].shape[2] == model.config.row_width == model.config.max_characters_per_token + 1
    actual = session.run(None, {name: inputs[name].numpy() for name in ("input_ids", "attention_mask")})
    assert max_difference(actual, eager_outputs(model, inputs["input_ids"], inputs["attention_mask"])) <= TOLERANCE


def test_export_onnx_takes_a_packaged_model_name_but_writes_only_to_output(tmp_path, capsys):
    """Issue 26 item 1: `--model elmo-en-mini` works offline; its folder is inside the installed package, so the
    graph goes to `--output`, and without it the command says so and writes nothing. It is a pretraining folder
    (biLM and softmax): the graph is its biLM's, whose first output is `last_hidden_state`."""
    from elmo_hf.packaged_elmo import packaged_model_path

    before = sorted(path.name for path in Path(packaged_model_path()).iterdir())
    assert cli_main(["export-onnx", "--model", "elmo-en-mini"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: elmo-en-mini is a model packaged with elmo-hf") and "pass --output" in err
    assert cli_main(["export-onnx", "--model", "elmo-en-mini", "--output", str(tmp_path / "mini")]) == 0
    assert (tmp_path / "mini" / "model.onnx").is_file()
    assert sorted(path.name for path in Path(packaged_model_path()).iterdir()) == before
    import onnx

    outputs = onnx.load(str(tmp_path / "mini" / "model.onnx")).graph.output
    assert [output.name for output in outputs][:1] == ["last_hidden_state"], [output.name for output in outputs]


def test_export_onnx_unusable_places_give_one_error_line(tmp_path, read_only_folder, capsys):
    """Issue 23 items 12 and 13: an `onnx` file where the folder goes, an --output under a file, a damaged config,
    or the positional form without a model: exit 2; a read-only --output: exit 1; one `error:` line each, no
    traceback, nothing written."""
    model = tmp_path / "model"
    ElmoModel(tiny_config()).save_pretrained(model)
    (model / "onnx").write_text("a file")
    (tmp_path / "file").write_text("")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "config.json").write_text('{"num_layers": 0}')
    incomplete = tmp_path / "incomplete"
    ElmoModel(tiny_config()).save_pretrained(incomplete)
    tensors = load_file(incomplete / "model.safetensors")
    del tensors["token_encoder.projection.weight"]
    save_file(tensors, incomplete / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()
    for arguments, status, message in (
        (["--model", str(model)], 2, f"--output {model / 'onnx'} is a file; give a folder path."),
        (["--model", str(model), "--output", str(tmp_path / "file" / "x")], 2, "which is a file"),
        (["--model", str(damaged)], 2, "cannot be loaded (ElmoConfig.num_layers must be a positive"),
        ([str(tmp_path / "none")], 2, "is neither a folder holding a config.json"),
        (["--model", str(incomplete)], 2, "its weights lack token_encoder.projection.weight;"),
        (["--model", str(model), "--task", "token-classification", "--output", str(tmp_path / "head")], 2,
         "its weights lack classifier.*, scalar_mix.*;"),
        (["--model", str(model), "--output", str(read_only_folder / "onnx")], 1, "Permission denied"),
    ):
        assert cli_main(["export-onnx", *arguments]) == status, arguments
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.splitlines()) == 1 and message in err, err
    assert (model / "onnx").read_text() == "a file" and list(read_only_folder.iterdir()) == []
