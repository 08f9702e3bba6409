"""Draw the loss and perplexity curves of an `elmo-hf pretrain` run as a PNG, against epochs of the training text.

    python examples/plot_pretraining.py OUTPUT [OUTPUT ...] [--png curves.png]

OUTPUT is the finished model folder (its `training_log.json`) or a checkpoint folder (its `trainer_state.json`),
so a run can be plotted while it is still going. Several folders draw a run continued by later ones (each started
`--from-pretrained` the one before): each folder's epochs count on from where the previous one ended, and a dotted
line marks where it starts. Default PNG: `training_curves.png` in the last folder.
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CURVES = (
    ("loss", 0, "train loss"),
    ("eval_loss", 0, "held-out loss"),
    ("forward_perplexity", 1, "train forward"),
    ("backward_perplexity", 1, "train backward"),
    ("eval_forward_perplexity", 1, "held-out forward"),
    ("eval_backward_perplexity", 1, "held-out backward"),
)


def read_log(folder: Path) -> list[dict]:
    if (folder / "training_log.json").is_file():
        return json.loads((folder / "training_log.json").read_text())
    if (folder / "trainer_state.json").is_file():
        return json.loads((folder / "trainer_state.json").read_text())["log_history"]
    raise SystemExit(f"error: {folder} has neither training_log.json nor trainer_state.json.")


def continued(histories: list[list[dict]]) -> tuple[list[dict], list[float]]:
    """The runs' log entries as one history, each run's epochs offset by the epochs of the runs before it, and the
    epochs at which the later runs start."""
    entries, starts, offset = [], [], 0.0
    for history in histories:
        if entries:
            starts.append(offset)
        entries += [{**entry, "epoch": offset + entry["epoch"]} for entry in history if "epoch" in entry]
        offset = entries[-1]["epoch"] if entries else offset
    return entries, starts


def plot(histories: list[list[dict]], png: Path) -> None:
    log_history, starts = continued(histories)
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for key, index, label in CURVES:
        points = [(entry["epoch"], entry[key]) for entry in log_history if key in entry]
        if points:
            axes[index].plot(*zip(*points), label=label, marker="." if key.startswith("eval") else None)
    axes[0].set(xlabel="epochs of the training text", ylabel="mean NLL per word (nats)")
    axes[1].set(xlabel="epochs of the training text", ylabel="perplexity", yscale="log")
    for axis in axes:
        for start in starts:
            axis.axvline(start, color="gray", linestyle=":")
        if axis.lines:
            axis.legend()
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(png, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", type=Path, nargs="+", metavar="folder")
    parser.add_argument("--png", type=Path)
    args = parser.parse_args()
    png = args.png or args.folders[-1] / "training_curves.png"
    plot([read_log(folder) for folder in args.folders], png)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
