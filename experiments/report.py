"""Tables and plots of the experiment records (`python experiments/elmo_experiments.py report`).

Prints markdown tables (mean and standard deviation over seeds; the vectors' checks per model) and writes three plots
into the docs folder: `results_fractions.png` (test score against training fraction, with and without ELMo),
`results_probe.png` (linear POS probe accuracy per biLM layer) and `results_layer_weights.png` (the learned
softmax-normalised layer weights of each task's two mixes, with lambda = 0.001 and 1).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

METRIC = {"pos": "accuracy (%)", "ner": "entity F1 (%)"}
LONGER = ", longer training"  # the end of the label of runs trained with `--epochs`
TASK_NAME = {"pos": "Brown POS", "ner": "WNUT-16 NER"}
# Names of models by their weights' digest, where one name was given to different weights: the packaged elmo-en-mini
# before its retraining (issue 27), and after it (the trained float32 folder and the packaged bfloat16 weights).
MODEL_NAMES = {"a75430725dd8": "elmo-en-mini before issue 27, 0.61 epochs", "595288c134d9": "elmo-en-mini",
               "b2f19c02f5cc": "elmo-en-mini"}


def config_name(record: dict) -> str:
    """How a tagger run is labelled in tables and plots (runs trained with `--epochs`, or with ELMo at the input
    only, apart from the others)."""
    epochs = LONGER if record.get("epochs_option") else ""
    if record["elmo"] == "none":
        return f"baseline (no ELMo){epochs}"
    model = model_name(record)
    name = f"ELMo ({model})" if not model.startswith("adapted") else f"ELMo adapted to the task ({model})"
    name += "" if record["l2"] == 0.001 else f", lambda={record['l2']:g}"
    return name + ("" if record.get("output_mix", True) else ", input mix only") + epochs


def model_name(record: dict) -> str:
    """The name a record's biLM is shown under: its weights' name in `MODEL_NAMES`, else its folder's name followed
    by its weights' digest where the record has one (a retrained model of the same name is another model)."""
    weights = record.get("weights")
    if weights in MODEL_NAMES:
        return MODEL_NAMES[weights]
    return Path(record["model"]).name + (f" ({weights})" if weights else "")


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def tagger_table(records: list[dict], task: str) -> tuple[str, dict[str, dict[float, list[float]]]]:
    """A markdown table of test scores by configuration (rows) and training fraction (columns); a cell of runs
    trained with `--epochs` names the epochs, one line per number of epochs. Returns the table and, for the plot,
    each row's scores by fraction (of its longest training where a cell holds several)."""
    scores: dict[str, dict[float, dict[int | None, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    seconds: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if record.get("task") == task:
            name = config_name(record)
            scores[name][record["fraction"]][record.get("epochs_option")].append(record["test"])
            seconds[name].append(record["seconds"])
    fractions = sorted({fraction for by_fraction in scores.values() for fraction in by_fraction})
    lines = [f"| {TASK_NAME[task]}, test {METRIC[task]} | "
             + " | ".join(f"{fraction:.0%} of train" for fraction in fractions) + " | seconds per run |",
             "|---|" + "---|" * (len(fractions) + 1)]
    # the grid's rows first, then the longer-trained ones; the baseline first in each, the rest as recorded
    rows = sorted(scores.items(), key=lambda row: (row[0].endswith(LONGER), "no ELMo" not in row[0]))
    for name, by_fraction in rows:
        cells = []
        for fraction in fractions:
            by_epochs = by_fraction.get(fraction, {})
            cells.append("<br>".join(
                f"{mean_std(values)[0]:.2f} ± {mean_std(values)[1]:.2f} (n={len(values)}"
                + (f", {epochs} epochs)" if epochs else ")") for epochs, values in sorted(by_epochs.items())))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {statistics.mean(seconds[name]):.0f} |")
    longest = {name: {fraction: by_epochs[max(by_epochs, key=lambda epochs: epochs or 0)]
                      for fraction, by_epochs in by_fraction.items()} for name, by_fraction in rows}
    return "\n".join(lines), longest


def weights_table(records: list[dict], task: str) -> tuple[str, dict[tuple[str, float, float, str], list[float]]]:
    """The mean learned layer weights (and gamma) of both mixes of each unadapted model's runs with the default
    epochs: on the full training data, and at every fraction where the L2 comparison (lambda other than 0.001) ran."""
    runs = [record for record in records if record.get("task") == task and record["elmo"] == "frozen"
            and not Path(record["model"]).name.startswith("adapted") and not record.get("epochs_option")
            and record.get("output_mix", True)]
    fractions = {1.0} | {record["fraction"] for record in runs if record["l2"] != 0.001}
    collected: dict[tuple[str, float, float, str], list[list[float]]] = defaultdict(list)
    for record in runs:
        if record["fraction"] in fractions:
            for mix, weights in record["mix_weights"].items():
                collected[(model_name(record), record["fraction"], record["l2"], mix)].append(weights)
    means = {key: [statistics.mean(column) for column in zip(*rows)] for key, rows in sorted(collected.items())}
    header = "| training data | lambda | runs | layer 0 (tokens) | layer 1 | layer 2 | gamma |"
    lines = [f"| biLM | {TASK_NAME[task]} mix {header}", "|---|---|---|---|---|---|---|---|---|"]
    for (model, fraction, l2, mix), values in means.items():
        lines.append(f"| {model} | {mix} | {fraction:.0%} | {l2:g} | {len(collected[(model, fraction, l2, mix)])} | "
                     + " | ".join(f"{value:.3f}" for value in values) + " |")
    return "\n".join(lines), means


def probe_table(records: list[dict]) -> tuple[str, dict[str, dict[int, float]]]:
    """Linear probe accuracy per layer, a column per model (named by `model_name`, so a retrained model of the same
    name gets its own column) and number of probe epochs; returns each model's longest-trained column."""
    accuracy: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    for record in records:
        if record.get("probe") == "pos":
            model = model_name(record)
            accuracy[(model, record.get("epochs", 3))][record["layer"]] = record["test"]
    names = {0: "token layer (character CNN)", 1: "first biLSTM layer", 2: "second biLSTM layer"}
    models = list(dict.fromkeys(model for model, _ in accuracy))
    columns = sorted(accuracy, key=lambda column: (models.index(column[0]), column[1]))
    lines = ["| layer | " + " | ".join(f"Brown POS test accuracy (%), linear probe, {model}, {epochs} epochs"
                                        for model, epochs in columns) + " |", "|---|" + "---|" * len(columns)]
    for layer in sorted({layer for by_layer in accuracy.values() for layer in by_layer}):
        cells = [f"{accuracy[epochs][layer]:.2f}" if layer in accuracy[epochs] else "" for epochs in columns]
        lines.append(f"| {layer}: {names.get(layer, '')} | " + " | ".join(cells) + " |")
    longest = {model: epochs for model, epochs in columns}  # columns are sorted by epochs within a model
    return "\n".join(lines), {model: accuracy[(model, epochs)] for model, epochs in longest.items()}


def vectors_table(records: list[dict]) -> str:
    """The `layers` and `senses` checks per layer, a column per model's weights (the latest record of each check and
    weights counts): old and retrained models side by side."""
    latest = {(record["check"], record["model"], record["weights"]): record for record in records if "check" in record}
    models = list(dict.fromkeys((model, weights) for _, model, weights in latest))
    if not models:
        return ""
    rows: dict[str, dict[tuple[str, str], list[str]]] = defaultdict(dict)
    for (check, model, weights), record in latest.items():
        if check == "layers":
            rows["variance in the top 3 components"][(model, weights)] = [
                f"{value:.1%}" for value in record["top3_variance"]]
            rows["mean cosine of two frequent words"][(model, weights)] = [
                f"{value:.2f}" for value in record["mean_cosine"]]
        else:
            rows["sense accuracy, nearest use"][(model, weights)] = [
                f"{value:.2f}" for value in record["accuracy"]["all"]]
            rows["sense accuracy, nearest sense mean"][(model, weights)] = [
                f"{value:.2f}" for value in record["accuracy_sense_mean"]["all"]]
            for pair, values in record["bank_cosines"].items():
                rows[f"cosine of bank, {pair}"][(model, weights)] = [f"{value:.3f}" for value in values]
    lines = ["| per layer (0, 1, 2) | " + " | ".join(
        model_name({"model": model, "weights": weights}) for model, weights in models) + " |",
             "|---|" + "---|" * len(models)]
    for name, by_model in rows.items():
        lines.append(f"| {name} | " + " | ".join(" / ".join(by_model.get(model, [])) for model in models) + " |")
    return "\n".join(lines)


def report(records: list[dict], docs: Path) -> None:
    """Print the tables and write the plots into `docs`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 6))
    weight_figure, weight_axes = plt.subplots(1, 2, figsize=(11, 4))
    for column, task in enumerate(("pos", "ner")):
        if not any(record.get("task") == task for record in records):
            continue
        table, scores = tagger_table(records, task)
        print(table, end="\n\n")
        for index, (name, by_fraction) in enumerate(scores.items()):  # tab20: no colour twice in 20 rows
            fractions = sorted(by_fraction)
            stats = [mean_std(by_fraction[fraction]) for fraction in fractions]
            axes[column].errorbar([100 * f for f in fractions], [m for m, _ in stats], yerr=[s for _, s in stats],
                                  marker="o", capsize=3, label=name, color=plt.cm.tab20(index % 20),
                                  linestyle="--" if name.endswith(LONGER) else "-")
        axes[column].set(xscale="log", xlabel="training data used (%)", ylabel=f"test {METRIC[task]}",
                         title=TASK_NAME[task])
        axes[column].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15))
        table, means = weights_table(records, task)
        print(table, end="\n\n")
        width = 0.8 / max(len(means), 1)
        for index, ((model, fraction, l2, mix), values) in enumerate(means.items()):
            positions = [layer + index * width for layer in range(len(values) - 1)]
            weight_axes[column].bar(positions, values[:-1], width,
                                    label=f"{model}: {mix} mix, {fraction:.0%} of train, lambda={l2:g}")
        weight_axes[column].set(xticks=[0.3, 1.3, 2.3], xticklabels=["layer 0", "layer 1", "layer 2"],
                                ylabel="softmax-normalised weight", title=TASK_NAME[task])
        weight_axes[column].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(docs / "results_fractions.png", dpi=110)
    weight_figure.tight_layout()
    weight_figure.savefig(docs / "results_layer_weights.png", dpi=110)
    table, accuracy = probe_table(records)
    print(table)
    table = vectors_table(records)
    if table:
        print("\n" + table)
    if accuracy:
        probe_figure, probe_axis = plt.subplots(figsize=(6, 3.5))
        width = 0.8 / len(accuracy)
        for index, (model, by_layer) in enumerate(accuracy.items()):
            layers = sorted(by_layer)
            probe_axis.bar([layer + index * width for layer in layers], [by_layer[layer] for layer in layers],
                           width, label=model)
        lowest = min(value for by_layer in accuracy.values() for value in by_layer.values())
        probe_axis.set(xticks=[layer + 0.4 - width / 2 for layer in layers],
                       xticklabels=[f"layer {layer}" for layer in layers], ylim=(lowest - 5, 100),
                       ylabel="test accuracy (%)",
                       title="Brown POS, linear probe per biLM layer")
        probe_axis.legend(fontsize=7)
        probe_figure.tight_layout()
        probe_figure.savefig(docs / "results_probe.png", dpi=110)
