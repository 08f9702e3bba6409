"""ElmoForPreTraining, its data and `elmo-hf pretrain`: targets, loss, perplexity, Trainer, torchrun, resume,
errors."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
from conftest import tiny_config
from safetensors.torch import load_file, save_file

from elmo_hf import ElmoForPreTraining, ElmoModel
from elmo_hf.cli import run_subcommand
from elmo_hf.corpus.data import (
    CorpusError,
    DataCollatorForElmoPreTraining,
    ElmoTextDataset,
    ElmoWordVocabulary,
    load_sentences,
    read_sentences,
)
from elmo_hf.corpus.pretraining import OutputFolder, check_training_options, model_perplexity
from transformers import AutoModelForPreTraining

ROOT = Path(__file__).resolve().parents[1]
PTB = ROOT.parent / "shared" / "data" / "ptb"
TINY_FLAGS = ["--lstm-dim", "16", "--projection-dim", "8", "--filters", "1:4,2:8", "--num-highway-layers", "1"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ptb_slice(tmp_path_factory) -> dict[str, Path]:
    """The first 300 training and 60 validation sentences of Penn Treebank."""
    folder = tmp_path_factory.mktemp("ptb")
    files = {}
    for split, lines in (("train", 300), ("valid", 60)):
        text = (PTB / f"ptb.{split}.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:lines]
        files[split] = folder / f"{split}.txt"
        files[split].write_text("".join(text), encoding="utf-8")
    return files


INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16)


def vocabulary_of(*words: str) -> ElmoWordVocabulary:
    return ElmoWordVocabulary(["</S>", "<S>", "<UNK>", *words])


def tiny_pretraining_model(vocabulary_size: int, **overrides) -> ElmoForPreTraining:
    torch.manual_seed(0)
    overrides.setdefault("initializer_range", 0.5)  # outputs far from zero, so that changes show
    return ElmoForPreTraining(tiny_config(word_vocab_size=vocabulary_size, **overrides))


def pretrain(*argv: str) -> int:
    return run_subcommand("pretrain", [*map(str, argv), "--no-progress"])


def test_targets_of_a_three_word_sentence_position_by_position():
    vocabulary = vocabulary_of("the", "cat", "sat")
    batch = DataCollatorForElmoPreTraining(vocabulary)([{"words": ["the", "cat", "sat"]}, {"words": ["dog"]}])
    eos, bos, unk, the, cat, sat = range(6)
    # forward: <S> -> the, the -> cat, cat -> sat, sat -> </S>
    # backward: the -> <S>, cat -> the, sat -> cat, </S> -> sat
    assert batch["labels"].tolist() == [[the, cat, sat, eos], [unk, eos, -100, -100]]
    assert batch["backward_labels"].tolist() == [[bos, the, cat, sat], [bos, unk, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["input_ids"].shape == (2, 3, 50) and not batch["input_ids"][1, 1:].any()


def test_forward_position_sees_only_the_past_and_backward_only_the_future():
    """Forward position t reads <S> and words 1..t; backward position t reads words t+1..n and </S>."""
    vocabulary = vocabulary_of("a", "b", "c", "d")
    collator = DataCollatorForElmoPreTraining(vocabulary)
    model = tiny_pretraining_model(len(vocabulary)).eval()
    first = model(**{k: v for k, v in collator([{"words": ["a", "b", "c"]}]).items() if "labels" not in k})
    second = model(**{k: v for k, v in collator([{"words": ["a", "d", "c"]}]).items() if "labels" not in k})
    # word 2 changed: forward positions 0, 1 (<S>, a) and backward positions 2, 3 (c, </S>) are unchanged
    torch.testing.assert_close(first.forward_logits[:, :2], second.forward_logits[:, :2], rtol=0, atol=0)
    torch.testing.assert_close(first.backward_logits[:, 2:], second.backward_logits[:, 2:], rtol=0, atol=0)
    assert not torch.allclose(first.forward_logits[:, 2:], second.forward_logits[:, 2:])
    assert not torch.allclose(first.backward_logits[:, :2], second.backward_logits[:, :2])


def test_pretraining_layers_are_the_biLM_layers_and_narrow_integer_ids_read_the_same():
    """Without the boundary positions, the layers the softmax reads are `ElmoModel`'s for the same batch; int16 and
    int32 ids (which ElmoModel accepts) give the same loss as int64 instead of failing inside the embedding."""
    vocabulary = vocabulary_of("a", "b", "c")
    batch = DataCollatorForElmoPreTraining(vocabulary)([{"words": ["a", "b", "c"]}, {"words": ["b"]}])
    model = tiny_pretraining_model(len(vocabulary)).eval()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        kept = model(**inputs, output_hidden_states=True).hidden_states
        expected = model.elmo(**inputs, output_hidden_states=True).hidden_states
        losses = [model(**{**batch, "input_ids": batch["input_ids"].to(dtype)}).loss for dtype in INTEGER_DTYPES]
    words = batch["attention_mask"].unsqueeze(-1).bool()
    for with_boundaries, layer in zip(kept, expected):
        torch.testing.assert_close(with_boundaries[:, 1:-1] * words, layer, rtol=0, atol=1e-6)
    assert all(torch.equal(loss, losses[0]) for loss in losses)


def test_loss_and_perplexity_equal_the_mean_token_nll_computed_independently():
    vocabulary = vocabulary_of("a", "b", "c", "d", "e")
    collator = DataCollatorForElmoPreTraining(vocabulary)
    sentences = [{"words": ["a", "b", "c", "zzz"]}, {"words": ["e"]}, {"words": ["d", "d"]}]
    batch = collator(sentences)
    model = tiny_pretraining_model(len(vocabulary)).eval()
    with torch.no_grad():
        output = model(**batch)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    nll = {}
    for direction, targets in (("forward", batch["labels"]), ("backward", batch["backward_labels"])):
        log_probabilities = getattr(logits, f"{direction}_logits").double().log_softmax(-1)
        terms = [-log_probabilities[row, position, target] for (row, position), target in
                 zip((targets != -100).nonzero().tolist(), targets[targets != -100].tolist())]
        assert len(terms) == 5 + 2 + 3  # n + 1 predictions per sentence and direction
        nll[direction] = float(sum(terms) / len(terms))
    assert output.num_predictions == 10
    assert math.isclose(output.forward_loss, nll["forward"], rel_tol=1e-5)
    assert math.isclose(output.backward_loss, nll["backward"], rel_tol=1e-5)
    assert math.isclose(output.forward_perplexity, math.exp(nll["forward"]), rel_tol=1e-5)
    assert math.isclose(output.loss, (nll["forward"] + nll["backward"]) / 2, rel_tol=1e-5)
    # the corpus perplexity weights batches by their predictions: two batches give the one-batch result
    batches = [collator(sentences[:1]), collator(sentences[1:])]
    result = model_perplexity(model, batches)
    assert math.isclose(result["forward_perplexity"], math.exp(nll["forward"]), rel_tol=1e-5)
    assert math.isclose(result["backward_perplexity"], math.exp(nll["backward"]), rel_tol=1e-5)
    assert result["predictions"] == 10


def test_sampled_softmax_trains_and_evaluation_stays_fully_normalised():
    vocabulary = vocabulary_of(*"abcdefghij")
    batch = DataCollatorForElmoPreTraining(vocabulary)([{"words": list("abcab")}, {"words": list("jih")}])
    model = tiny_pretraining_model(len(vocabulary), softmax_type="sampled", softmax_num_samples=4)
    torch.manual_seed(1)
    sampled = model.train()(**batch)
    sampled.loss.backward()
    assert model.softmax.weight.grad.abs().sum() > 0 and model.elmo.token_encoder.projection.weight.grad is not None
    full = tiny_pretraining_model(len(vocabulary))
    full.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(**batch).loss, full.eval()(**batch).loss)
    assert not math.isclose(sampled.loss.item(), full(**batch).loss.item(), rel_tol=1e-3)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_a_new_model_starts_as_the_originals_training_code_started_it(activation, tmp_path):
    """Built from a config, the biLM and the softmax get the original's initial values (docs/pretraining.md,
    "Initialisation"), not transformers' 0.02 everywhere; loading a folder keeps the saved weights and leaves the
    random generator as it was."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config(activation=activation, lstm_dim=64, projection_dim=32, word_vocab_size=500))
    encoder, config = model.elmo.token_encoder, model.config
    characters = encoder.char_embeddings.weight
    assert characters[0].abs().max() == 0 and characters.abs().max() <= 1 and 0.5 < characters[1:].std() < 0.65
    for convolution, (width, _) in zip(encoder.char_cnn.convolutions, config.filters):
        expected_std = 0.1 / 12**0.5 if activation == "relu" else (width * config.char_embedding_dim) ** -0.5
        assert abs(convolution.weight.std() / expected_std - 1) < 0.3 and convolution.bias.abs().max() == 0
        if activation == "relu":
            assert convolution.weight.abs().max() <= 0.05
    highway = encoder.highway.layers[0]
    assert torch.equal(highway.gate.bias, torch.full_like(highway.gate.bias, -2.0))
    assert highway.transform.bias.abs().max() == 0
    for linear in (highway.transform, highway.gate, encoder.projection):
        assert abs(linear.weight.std() * linear.in_features**0.5 - 1) < 0.1
    for layer in model.elmo.bilm.layers:
        for cell in (layer.forward_cell, layer.backward_cell):
            bound = (6 / (2 * 32 + 4 * 64)) ** 0.5
            assert cell.input_to_gates.weight.abs().max() <= bound and cell.hidden_to_gates.weight.abs().max() <= bound
            assert abs(cell.input_to_gates.weight.std() / (bound / 3**0.5) - 1) < 0.1
            expected_bias = torch.zeros(4 * 64)
            expected_bias[64:128] = 1.0  # the forget gate's, in the order i, f, g, o
            assert torch.equal(cell.hidden_to_gates.bias, expected_bias)
            assert cell.projection.weight.abs().max() <= (6 / (64 + 32)) ** 0.5
    assert abs(model.softmax.weight.std() * 32**0.5 - 1) < 0.1 and model.softmax.bias.abs().max() == 0
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5)
    model.save_pretrained(tmp_path)
    for model_class, saved in ((ElmoForPreTraining, model), (ElmoModel, model.elmo)):
        generator_state = torch.random.get_rng_state()
        loaded = model_class.from_pretrained(tmp_path)
        assert torch.equal(torch.random.get_rng_state(), generator_state)  # loading draws nothing
        assert all(torch.equal(parameter, saved.get_parameter(name)) for name, parameter in loaded.named_parameters())


@pytest.mark.parametrize("softmax_type", ["full", "sampled"])
def test_every_parameter_takes_part_in_the_loss(softmax_type):
    """`elmo-hf pretrain` tells DDP that no parameter goes unused (no search of the graph at every step): every
    parameter of the pretraining model gets a gradient from one step's loss."""
    vocabulary = vocabulary_of(*"abcdefghij")
    batch = DataCollatorForElmoPreTraining(vocabulary)([{"words": list("abcab")}, {"words": list("jih")}])
    model = tiny_pretraining_model(len(vocabulary), softmax_type=softmax_type, softmax_num_samples=4).train()
    model(**batch).loss.backward()
    assert [name for name, parameter in model.named_parameters() if parameter.grad is None] == []


def test_a_continued_run_is_plotted_with_its_epochs_counted_on(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from plot_pretraining import continued

    first = [{"loss": 6.0, "epoch": 0.5, "step": 10}, {"eval_loss": 5.5, "epoch": 1.0, "step": 20}]
    second = [{"loss": 5.0, "epoch": 0.25, "step": 5}, {"loss": 4.0, "epoch": 2.0, "step": 40}]
    entries, starts = continued([first, second])
    assert [entry["epoch"] for entry in entries] == [0.5, 1.0, 1.25, 3.0] and starts == [1.0]
    assert [entry["step"] for entry in entries] == [10, 20, 5, 40]


def test_vocabulary_counts_cutoffs_and_round_trip(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("b a b\n\n  c b a\nd\n", encoding="utf-8")
    vocabulary = ElmoWordVocabulary.build([corpus])
    assert vocabulary.words == ["</S>", "<S>", "<UNK>", "b", "a", "c", "d"]
    assert ElmoWordVocabulary.build([corpus], min_count=2).words == ["</S>", "<S>", "<UNK>", "b", "a"]
    assert ElmoWordVocabulary.build([corpus], max_size=4).words == ["</S>", "<S>", "<UNK>", "b"]
    vocabulary.save(tmp_path)
    assert ElmoWordVocabulary.load(tmp_path) == vocabulary and vocabulary.word_id("zzz") == vocabulary.unk_id
    assert [row["words"] for row in ElmoTextDataset([corpus])] == [["b", "a", "b"], ["c", "b", "a"], ["d"]]
    assert list(ElmoTextDataset([corpus])) == load_sentences([corpus])


def test_long_lines_are_split_not_dropped_and_datasets_text_rows_work():
    collator = DataCollatorForElmoPreTraining(vocabulary_of("w"), max_words=4)
    table = datasets.Dataset.from_dict({"text": ["w " * 10, "w w"]})
    batch = collator(list(table))
    assert batch["attention_mask"].sum(1).tolist() == [4, 4, 2, 2]


def test_non_utf8_names_file_and_line_or_is_replaced(tmp_path):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("fine line\nna\xefve caf\xe9\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"latin1.txt, line 2: .* not UTF-8.*--errors replace"):
        list(read_sentences(corpus))
    assert list(read_sentences(corpus, errors="replace"))[1] == ["na\ufffdve", "caf\ufffd"]


def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path):
    corpus = tmp_path / "marked.txt"
    corpus.write_bytes(b"\xef\xbb\xbfthe cat\n\xef\xbb\xbfsat\n")  # a mark past the first line is a character
    assert list(read_sentences(corpus)) == [["the", "cat"], ["\ufeffsat"]]


def test_pretrain_lowers_the_loss_on_real_text_and_saves_a_loadable_folder(ptb_slice, tmp_path):
    output = tmp_path / "out"
    assert pretrain("--train", ptb_slice["train"], "--validation", ptb_slice["valid"], "--output", output,
                    *TINY_FLAGS, "--max-steps", "20", "--batch-size", "16", "--learning-rate", "1e-2",
                    "--eval-steps", "0", "--save-steps", "20", "--logging-steps", "5") == 0
    log = json.loads((output / "training_log.json").read_text())
    losses = [entry["loss"] for entry in log if "loss" in entry]
    held_out = [entry["eval_loss"] for entry in log if "eval_loss" in entry]
    # the untrained softmax is uniform: its loss is log(vocabulary size)
    untrained = math.log(len(ElmoWordVocabulary.load(output)))
    assert losses[0] == pytest.approx(untrained, abs=0.1) and losses[-1] < untrained - 0.5
    assert held_out[-1] < untrained - 0.3
    subprocess.run([sys.executable, str(ROOT / "examples" / "plot_pretraining.py"), str(output)], check=True,
                   capture_output=True, timeout=300)
    assert (output / "training_curves.png").stat().st_size > 0
    continued = tmp_path / "continued.png"  # the run drawn as continued by itself
    subprocess.run([sys.executable, str(ROOT / "examples" / "plot_pretraining.py"), str(output), str(output),
                    "--png", str(continued)], check=True, capture_output=True, timeout=300)
    assert continued.stat().st_size > 0
    model = AutoModelForPreTraining.from_pretrained(output)
    assert isinstance(model, ElmoForPreTraining)
    assert model.config.word_vocab_size == len(ElmoWordVocabulary.load(output))
    bilm = ElmoModel.from_pretrained(output)
    torch.testing.assert_close(bilm.state_dict(), model.elmo.state_dict())


def test_resume_continues_the_same_run(ptb_slice, tmp_path):
    flags = ["--train", ptb_slice["train"], *TINY_FLAGS, "--max-steps", "6", "--save-steps", "3",
             "--logging-steps", "1", "--batch-size", "8", "--dropout", "0.3"]
    assert pretrain(*flags, "--output", tmp_path / "whole") == 0
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    shutil.copytree(tmp_path / "whole" / "checkpoint-3", stopped / "checkpoint-3")  # as a run killed after step 3
    run_id = json.loads((tmp_path / "whole" / "pretraining_run.json").read_text())["run_id"]
    (stopped / "pretraining_run.json").write_text(json.dumps({"run_id": run_id, "model_files": []}))
    assert pretrain(*flags, "--output", stopped, "--resume") == 0
    whole, resumed = (json.loads((tmp_path / name / "training_log.json").read_text()) for name in ("whole", "stopped"))
    losses = [[entry["loss"] for entry in log if "loss" in entry] for log in (whole, resumed)]
    # the resumed log holds the checkpoint's first 3 steps and its own last 3
    assert len(losses[0]) == len(losses[1]) == 6 and losses[1] == pytest.approx(losses[0], rel=1e-5)
    torch.testing.assert_close(
        ElmoForPreTraining.from_pretrained(stopped).state_dict(),
        ElmoForPreTraining.from_pretrained(tmp_path / "whole").state_dict(),
    )
    # resuming with another architecture is refused before anything is trained
    assert pretrain(*flags[:-8], "--lstm-dim", "32", "--max-steps", "6", "--output", stopped, "--resume") == 2


def test_resume_refuses_another_number_of_processes(ptb_slice, tmp_path, capsys, monkeypatch):
    """Each process trains on its share of the text: the run's record keeps its number of processes (WORLD_SIZE),
    `--resume` refuses another before a process group is started, and a record written before it was kept resumes."""
    output = tmp_path / "out"
    flags = ["--train", ptb_slice["train"], "--output", output, *TINY_FLAGS, "--batch-size", "8", "--save-steps", "1"]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert pretrain(*flags, "--max-steps", "1") == 0
    record = json.loads((output / "pretraining_run.json").read_text())
    assert record["training"]["world_size"] == 1
    monkeypatch.setenv("WORLD_SIZE", "2")
    capsys.readouterr()
    assert pretrain(*flags, "--max-steps", "2", "--resume") == 2
    err = capsys.readouterr().err
    assert "trained with 1 as its number of processes (WORLD_SIZE), this command with 2" in err
    assert "(torchrun --nproc_per_node=1), or train again with --overwrite" in err
    assert not (output / "checkpoint-2").exists()
    monkeypatch.setenv("WORLD_SIZE", "1")  # the run's number
    assert pretrain(*flags, "--max-steps", "2", "--resume") == 0
    del record["training"]["world_size"]  # a record written before the number of processes was kept
    (output / "pretraining_run.json").write_text(json.dumps(record))
    check_training_options(OutputFolder(output), {**record["training"], "world_size": 2})  # not checked
    assert pretrain(*flags, "--max-steps", "3", "--resume") == 0
    assert (output / "checkpoint-3").is_dir()


def test_domain_adaptation_starts_from_a_converted_biLM(converted, ptb_slice, tmp_path):
    output = tmp_path / "adapted"
    assert pretrain("--train", ptb_slice["train"], "--output", output, "--model", converted["allennlp"],
                    "--max-steps", "1", "--learning-rate", "0", "--batch-size", "4") == 0
    torch.testing.assert_close(
        ElmoModel.from_pretrained(output).state_dict(), ElmoModel.from_pretrained(converted["allennlp"]).state_dict()
    )
    # the adapted folder's vocabulary is reused by the next adaptation; another vocabulary must be asked for
    other = tmp_path / "vocab.txt"
    other.write_text("</S>\n<S>\n<UNK>\nonly\n", encoding="utf-8")
    args = ["--train", ptb_slice["train"], "--model", output, "--max-steps", "1", "--batch-size", "4"]
    assert pretrain(*args, "--output", tmp_path / "again", "--vocab", other) == 2
    assert pretrain(*args, "--output", tmp_path / "again", "--vocab", other, "--new-softmax") == 0
    assert ElmoForPreTraining.from_pretrained(tmp_path / "again").softmax.out_features == 4


def test_domain_adaptation_refuses_a_biLM_with_a_weight_missing(converted, ptb_slice, tmp_path, capsys):
    """transformers would start the missing weight at random, and the run would train a biLM that is not the
    folder's."""
    model = tmp_path / "model"
    shutil.copytree(converted["allennlp"], model)
    tensors = load_file(model / "model.safetensors")
    del tensors["bilm.layers.0.backward_cell.hidden_to_gates.weight"]
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()
    assert pretrain("--train", ptb_slice["train"], "--output", tmp_path / "adapted", "--model", model,
                    "--max-steps", "1", "--batch-size", "4") == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "its weights lack elmo.bilm.layers.0.backward_cell.hidden_to_gates" in err
    assert not (tmp_path / "adapted").exists()


def test_domain_adaptation_of_the_packaged_model_by_its_name(ptb_slice, tmp_path):
    output = tmp_path / "adapted"
    assert pretrain("--train", ptb_slice["train"], "--output", output, "--model", "elmo-en-mini",
                    "--max-steps", "1", "--learning-rate", "0", "--batch-size", "4") == 0
    torch.testing.assert_close(
        ElmoModel.from_pretrained(output).state_dict(), ElmoModel.from_pretrained("elmo-en-mini").state_dict()
    )


@pytest.mark.parametrize(
    "problem, message",
    [
        ("missing", "corpus file not found"),
        ("empty", "is empty"),
        ("binary", "line 1: .* not UTF-8"),
        ("processes", "fewer than one batch for each of the 64 processes"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(problem, message, tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    if problem == "empty":
        corpus.touch()
    elif problem == "binary":
        corpus.write_bytes(b"\xff\xfe bad\n")
    elif problem == "processes":
        corpus.write_text("a b\nc d\n", encoding="utf-8")
        monkeypatch.setenv("WORLD_SIZE", "64")
    output = tmp_path / "out"
    assert pretrain("--train", corpus, "--output", output, *TINY_FLAGS, "--max-steps", "1") == 2
    assert __import__("re").search(message, capsys.readouterr().err)
    assert not output.exists()


def test_torchrun_two_processes_equal_one_process_with_the_same_global_batch(ptb_slice, tmp_path):
    flags = ["--train", ptb_slice["train"], *TINY_FLAGS, "--max-steps", "3", "--save-steps", "100",
             "--dropout", "0", "--no-progress", "--learning-rate", "1e-2"]
    probe = str(ROOT / "tests" / "pretrain_probe.py")
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    for command in (  # --standalone: torchrun binds a free port itself (no window for another run to take it)
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", probe, tmp_path,
         *flags, "--output", tmp_path / "two", "--batch-size", "4"],
        [sys.executable, probe, tmp_path, *flags, "--output", tmp_path / "one", "--batch-size", "8"],
    ):
        completed = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
        assert completed.returncode == 0, completed.stderr[-3000:]  # torchrun's own report names the failing rank
    rank0, rank1, single = (torch.load(tmp_path / f"rank{name}.pt") for name in ("0", "1", "single"))
    torch.testing.assert_close(rank0, rank1, rtol=0, atol=0)
    torch.testing.assert_close(rank0, single, rtol=1e-5, atol=1e-6)


def test_streamed_files_and_a_datasets_text_dataset_train_with_trainer(ptb_slice, tmp_path):
    assert pretrain("--train", ptb_slice["train"], "--output", tmp_path / "streamed", *TINY_FLAGS, "--streaming",
                    "--max-steps", "2", "--batch-size", "4") == 0
    assert ElmoForPreTraining.from_pretrained(tmp_path / "streamed").config.word_vocab_size > 3
    from transformers import Trainer, TrainingArguments

    vocabulary = ElmoWordVocabulary.build([ptb_slice["train"]])
    table = datasets.Dataset.from_dict({"text": ptb_slice["train"].read_text(encoding="utf-8").splitlines()[:16]})
    model = tiny_pretraining_model(len(vocabulary), initializer_range=0.02)
    before = model.softmax.weight.detach().clone()
    arguments = TrainingArguments(tmp_path / "datasets", max_steps=2, per_device_train_batch_size=4, report_to=[],
                                  remove_unused_columns=False, use_cpu=True, disable_tqdm=True)
    result = Trainer(model=model, args=arguments, train_dataset=table,
                     data_collator=DataCollatorForElmoPreTraining(vocabulary)).train()
    assert result.global_step == 2 and math.isfinite(result.training_loss)
    assert not torch.equal(before, model.softmax.weight)
