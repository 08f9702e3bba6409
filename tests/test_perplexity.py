"""`elmo-hf perplexity`: the numbers equal exp of the mean NLL computed independently; bad input is a clear error."""

import json
import os
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

from elmo_hf import ElmoForPreTraining, ElmoModel
from elmo_hf.cli import run_subcommand
from elmo_hf.corpus.data import ElmoWordVocabulary
from elmo_hf.tokenization_elmo import word_to_char_ids

WORDS = ["the", "cat", "sat", "on", "mat"]
TEXT = "the cat sat\n\non the mat , said the dog\ncat\n" + "the mat " * 4 + "\n"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def pretraining_folder(tmp_path) -> Path:
    """An untrained tiny `ElmoForPreTraining` (weights far from zero) saved with its vocabulary."""
    vocabulary = ElmoWordVocabulary(["</S>", "<S>", "<UNK>", *WORDS])
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config(word_vocab_size=len(vocabulary), initializer_range=0.5))
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    vocabulary.save(folder)
    return folder


def perplexity(*argv) -> int:
    return run_subcommand("perplexity", list(map(str, argv)))


def independent_nll(folder: Path, sentences: list[list[str]]) -> tuple[float, float, int]:
    """Mean forward and backward NLL (float64) and the number of predictions, one sentence at a time, from the
    model's full logits, with targets written out here: forward `w1..wn </S>`, backward `<S> w1..wn`."""
    model = ElmoForPreTraining.from_pretrained(folder).eval()
    ids = {word: index for index, word in enumerate(["</S>", "<S>", "<UNK>", *WORDS])}
    forward, backward, count = 0.0, 0.0, 0
    for words in sentences:
        chars = torch.tensor([[word_to_char_ids(word, 50) for word in words]])
        with torch.no_grad():
            output = model(input_ids=chars, attention_mask=torch.ones(1, len(words), dtype=torch.long))
        targets = [ids.get(word, ids["<UNK>"]) for word in words]
        forward_log_p = output.forward_logits[0].double().log_softmax(-1)
        backward_log_p = output.backward_logits[0].double().log_softmax(-1)
        for position, target in enumerate([*targets, ids["</S>"]]):
            forward -= float(forward_log_p[position, target])
        for position, target in enumerate([ids["<S>"], *targets]):
            backward -= float(backward_log_p[position, target])
        count += len(words) + 1
    return forward / count, backward / count, count


def test_perplexity_is_exp_of_the_mean_nll_per_direction(pretraining_folder, tmp_path, capsys):
    text = tmp_path / "test.txt"
    text.write_text(TEXT, encoding="utf-8")
    result_file = tmp_path / "result" / "perplexity.json"
    assert perplexity("--model", pretraining_folder, "--text", text, "--batch-size", "2", "--max-words", "5",
                      "--json", result_file) == 0
    printed = capsys.readouterr().out
    result = json.loads(result_file.read_text())
    # the empty line is skipped; the 7- and 8-word lines are split into 5 + 2 and 5 + 3 words
    sentences = [line.split() for line in TEXT.splitlines() if line.split()]
    pieces = [words[start : start + 5] for words in sentences for start in range(0, len(words), 5)]
    forward, backward, count = independent_nll(pretraining_folder, pieces)
    assert result["predictions"] == count == 19 + 6  # words, and one end per piece
    assert result["words"] == sum(map(len, sentences)) == 19
    assert math.isclose(result["forward_perplexity"], math.exp(forward), rel_tol=1e-5)
    assert math.isclose(result["backward_perplexity"], math.exp(backward), rel_tol=1e-5)
    assert math.isclose(result["loss"], (forward + backward) / 2, rel_tol=1e-5)
    assert f"forward perplexity  {result['forward_perplexity']:.3f}" in printed
    assert f"backward perplexity {result['backward_perplexity']:.3f}" in printed
    assert f"predictions         {count} per direction" in printed and "words               19" in printed
    # several files are one corpus; batch size does not change the result
    halves = [tmp_path / "first.txt", tmp_path / "second.txt"]
    lines = TEXT.splitlines(keepends=True)
    halves[0].write_text("".join(lines[:2]), encoding="utf-8")
    halves[1].write_text("".join(lines[2:]), encoding="utf-8")
    assert perplexity("--model", pretraining_folder, "--text", *halves, "--max-words", "5", "--batch-size", "7",
                      "--json", tmp_path / "halves.json") == 0
    again = json.loads((tmp_path / "halves.json").read_text())
    assert again["predictions"] == count
    assert math.isclose(again["forward_perplexity"], result["forward_perplexity"], rel_tol=1e-6)


def test_non_utf8_text_names_file_and_line_or_is_replaced(pretraining_folder, tmp_path, capsys):
    text = tmp_path / "latin1.txt"
    text.write_bytes("the cat\nna\xefve caf\xe9\n".encode("latin-1"))
    assert perplexity("--model", pretraining_folder, "--text", text) == 2
    assert re.search(r"latin1.txt, line 2: .* not UTF-8.*--errors replace", capsys.readouterr().err)
    assert perplexity("--model", pretraining_folder, "--text", text, "--errors", "replace") == 0
    assert "predictions         6 per direction" in capsys.readouterr().out


@pytest.mark.parametrize(
    "problem, message",
    [
        ("missing text", "corpus file not found"),
        ("empty text", "is empty"),
        ("blank text", "no sentences"),
        ("not a folder", "is not a model folder"),
        ("converted checkpoint", "has no word softmax .* perplexity needs a pretraining folder"),
        ("plain ElmoModel", "has no word softmax .* perplexity needs a pretraining folder"),
        ("no vocab.txt", "no vocabulary .*vocab.txt: perplexity needs a pretraining folder"),
        ("vocabulary of another size", "has 4 words but the softmax .* has 8"),
        ("softmax size but no softmax weights", "its weights lack softmax.bias, softmax.weight; perplexity needs"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    problem, message, pretraining_folder, converted, tmp_path, capsys
):
    text = tmp_path / "test.txt"
    text.write_text("the cat sat\n", encoding="utf-8")
    model = pretraining_folder
    if problem == "missing text":
        text = tmp_path / "absent.txt"
    elif problem == "empty text":
        text.write_text("", encoding="utf-8")
    elif problem == "blank text":
        text.write_text("\n  \n", encoding="utf-8")
    elif problem == "not a folder":
        model = tmp_path / "nothing"
    elif problem == "converted checkpoint":
        model = converted["allennlp"]
    elif problem == "plain ElmoModel":
        model = tmp_path / "plain"
        ElmoModel(tiny_config()).save_pretrained(model)
        ElmoWordVocabulary(["</S>", "<S>", "<UNK>"]).save(model)
    elif problem == "no vocab.txt":
        (model / "vocab.txt").unlink()
    elif problem == "softmax size but no softmax weights":
        model = tmp_path / "biLM only"
        ElmoModel(tiny_config(word_vocab_size=8)).save_pretrained(model)
        shutil.copy(pretraining_folder / "vocab.txt", model / "vocab.txt")
    elif problem == "vocabulary of another size":
        (model / "vocab.txt").write_text("</S>\n<S>\n<UNK>\nthe\n", encoding="utf-8")
    output = tmp_path / "result.json"
    assert perplexity("--model", model, "--text", text, "--json", output) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not output.exists()


def test_json_output_never_replaces_an_input_nor_a_special_file(pretraining_folder, tmp_path, capsys):
    """--json may not be the text, a file of the model folder (its vocab.txt, say), a pipe or a folder (`/` too):
    writing the result (atomically, a new file renamed over the path) would replace it. Each is refused and left as it
    was."""
    text = tmp_path / "test.txt"
    text.write_text("the cat sat\n", encoding="utf-8")
    pipe, hard_link = tmp_path / "pipe", tmp_path / "hard link"
    os.mkfifo(pipe)
    os.link(text, hard_link)
    vocabulary = (pretraining_folder / "vocab.txt").read_bytes()
    for output, message in (
        (text, "is the input"),
        (hard_link, "is the input"),
        (pretraining_folder / "vocab.txt", "is a file of"),
        (pipe, "is not a regular file"),
        (tmp_path, "cannot be written: give a file path in a folder"),
        (Path("/"), "--json / cannot be written: give a file path in a folder"),
    ):
        assert perplexity("--model", pretraining_folder, "--text", text, "--json", output) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --json ") and len(err.splitlines()) == 1 and message in err, err
    assert text.read_text() == "the cat sat\n" and (pretraining_folder / "vocab.txt").read_bytes() == vocabulary
    assert pipe.is_fifo() and hard_link.samefile(text)


def test_a_pretrained_folder_scores_its_held_out_text_as_pretrain_evaluated_it(tmp_path):
    """End to end: `elmo-hf pretrain` writes the folder; `perplexity` on its validation text repeats its last
    evaluation."""
    train, valid = tmp_path / "train.txt", tmp_path / "valid.txt"
    train.write_text("the cat sat on the mat\na dog barked at the cat\n" * 4, encoding="utf-8")
    valid.write_text("the dog sat\non a mat the cat barked\n", encoding="utf-8")
    flags = ["--lstm-dim", "16", "--projection-dim", "8", "--filters", "1:4,2:8", "--num-highway-layers", "1"]
    output = tmp_path / "model"
    assert run_subcommand(
        "pretrain",
        ["--train", str(train), "--validation", str(valid), "--output", str(output), *flags, "--max-steps", "2",
         "--batch-size", "4", "--eval-steps", "0", "--no-progress"],
    ) == 0
    evaluated = [entry for entry in json.loads((output / "training_log.json").read_text()) if "eval_loss" in entry][-1]
    assert perplexity("--model", output, "--text", valid, "--json", tmp_path / "result.json") == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["predictions"] == evaluated["eval_predictions"] == 3 + 6 + 2
    for key in ("loss", "forward_perplexity", "backward_perplexity"):
        assert math.isclose(result[key], evaluated[f"eval_{key}"], rel_tol=1e-6)
