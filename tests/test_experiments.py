"""experiments/elmo_experiments.py: fixed training subsets, the cached biLM layers, a tagger run that its recorded
command repeats exactly, the grid's order and resumption, the report's tables and plots, and the checks of what
the vectors mean (`layers`: variance in 3 components and neighbours; `senses`: nearest-neighbour word senses)."""

import json
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments import elmo_experiments as experiments  # noqa: E402
from experiments.report import report  # noqa: E402

from elmo_hf import DEFAULT_MODEL, ElmoModel, ElmoTokenizer  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def restore_threads():
    """The experiments set torch's thread count; the tests after them get theirs back."""
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
    probed = []
    monkeypatch.setattr(experiments, "probe", lambda args: probed.append(args.layer) or {
        "probe": "pos", "model": args.model, "weights": experiments.model_digest(args.model), "layer": args.layer})
    experiments.append_record(results, {"probe": "pos", "model": DEFAULT_MODEL, "weights": "an0ther0ne00", "layer": 0})
    assert experiments.main(["grid", "--probe-layers", "1", "--results", str(results)]) == 0
    assert probed == [0]  # the same name with other weights (a retrained model) is probed again
    assert experiments.main(["grid", "--probe-layers", "1", "--results", str(results)]) == 0
    assert probed == [0]


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
    records.append(dict(probe="pos", model=DEFAULT_MODEL, weights="retrained12", layer=1, test=90.0))  # same name
    longer = {"input": [0.9, 0.05, 0.05, 1.0], "output": [0.9, 0.05, 0.05, 1.0]}  # kept out of the weights table
    records.append(dict(task="ner", elmo="frozen", model=DEFAULT_MODEL, fraction=1.0, seed=0, l2=0.001,
                        epochs_option=60, test=50.0, seconds=3.0, mix_weights=longer))
    records.append({**records[-1], "epochs_option": 90, "test": 52.0})
    records.append(dict(task="ner", elmo="frozen", model=DEFAULT_MODEL, fraction=1.0, seed=0, l2=0.001,
                        output_mix=False, epochs_option=60, test=40.0, seconds=3.0,
                        mix_weights={"input": longer["input"]}))
    records.append(dict(task="pos", elmo="frozen", model="/runs/en-mini", weights="595288c134d9", fraction=1.0,
                        seed=0, l2=0.001, epochs_option=6, test=97.0, seconds=4.0, mix_weights=weights))
    for weights, share in (("old", 0.99), ("new", 0.4)):  # the vectors' checks of a model and its retrained self
        records.append(dict(check="layers", model=DEFAULT_MODEL, weights=weights, top3_variance=[share, 0.7, 0.5],
                            mean_cosine=[0.8, 0.5, 0.4]))
    records.append(dict(check="senses", model=DEFAULT_MODEL, weights="new", accuracy={"all": [0.4, 0.9, 0.95]},
                        accuracy_sense_mean={"all": [0.5, 0.8, 0.85]},
                        bank_cosines={"river / money": [1.0, 0.5, 0.25]}))
    report(records, tmp_path)
    printed = capsys.readouterr().out
    assert f"| per layer (0, 1, 2) | {DEFAULT_MODEL} (old) | {DEFAULT_MODEL} (new) |" in printed
    assert "| variance in the top 3 components | 99.0% / 70.0% / 50.0% | 40.0% / 70.0% / 50.0% |" in printed
    assert "| sense accuracy, nearest use |  | 0.40 / 0.90 / 0.95 |" in printed
    assert "| sense accuracy, nearest sense mean |  | 0.50 / 0.80 / 0.85 |" in printed
    assert "| cosine of bank, river / money |  | 1.000 / 0.500 / 0.250 |" in printed
    assert "| baseline (no ELMo) | 90.50 ± 0.71 (n=2) | 90.50 ± 0.71 (n=2) | 90.50 ± 0.71 (n=2) | 1 |" in printed
    assert "| ELMo (elmo-en-mini), lambda=1 | 12.50 ± 0.71 (n=2)" in printed
    cell = "50.00 ± 0.00 (n=1, 60 epochs)<br>52.00 ± 0.00 (n=1, 90 epochs)"  # one line per number of epochs
    assert f"| ELMo (elmo-en-mini), longer training |  |  | {cell} | 3 |" in printed
    assert "| ELMo (elmo-en-mini), input mix only, longer training |  |  | 40.00 ± 0.00 (n=1, 60 epochs) |" in printed
    assert "| ELMo (elmo-en-mini), longer training |  |  | 97.00 ± 0.00 (n=1, 6 epochs) | 4 |" in printed  # named
    assert f"| {DEFAULT_MODEL} | input | 100% | 0.001 | 2 | 0.200 | 0.500 | 0.300 | 1.100 |" in printed
    assert f"| {DEFAULT_MODEL} | output | 1% | 1 | 2 | 0.300 | 0.300 | 0.400 | 0.900 |" in printed
    assert "| 1: first biLSTM layer | 81.00 | 90.00 |" in printed  # records without "epochs" were made with 3
    assert "| 0: token layer (character CNN) | 80.00 |  |" in printed
    assert f"linear probe, {DEFAULT_MODEL} (retrained12), 3 epochs |" in printed
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


def test_top_components_share_is_the_variance_the_top_principal_components_hold():
    generator = np.random.default_rng(0)
    scales = np.array([5.0, 3.0, 2.0, 1.0, 1.0, 0.5, 0.5, 0.25])
    vectors = generator.normal(size=(400, 8)) * scales @ np.linalg.qr(generator.normal(size=(8, 8)))[0] + 7.0
    eigenvalues = np.sort(np.linalg.eigvalsh(np.cov(vectors, rowvar=False)))[::-1]  # the principal variances
    share = experiments.top_components_share(vectors)
    assert 0 <= share <= 1 and share == pytest.approx(eigenvalues[:3].sum() / eigenvalues.sum(), rel=1e-9)
    flat = generator.normal(size=(50, 3)) @ generator.normal(size=(3, 8))  # a set inside 3 dimensions
    assert experiments.top_components_share(flat) == pytest.approx(1.0)
    assert experiments.top_components_share(generator.normal(size=(20000, 30))) == pytest.approx(0.1, abs=0.01)


def test_nearest_sense_accuracy_of_constructed_uses():
    senses = ["river", "river", "money", "money"]
    apart = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    assert experiments.nearest_sense_accuracy(apart, senses) == 1.0
    assert experiments.nearest_sense_accuracy(apart, ["river", "money", "river", "money"]) == 0.0
    # one vector for every use (a context-free layer): each use's nearest are all others, so it scores chance
    assert experiments.nearest_sense_accuracy(np.ones((4, 2)), senses) == pytest.approx(1 / 3)
    # the first use has two equally near uses, one of each sense (0.5); the second's nearest is the first (1),
    # the third's too, of the other sense (0)
    tied = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert experiments.nearest_sense_accuracy(tied, ["a", "a", "b"]) == pytest.approx((0.5 + 1 + 0) / 3)


def test_nearest_mean_accuracy_of_constructed_uses():
    apart = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    assert experiments.nearest_mean_accuracy(apart, ["river", "river", "money", "money"]) == 1.0
    assert experiments.nearest_mean_accuracy(np.ones((6, 2)), list("aabbcc")) == pytest.approx(1 / 3)  # all tied
    # the second a use is nearer b's mean (0.3, 0.9), cosine 0.82, than the other a use, 0.8; likewise the second b
    # use: the first use of each sense is right, the second wrong
    crossed = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    assert experiments.nearest_mean_accuracy(crossed, ["a", "a", "b", "b"]) == 0.5


def test_frequent_words_and_their_uses_spread_over_the_corpus(tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text("".join(f"x y{index} , .\n" for index in range(10)) + "y3 y3 z\n")
    assert experiments.frequent_words({"x": 3, ",": 9, "b": 2, "a": 2, "1": 5}, 3) == ["x", "b", "a"]
    words, sentences, positions = experiments.spread_uses(corpus, 2, ("z",), 5)
    assert words == ["x", "y3"]
    # the sentences that hold a chosen use: lines 0, 2, 4, 6, 8 (uses 0, 2, 4, 6, 8 of x), 3 and 10 (y3's three)
    expected = [f"x y{index} , ." for index in (0, 2, 3, 4, 6, 8)] + ["y3 y3 z"]
    assert [" ".join(words) for words in sentences] == expected
    assert positions["x"] == [(0, 0), (1, 0), (3, 0), (4, 0), (5, 0)]
    assert positions["y3"] == [(2, 1), (6, 0), (6, 1)] and positions["z"] == [(6, 2)]
    with pytest.raises(SystemExit, match="the probe words w never occur in"):
        experiments.spread_uses(corpus, 2, ("w",), 5)
    with pytest.raises(SystemExit, match="nowhere.txt not found: --corpus must be the corpus's train.txt"):
        experiments.main(["layers", "--corpus", str(tmp_path / "nowhere.txt"), "--results", str(tmp_path / "r")])
    assert not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def wide_folder(tmp_path_factory) -> Path:
    """A tiny biLM (`tiny_config`) with weights drawn from N(0, 0.3): the default initialisation gives biLSTM layers
    of about 1e-7, below what the float16 layer cache holds."""
    path = tmp_path_factory.mktemp("wide-elmo")
    torch.manual_seed(0)
    model = ElmoModel(tiny_config())
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.3)
    model.save_pretrained(path)
    ElmoTokenizer().save_pretrained(path)
    return path


def direct_word_vectors(folder: Path, sentences: list[list[str]], positions: dict[str, list[tuple[int, int]]]
                        ) -> dict[str, np.ndarray]:
    """Each word's mean layers over its uses, straight from the model: `(num_layers + 1, dim)` per word."""
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        layers = [torch.stack(model(**tokenizer(words, is_split_into_words=True, return_tensors="pt"),
                                    output_hidden_states=True).hidden_states, dim=2)[0] for words in sentences]
    return {word: torch.stack([layers[s][t] for s, t in uses]).mean(0).numpy() for word, uses in positions.items()}


def test_layers_records_the_variance_share_and_neighbours_of_the_models_vectors(wide_folder, tmp_path, capsys):
    corpus = tmp_path / "train.txt"
    filler = "the river bank said nine men walked to the king with money , able to bit a good ship of war"
    corpus.write_text(f"{filler} .\nthe whale ran off the Bible and the king said no .\n{filler} again .\n" * 3)
    options = ["--model", str(wide_folder), "--corpus", str(corpus), "--words", "12", "--uses", "3",
               "--cache", str(tmp_path / "cache"), "--results", str(tmp_path / "results.jsonl")]
    assert experiments.main(["layers", *options]) == 0
    [record] = experiments.read_records(tmp_path / "results.jsonl")
    assert record["check"] == "layers" and record["words"] == 12 and len(record["top3_variance"]) == 3
    words, sentences, positions = experiments.spread_uses(corpus, 12, experiments.PROBE_WORDS, 3)
    vectors = direct_word_vectors(wide_folder, sentences, positions)
    frequent = np.stack([vectors[word] for word in words])
    for layer, share in enumerate(record["top3_variance"]):
        eigenvalues = np.sort(np.linalg.eigvalsh(np.cov(frequent[:, layer], rowvar=False)))[::-1]
        assert 0 <= share <= 1 and share == pytest.approx(eigenvalues[:3].sum() / eigenvalues.sum(), abs=2e-3)
    for word, by_layer in record["neighbours"].items():
        for layer, nearest in enumerate(by_layer):
            assert word not in [other for other, _ in nearest] and len(nearest) == 5
            assert [cosine for _, cosine in nearest] == sorted((cosine for _, cosine in nearest), reverse=True)
            other, cosine = nearest[0]
            a, b = vectors[word][layer], vectors[other][layer]
            assert cosine == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b), abs=2e-3)
    assert "| variance in the top 3 components of 12 frequent words |" in capsys.readouterr().out
    command = shlex.split(record["command"])
    again_options = ["--cache", str(tmp_path / "cache"), "--results", str(tmp_path / "again")]
    assert experiments.main(command[2:] + again_options) == 0
    [again] = experiments.read_records(tmp_path / "again")
    assert {**again, "seconds": None} == {**record, "seconds": None}


def test_senses_scores_chance_on_the_context_free_layer_and_names_a_bad_line(wide_folder, tmp_path, capsys):
    uses = tmp_path / "senses.tsv"
    rows = ["# a comment", "word\tsense\tindex\tsource\tsentence"]
    rows += [f"bank\triver\t{index}\tmine:{index}\t" + " ".join(["the"] * index + ["bank", "of", "the", "river"])
             for index in range(3)]
    rows += [f"bank\tmoney\t1\tmine:9\tthe bank lent {amount} dollars ." for amount in ("ten", "five")]
    uses.write_text("\n".join(rows) + "\n")
    options = ["--model", str(wide_folder), "--senses", str(uses), "--cache", str(tmp_path / "cache"),
               "--results", str(tmp_path / "results.jsonl")]
    assert experiments.main(["senses", *options]) == 0
    [record] = experiments.read_records(tmp_path / "results.jsonl")
    assert record["uses"] == 5 and record["chance"]["bank"] == pytest.approx((3 * 2 / 4 + 2 * 1 / 4) / 5, abs=1e-4)
    assert record["accuracy"]["bank"][0] == record["chance"]["bank"]  # one vector per word: nothing to tell apart
    assert record["accuracy_sense_mean"]["bank"][0] == 0.5  # every sense mean ties: half a vote each
    assert all(0 <= value <= 1 for value in record["accuracy"]["all"]) and len(record["accuracy"]["all"]) == 3
    assert record["bank_cosines"]["river / money"][0] == pytest.approx(1.0, abs=1e-3)
    assert "| bank | 0.40 | 0.40 |" in capsys.readouterr().out  # chance, then layer 0 by nearest use
    uses.write_text("\n".join(rows + ["bank\tmoney\t2\tmine:10\tthe bank lent money ."]) + "\n")
    with pytest.raises(SystemExit, match="line 8 of .*senses.tsv is not word, sense, index, source, sentence"):
        experiments.main(["senses", *options])
    uses.write_text("\n".join(rows + ["plant\tfactory\t1\tmine:11\tthe plant closed ."]) + "\n")
    with pytest.raises(SystemExit, match="senses.tsv has one use only of plant: .* give each word two or more"):
        experiments.main(["senses", *options])
    uses.write_text("\n".join(rows[2:]) + "\n")
    with pytest.raises(SystemExit, match="senses.tsv does not start with the tab-separated header line"):
        experiments.main(["senses", *options])


def test_the_shipped_senses_are_well_formed_and_have_two_senses_a_word():
    uses = experiments.read_senses(experiments.ROOT / "experiments" / "senses.tsv")
    senses = {}
    for use in uses:
        senses.setdefault(use["word"], []).append(use["sense"])
        assert not use["source"].startswith("brown/") or use["source"].split(":")[0][-1] not in "09"  # train files
        assert use["source"].split("/")[0] in ("brown", "sotu", "mobydick")
        assert use["tokens"][use["index"]] == use["word"]  # lower case: one token vector per word
    assert all(len(set(labels)) >= 2 and min(map(labels.count, set(labels))) >= 3 for labels in senses.values())
