"""`elmo-hf pretrain` and `elmo-hf perplexity` as a hostile user tries them: runs overwritten, interrupted, resumed,
diverging, on a full disk, into the user's folders, with bad options; and the typed functions under the commands."""

import argparse
import errno
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import PRETRAINING_TEXT as TEXT
from conftest import TINY_PRETRAINING as TINY
from transformers import Trainer, TrainingArguments

from elmo_hf import ElmoForPreTraining
from elmo_hf.cli import build_parser, run_subcommand
from elmo_hf.corpus.data import DataCollatorForElmoPreTraining, ElmoWordVocabulary
from elmo_hf.corpus.perplexity import corpus_perplexity
from elmo_hf.corpus.pretraining import ElmoPreTrainer, PreTrainingError, model_perplexity, pretrain

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny products run on one thread


def run(command: str, *argv) -> int:
    return run_subcommand(command, [*map(str, argv), *(["--no-progress"] if command == "pretrain" else [])])


def error_line(capsys) -> str:
    """The command's `error:` line, asserted to be the only one, with no traceback (beside progress bars)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return ElmoForPreTraining.from_pretrained(folder).state_dict()


def test_overwrite_sets_the_previous_run_aside_so_resume_never_continues_it(corpus, tmp_path, monkeypatch, capsys):
    """Issue 23 item 6: `--overwrite`, then a kill before the new run's first checkpoint, then `--resume`."""
    output = tmp_path / "out"
    flags = ["--train", corpus, "--output", output, *TINY, "--batch-size", "4", "--save-steps", "1"]
    assert run("pretrain", *flags, "--max-steps", "2") == 0
    previous = weights(output)

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(ElmoPreTrainer, "train", killed)
        assert run("pretrain", *flags, "--max-steps", "4", "--overwrite", "--learning-rate", "0.1") == 130
    aside = [path for path in output.iterdir() if path.name.startswith("previous-run-")]
    assert len(aside) == 1 and (aside[0] / "checkpoint-2").is_dir() and not list(output.glob("checkpoint-*"))
    torch.testing.assert_close(weights(aside[0]), previous)  # nothing deleted: the previous model is kept aside
    capsys.readouterr()
    assert run("pretrain", *flags, "--max-steps", "4", "--resume") == 2
    assert "no complete checkpoint of its run" in error_line(capsys)


def test_resume_skips_a_checkpoint_cut_short_while_saving_and_names_it(corpus, tmp_path, capsys):
    """Issue 23 item 7: a kill while checkpoint-4 was written; `--resume` takes checkpoint-2 and ends as the whole
    run."""
    flags = ["--train", corpus, *TINY, "--batch-size", "4", "--save-steps", "2", "--max-steps", "4"]
    assert run("pretrain", *flags, "--output", tmp_path / "whole") == 0
    assert run("pretrain", *flags, "--output", tmp_path / "killed") == 0
    killed = tmp_path / "killed"
    for name in ("config.json", "model.safetensors"):  # the kill came before the model was written
        (killed / name).unlink()
    cut = killed / "checkpoint-4"
    (cut / "pretraining_run.json").unlink(missing_ok=True)  # Trainer was still writing: no record, a cut state
    (cut / "trainer_state.json").write_text('{"global_st')
    capsys.readouterr()
    assert run("pretrain", *flags, "--output", killed, "--resume") == 0
    assert re.search(r"--resume: skipped checkpoint-4: incomplete", capsys.readouterr().err)
    torch.testing.assert_close(weights(killed), weights(tmp_path / "whole"))


def test_a_run_killed_while_it_saves_resumes_to_the_uninterrupted_result(corpus, tmp_path):
    """A real SIGKILL once the first checkpoint is complete (the run is then saving a checkpoint at every step):
    `--resume` ends with the weights of the run that was never stopped."""
    flags = ["--train", str(corpus), *TINY, "--batch-size", "4", "--save-steps", "1", "--max-steps", "30",
             "--dropout", "0", "--no-progress"]
    assert run("pretrain", *flags[:-1], "--output", tmp_path / "whole") == 0
    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "elmo_hf.cli", "pretrain", *flags, "--output", str(killed)]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while process.poll() is None and not list(killed.glob("checkpoint-*/pretraining_run.json")):
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "config.json").exists(), "the run ended before it was killed"
    assert run("pretrain", *flags[:-1], "--output", killed, "--resume") == 0
    torch.testing.assert_close(weights(killed), weights(tmp_path / "whole"))


def test_a_diverging_run_stops_with_one_error_and_saves_no_model(corpus, tmp_path, capsys):
    """Issue 23 item 8: at learning rate 1e20 the loss turns NaN; exit 1, no model, only finite checkpoints."""
    output = tmp_path / "out"
    assert run("pretrain", "--train", corpus, "--output", output, *TINY, "--batch-size", "4", "--max-steps", "6",
               "--save-steps", "1", "--learning-rate", "1e20", "--optimizer", "sgd", "--max-grad-norm", "0") == 1
    assert "the training diverged at step" in error_line(capsys)
    assert not (output / "config.json").exists() and not (output / "model.safetensors").exists()
    for checkpoint in output.glob("checkpoint-*"):
        assert all(torch.isfinite(tensor).all() for tensor in weights(checkpoint).values())


def test_perplexity_of_an_overflowing_loss_is_inf_in_logs_and_evaluation(tmp_path):
    """Issue 23 item 8: a loss above 709.8 nats overflows `math.exp`; its perplexity is inf, not an OverflowError."""
    vocabulary = ElmoWordVocabulary(["</S>", "<S>", "<UNK>", "a", "b"])
    model = ElmoForPreTraining(ElmoForPreTraining.config_class(
        char_embedding_dim=4, filters=[[1, 4]], num_highway_layers=1, projection_dim=4, lstm_dim=8,
        word_vocab_size=len(vocabulary)))
    with torch.no_grad():
        model.softmax.weight.zero_()
        model.softmax.bias.copy_(torch.tensor([0.0, 0.0, 0.0, -1e4, -1e4]))
    collator = DataCollatorForElmoPreTraining(vocabulary)
    result = model_perplexity(model, [collator([{"words": ["a", "b", "a"]}])])
    assert result["loss"] > 1000 and result["forward_perplexity"] == result["backward_perplexity"] == math.inf
    trainer = ElmoPreTrainer(model=model, args=TrainingArguments(tmp_path, report_to=[], use_cpu=True))
    trainer._direction_losses = torch.tensor([5000.0, 5000.0, 5.0], dtype=torch.float64)
    trainer.log({"loss": 1000.0})
    assert trainer.state.log_history[-1]["forward_perplexity"] == math.inf


def test_a_full_disk_while_saving_is_one_error_line_and_keeps_the_complete_checkpoint(
    corpus, tmp_path, monkeypatch, capsys
):
    output = tmp_path / "out"
    save = Trainer._save_checkpoint

    def full_at_step_2(self, model, trial):
        if self.state.global_step == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        save(self, model, trial)

    monkeypatch.setattr(Trainer, "_save_checkpoint", full_at_step_2)
    assert run("pretrain", "--train", corpus, "--output", output, *TINY, "--batch-size", "4", "--max-steps", "3",
               "--save-steps", "1") == 1
    assert re.search(r"No space left.*checkpoint-1, was kept: free space, then --resume", error_line(capsys))
    assert not (output / "config.json").exists()


@pytest.mark.parametrize("where", ["the training text's folder", "a folder of the user's"])
def test_output_holding_the_users_files_is_refused_and_never_replaced(where, corpus, tmp_path, capsys):
    """Issue 23 item 13: a non-empty --output this command did not make is refused without --overwrite; with it,
    the model goes beside the user's files, and a name the model would write is refused, never replaced."""
    folder = corpus.parent if where == "the training text's folder" else tmp_path / "mine"
    folder.mkdir(exist_ok=True)
    users = {folder / "vocab.txt": "my words\n", folder / "training_log.json": "[1, 2]", corpus: TEXT}
    for path, text in users.items():
        path.write_text(text, encoding="utf-8")
    flags = ["--train", corpus, "--output", folder, *TINY, "--batch-size", "4", "--max-steps", "1"]
    assert run("pretrain", *flags) == 2
    assert "is not empty and was not made by elmo-hf pretrain" in error_line(capsys)
    assert run("pretrain", *flags, "--overwrite") == 2
    assert "holds training_log.json, vocab.txt, which elmo-hf pretrain would write" in error_line(capsys)
    assert {path: path.read_text(encoding="utf-8") for path in users} == users
    assert sorted(folder.iterdir()) == sorted(path for path in users if path.parent == folder)
    for path in (folder / "vocab.txt", folder / "training_log.json"):
        path.rename(path.with_suffix(".kept"))
    assert run("pretrain", *flags, "--overwrite") == 0  # beside the user's files, none replaced
    assert corpus.read_text(encoding="utf-8") == TEXT and (folder / "vocab.kept").read_text() == "my words\n"
    assert (folder / "config.json").is_file()


def test_resume_keeps_the_runs_vocabulary_when_the_text_changed(corpus, tmp_path, capsys):
    """Issue 23 item 16: `--resume` uses the vocabulary saved with the run, not one rebuilt from the current text,
    and refuses a `--vocab` that differs."""
    output = tmp_path / "out"
    flags = ["--train", corpus, "--output", output, *TINY, "--batch-size", "4", "--vocab-size", "8",
             "--save-steps", "2"]
    assert run("pretrain", *flags, "--max-steps", "2") == 0
    vocabulary = ElmoWordVocabulary.load(output)
    corpus.write_text("zebra yak xerus walrus vole\n" * 40 + TEXT, encoding="utf-8")
    assert ElmoWordVocabulary.build([corpus], max_size=8) != vocabulary
    other = tmp_path / "other.txt"
    ElmoWordVocabulary.build([corpus], max_size=8).save(tmp_path)
    (tmp_path / "vocab.txt").rename(other)
    assert run("pretrain", *flags, "--max-steps", "4", "--resume", "--vocab", other) == 2
    assert "differs from the vocabulary of the run being resumed" in error_line(capsys)
    assert run("pretrain", *flags, "--max-steps", "4", "--resume", "--optimizer", "sgd") == 2  # not its state's
    assert "trains with --optimizer adamw_torch, whose state its checkpoints hold" in error_line(capsys)
    assert run("pretrain", *flags, "--max-steps", "4", "--resume") == 0
    assert ElmoWordVocabulary.load(output) == vocabulary == ElmoWordVocabulary.load(output / "checkpoint-4")


def test_the_model_folder_has_the_umasks_mode_and_no_pickle(corpus, tmp_path):
    """Issue 23 item 17: `model.safetensors` with the umask's permissions (not 0600), and the finished folder holds
    only safetensors, JSON and text (Trainer's `training_args.bin` pickle stays in the checkpoints)."""
    output = tmp_path / "out"
    umask = os.umask(0o022)
    try:
        assert run("pretrain", "--train", corpus, "--output", output, *TINY, "--batch-size", "4",
                   "--max-steps", "1") == 0
    finally:
        os.umask(umask)
    assert (output / "model.safetensors").stat().st_mode & 0o777 == 0o644
    files = [path.name for path in output.iterdir() if path.is_file()]
    assert "training_args.bin" not in files and all(
        name.endswith((".safetensors", ".json", ".txt", ".py")) for name in files)  # .py: the remote code


def unwritable(tmp_path: Path) -> Path:
    blocker = tmp_path / "a file"
    blocker.write_text("")
    return blocker / "out"


@pytest.mark.parametrize(
    "options, message",
    [
        (["--batch-size", "0"], "--batch-size 0: must be a positive integer"),
        (["--filters", "1:x,2:4"], "--filters '1:x,2:4': give the character CNN's banks as WIDTH:COUNT"),
        (["--filters", "3"], "--filters '3': give"),
        (["--lstm-dim", "0"], "the architecture options cannot be used: .*lstm_dim"),
        (["--dropout", "1.5"], r"--dropout 1.5: must be in \[0, 1\)"),
        (["--learning-rate", "nan"], "--learning-rate nan: must be finite"),
        (["--optimizer", "bogus"], "--optimizer 'bogus': must be a Trainer optimizer name"),
        (["--threads", "0"], "--threads 0: must be a positive integer"),
        (["--seed", "-1"], r"--seed -1: must be an integer in \[0, 2\*\*32 - 1\]"),
        (["--seed", "99999999999999999999"], r"--seed 99999999999999999999: must be an integer in \[0, 2\*\*32 - 1\]"),
        (["--filters", "100:4"], r"the architecture options cannot be used: ElmoConfig.filters has width 100, wider "
                                 r"than max_characters_per_token \(50\)\.$"),
        (["--warmup-steps", "5"], "--warmup-steps 5: --lr-scheduler constant does not warm up; use "
                                  "constant_with_warmup"),  # constant is the default schedule
        (["--streaming"], "--streaming reads the text as a stream of unknown length: give --max-steps"),
        (["--filters", ""], "--filters '': give"),
        (["--model", "elmo-en-mini"], "--lstm-dim, --projection-dim, --num-highway-layers, --filters and --model "
                                      "exclude each other"),
        (["non-UTF-8 vocab"], "vocabulary file .*vocab.txt: bytes at 4 are not UTF-8"),
        (["unwritable output"], "--output .* cannot be written"),
    ],
)
def test_bad_pretrain_options_are_one_error_line_and_write_nothing(options, message, corpus, tmp_path, capsys):
    """Issue 23 item 12 (pretrain): bad values end in one `error:` line (exit 2), not a traceback."""
    output = tmp_path / "out"
    if options == ["non-UTF-8 vocab"]:
        (tmp_path / "vocab.txt").write_bytes(b"</S>\xff\xfe\n")
        options = ["--vocab", tmp_path / "vocab.txt"]
    elif options == ["unwritable output"]:
        output, options = unwritable(tmp_path), []
    steps = [] if "--streaming" in options else ["--max-steps", "1"]
    assert run("pretrain", "--train", corpus, "--output", output, *TINY, *steps, *options) == 2
    assert re.search(message, error_line(capsys))
    assert not output.exists()


@pytest.mark.parametrize(
    "options", [{"batch_size": "4"}, {"batch_size": None}, {"batch_size": 4.0}, {"seed": True}, {"max_steps": 1.5}]
)
def test_pretrain_from_python_refuses_options_of_another_type(options, corpus, tmp_path):
    """A value of another type than the option's (a str, None, a float or a bool for an integer) is refused like a
    bad value, naming the option; `pretrain` raised a bare TypeError from inside its rules, or ran with a float."""
    name = next(iter(options))
    with pytest.raises(PreTrainingError, match=f"--{name.replace('_', '-')} .*: must be "):
        pretrain([corpus], tmp_path / "out", lstm_dim=8, projection_dim=4, filters=[[1, 4]], progress=False,
                 **{"max_steps": 1, **options})
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("problem", ["--batch-size 0", "--threads 0", "non-UTF-8 vocab", "unwritable --json"])
def test_bad_perplexity_options_are_one_error_line(problem, corpus, tmp_path, capsys):
    """Issue 23 item 12 (perplexity)."""
    model = tmp_path / "model"
    assert run("pretrain", "--train", corpus, "--output", model, *TINY, "--batch-size", "4", "--max-steps", "1") == 0
    capsys.readouterr()
    options = problem.split() if problem.startswith("--") else []
    if problem == "non-UTF-8 vocab":
        (tmp_path / "vocab.txt").write_bytes(b"</S>\xff\n")
        options = ["--vocab", tmp_path / "vocab.txt"]
    elif problem == "unwritable --json":
        options = ["--json", unwritable(tmp_path)]
    assert run("perplexity", "--model", model, "--text", corpus, *options) == 2
    error_line(capsys)


def test_from_pretrained_is_a_hidden_alias_of_model():
    """Every option's help is tested for every command in test_cli.py; the former name is accepted, not shown."""
    parser = build_parser("pretrain")
    hidden = [action for action in parser._actions if "--from-pretrained" in action.option_strings]
    assert hidden[0].help == argparse.SUPPRESS and "--from-pretrained" not in parser.format_help()


def test_from_pretrained_still_works_as_the_former_name_of_model(corpus, tmp_path, capsys):
    model = tmp_path / "model"
    assert run("pretrain", "--train", corpus, "--output", model, *TINY, "--batch-size", "4", "--max-steps", "1") == 0
    assert run("pretrain", "--train", corpus, "--output", tmp_path / "again", "--from-pretrained", model,
               "--batch-size", "4", "--max-steps", "1", "--learning-rate", "0") == 0
    assert "--from-pretrained is now --model" in capsys.readouterr().err
    torch.testing.assert_close(weights(tmp_path / "again"), weights(model))


def test_pretrain_and_corpus_perplexity_are_typed_functions_without_argparse(corpus, tmp_path):
    """Issue 22 item 4: Python calls what the commands call, with keyword arguments."""
    trainer, metrics = pretrain([corpus], tmp_path / "model", validation=corpus, lstm_dim=8, projection_dim=4,
                                filters=[[1, 4], [2, 4]], batch_size=4, max_steps=1, eval_steps=0, progress=False)
    assert trainer.state.global_step == 1 and metrics["eval_predictions"] > 0
    result = corpus_perplexity(tmp_path / "model", [corpus], batch_size=8)
    assert math.isclose(result["loss"], metrics["eval_loss"], rel_tol=1e-6)
    for module in ("pretraining", "perplexity", "data"):
        assert "argparse" not in (ROOT / "elmo_hf" / "corpus" / f"{module}.py").read_text()


def test_pretrain_refuses_far_more_threads_than_cpus_with_the_commands_check(corpus, tmp_path, monkeypatch):
    """`pretrain(threads=...)` in Python runs the check `--threads` gets (`elmo_hf.errors.check_threads`)."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    with pytest.raises(PreTrainingError, match=r"^--threads 100000: at most 8 on this machine \(4 x its 2 CPUs\)"):
        pretrain([corpus], tmp_path / "model", threads=100000, progress=False)
    assert not (tmp_path / "model").exists()


def test_perplexity_takes_a_packaged_model_by_its_name_offline(corpus, capsys):
    """Issue 26 item 1: `--model elmo-en-mini` is the packaged model, with its softmax and vocabulary, not a Hub
    repository asked for: it gives both directions' perplexity."""
    assert run("perplexity", "--model", "elmo-en-mini", "--text", corpus) == 0
    printed = capsys.readouterr().out
    for direction in ("forward", "backward"):
        value = float(re.search(rf"{direction} perplexity\s+([0-9.]+)", printed).group(1))
        assert 1 < value < 16000  # a normalised perplexity over its 16,000-word softmax
