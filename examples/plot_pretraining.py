"""Draw the loss and perplexity curves of an `elmo-hf pretrain` run as a PNG.

    python examples/plot_pretraining.py OUTPUT [--png curves.png]

OUTPUT is the finished model folder (its `training_log.json`) or a checkpoint folder (its `trainer_state.json`),
so a run can be plotted while it is still going. Default PNG: `OUTPUT/training_curves.png`.
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


def plot(log_history: list[dict], png: Path) -> None:
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for key, index, label in CURVES:
        points = [(entry["step"], entry[key]) for entry in log_history if key in entry]
        if points:
            axes[index].plot(*zip(*points), label=label, marker="." if key.startswith("eval") else None)
    axes[0].set(xlabel="step", ylabel="mean NLL per word (nats)")
    axes[1].set(xlabel="step", ylabel="perplexity", yscale="log")
    for axis in axes:
        if axis.lines:
            axis.legend()
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(png, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--png", type=Path)
    args = parser.parse_args()
    png = args.png or args.folder / "training_curves.png"
    plot(read_log(args.folder), png)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
