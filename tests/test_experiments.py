"""experiments/elmo_experiments.py: fixed training subsets, the cached biLM layers, a tagger run that its recorded
command repeats exactly, the grid's order and resumption, and the report's tables and plots."""

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments import elmo_experiments as experiments  # noqa: E402
from experiments.report import report  # noqa: E402

from elmo_hf import DEFAULT_MODEL, ElmoModel, ElmoTokenizer  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_training_subsets_are_fixed_nested_and_of_the_asked_size():
    sentences = [([f"w{i}"], ["O"]) for i in range(1000)]
    subsets = {fraction: experiments.training_subset(sentences, fraction) for fraction in (0.01, 0.1, 1.0)}
    assert [len(subsets[fraction]) for fraction in (0.01, 0.1, 1.0)] == [10, 100, 1000]
    assert experiments.training_subset(sentences, 0.1) == subsets[0.1]
    assert set(map(str, subsets[0.01])) <= set(map(str, subsets[0.1]))
    assert subsets[0.1] != sentences[:100]  # a random subset, not the first sentences
    assert len(experiments.training_subset(sentences[:5], 0.01)) == 1


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """One small NER tagger run with ELMo (1% of the tweets, 2 epochs), recorded into a fresh results file."""
    folder = tmp_path_factory.mktemp("experiments")
    options = ["--data", str(DATA), "--cache", str(folder / "cache"), "--results", str(folder / "results.jsonl")]
    arguments = ["tagger", "--task", "ner", "--fraction", "0.01", "--epochs", "2", "--seed", "3"]
    assert experiments.main(arguments + options) == 0
    return folder, options


def test_a_tagger_run_is_recorded_and_its_command_repeats_it_exactly(ner_run):
    folder, options = ner_run
    [record] = experiments.read_records(folder / "results.jsonl")
    assert record["task"] == "ner" and record["elmo"] == "frozen" and record["model"] == DEFAULT_MODEL
    assert record["train_sentences"] == 17 and record["epochs"] == 2 and 1 <= record["best_epoch"] <= 2
    for mix in ("input", "output"):
        weights = record["mix_weights"][mix]
        assert len(weights) == 4 and abs(sum(weights[:3]) - 1) < 1e-3  # 3 layer weights and gamma
    command = shlex.split(record["command"])
    assert command[:2] == ["python", "experiments/elmo_experiments.py"]
    assert experiments.main(command[2:] + options) == 0
    first, again = experiments.read_records(folder / "results.jsonl")
    assert {**again, "seconds": None} == {**first, "seconds": None}


def test_no_output_mix_puts_elmo_at_the_input_only_and_its_command_says_so(ner_run):
    folder, options = ner_run
    results = ["--results", str(folder / "input-only.jsonl")]
    arguments = ["tagger", "--task", "ner", "--fraction", "0.01", "--epochs", "1", "--seed", "3", "--no-output-mix"]
    assert experiments.main(arguments + options + results) == 0
    [record] = experiments.read_records(folder / "input-only.jsonl")
    assert record["output_mix"] is False and list(record["mix_weights"]) == ["input"]
    assert "--no-output-mix" in shlex.split(record["command"])
    tagger = experiments.Tagger(10, 5, (3, 8), 0.001, output_mix=False)
    assert list(tagger.mixes) == ["input"] and tagger.classifier.in_features == 2 * tagger.lstm.hidden_size


def test_cached_layers_are_the_biLMs_layers(ner_run):
    folder, _ = ner_run
    sentences = experiments.load_task("ner", DATA)["dev"]
    layers, offsets = experiments.bilm_layers(DEFAULT_MODEL, "ner", "dev", sentences, folder / "cache", 1)
    assert len(offsets) == len(sentences) + 1 and offsets[-1] == len(layers)
    model, tokenizer = ElmoModel.from_pretrained(DEFAULT_MODEL).eval(), ElmoTokenizer.from_pretrained(DEFAULT_MODEL)
    for index in (0, 7):
        with torch.no_grad():
            output = model(**tokenizer(sentences[index][0], is_split_into_words=True, return_tensors="pt"),
                           output_hidden_states=True)
        expected = torch.stack(output.hidden_states, dim=2)[0]
        torch.testing.assert_close(layers[offsets[index]:offsets[index + 1]].float(), expected, atol=2e-3, rtol=1e-3)


def test_grid_lists_every_run_once_in_order_and_skips_recorded_ones(tmp_path, monkeypatch):
    runs = experiments.grid_runs(["ner", "pos"], {"ner": "runs/adapted-ner"})
    keys = [tuple(sorted(run.items())) for run in runs]
    assert len(keys) == len(set(keys))
    # per task: 3 fractions x 3 seeds x (baseline, ELMo) + adapted (ner only) 9 + lambda=1 (3 seeds ner, 1 pos)
    assert sum(run["task"] == "ner" for run in runs) == 18 + 9 + 3
    assert sum(run["task"] == "pos" for run in runs) == 18 + 1
    assert {(run["task"], run["fraction"]) for run in runs if run.get("l2") == 1.0} == {("ner", 1.0), ("pos", 0.1)}
    assert runs[0] == dict(task="ner", elmo="none", fraction=1.0, seed=0)
    made = []
    monkeypatch.setattr(experiments, "train_tagger", lambda args: made.append(experiments.run_config(args)) or {
        **experiments.run_config(args), "dev": 0, "test": 0, "seconds": 0})
    monkeypatch.setattr(experiments, "grid_runs", lambda tasks, adapted: runs[:4])
    results = tmp_path / "results.jsonl"
    experiments.append_record(results, experiments.run_config(experiments.argparse.Namespace(**{
        **runs[1], "model": DEFAULT_MODEL, "l2": 0.001, "output_mix": True, "epochs": None})))
    assert experiments.main(["grid", "--probe-layers", "0", "--results", str(results)]) == 0
    assert [run["elmo"] for run in made] == ["none", "none", "frozen"] and len(made) == 3
    assert experiments.main(["grid", "--probe-layers", "0", "--results", str(results)]) == 0
    assert len(made) == 3  # everything recorded: nothing runs again


def test_report_prints_tables_and_writes_plots(tmp_path, capsys):
    records = []
    for task, offset in (("pos", 90.0), ("ner", 10.0)):
        for fraction in (0.01, 0.1, 1.0):
            for seed in (0, 1):
                records.append(dict(task=task, elmo="none", model=None, fraction=fraction, seed=seed, l2=None,
                                    test=offset + seed, seconds=1.0, mix_weights={}))
                for l2 in (0.001, 1.0):
                    weights = {"input": [0.2, 0.5, 0.3, 1.1], "output": [0.3, 0.3, 0.4, 0.9]}
                    records.append(dict(task=task, elmo="frozen", model=DEFAULT_MODEL, fraction=fraction, seed=seed,
                                        l2=l2, test=offset + 2 + seed, seconds=2.0, mix_weights=weights))
    records += [dict(probe="pos", model=DEFAULT_MODEL, layer=layer, test=80.0 + layer) for layer in range(3)]
    longer = {"input": [0.9, 0.05, 0.05, 1.0], "output": [0.9, 0.05, 0.05, 1.0]}  # kept out of the weights table
    records.append(dict(task="ner", elmo="frozen", model=DEFAULT_MODEL, fraction=1.0, seed=0, l2=0.001,
                        epochs_option=60, test=50.0, seconds=3.0, mix_weights=longer))
    records.append({**records[-1], "epochs_option": 90, "test": 52.0})
    records.append(dict(task="ner", elmo="frozen", model=DEFAULT_MODEL, fraction=1.0, seed=0, l2=0.001,
                        output_mix=False, epochs_option=60, test=40.0, seconds=3.0,
                        mix_weights={"input": longer["input"]}))
    report(records, tmp_path)
    printed = capsys.readouterr().out
    assert "| baseline (no ELMo) | 90.50 ± 0.71 (n=2) | 90.50 ± 0.71 (n=2) | 90.50 ± 0.71 (n=2) | 1 |" in printed
    assert "| ELMo (elmo-en-mini), lambda=1 | 12.50 ± 0.71 (n=2)" in printed
    cell = "50.00 ± 0.00 (n=1, 60 epochs)<br>52.00 ± 0.00 (n=1, 90 epochs)"  # one line per number of epochs
    assert f"| ELMo (elmo-en-mini), longer training |  |  | {cell} | 3 |" in printed
    assert "| ELMo (elmo-en-mini), input mix only, longer training |  |  | 40.00 ± 0.00 (n=1, 60 epochs) |" in printed
    assert "| input | 100% | 0.001 | 2 | 0.200 | 0.500 | 0.300 | 1.100 |" in printed
    assert "| output | 1% | 1 | 2 | 0.300 | 0.300 | 0.400 | 0.900 |" in printed
    assert "| 1: first biLSTM layer | 81.00 |" in printed  # records without "epochs" were made with 3
    for name in ("results_fractions.png", "results_layer_weights.png", "results_probe.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps(records)  # the records are plain JSON, as the results file holds them


def test_a_model_that_is_neither_a_folder_nor_packaged_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="--model nowhere is neither a model folder nor a packaged model"):
        experiments.main(["tagger", "--task", "ner", "--model", "nowhere", "--cache", str(tmp_path)])


def test_a_record_cut_short_is_a_clear_error_naming_its_line(tmp_path):
    results = tmp_path / "results.jsonl"
    experiments.append_record(results, {"task": "ner", "test": 1.0})
    with results.open("a") as file:
        file.write('{"task": "ner", "te')  # what a run killed while appending leaves behind
    with pytest.raises(SystemExit, match=r"line 2 of .*results.jsonl is not a JSON record .* Remove that line"):
        experiments.read_records(results)
    with pytest.raises(SystemExit, match="line 2"):
        experiments.main(["grid", "--results", str(results), "--probe-layers", "0"])


def test_adapt_never_overwrites_its_input_model_nor_a_foreign_text_file(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(experiments.model_folder(DEFAULT_MODEL), model)
    weights = (model / "model.safetensors").read_bytes()
    arguments = ["adapt", "--task", "ner", "--data", str(DATA), "--model", str(model), "--output", str(model),
                 "--", "--max-steps", "1"]
    with pytest.raises(SystemExit, match="elmo-hf pretrain stopped with exit status"):
        experiments.main(arguments)
    assert (model / "model.safetensors").read_bytes() == weights
    notes = tmp_path / "notes-train.txt"
    notes.write_text("my own notes\n")
    with pytest.raises(SystemExit, match="notes-train.txt exists and holds other text"):
        experiments.main(["adapt", "--task", "ner", "--data", str(DATA), "--output", str(tmp_path / "notes")])
    assert notes.read_text() == "my own notes\n" and not (tmp_path / "notes-dev.txt").exists()
