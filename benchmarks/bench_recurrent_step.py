"""Does `torch.compile` or TorchScript speed up the LSTM's recurrent step on this machine? One table, one run.

    python benchmarks/bench_recurrent_step.py                      # original architecture, rows 1, 8, 64
    python benchmarks/bench_recurrent_step.py --model small --threads 1

The recurrent step (`elmo_hf.modeling_elmo.lstm_step`: hidden-to-gate product, element-wise cell update,
projection, clipping) is the sequential part of ELMo, run once per time step, layer and direction; everything else
is a few large matrix products. This times one step with random weights of a published architecture, without
autograd, for each way of running it:
- eager: as `ElmoModel` runs it, with the recurrent weights in oneDNN's layout (`onednn_weight`);
- eager, plain weights: the same with the weights handed to oneDNN in their stored layout at every call;
- TorchScript cell update: `lstm_cell_update` (the element-wise part) compiled by `torch.jit.script`;
- torch.compile cell update: `lstm_cell_update` compiled by Inductor (its C++ backend fuses the element-wise ops);
- torch.compile step: the whole `lstm_step` compiled by Inductor from aten operations (plain weights; Inductor
  chooses the kernels of the products and fuses the rest).
The compiled variants are specialised to the row count (`dynamic=False`), their best case; the first call's
compile time is reported. Each row gives microseconds per step (median of `--repeats` timings of `--steps`
steps), the ratio to eager, and the max abs difference from eager.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_inference import ARCHITECTURES

from elmo_hf import ElmoConfig, ElmoModel, modeling_elmo
from elmo_hf.modeling_elmo import lstm_cell_update, lstm_step, onednn_weight


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="original", choices=sorted(ARCHITECTURES))
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--steps", type=int, default=50, help="steps per timing")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = ElmoConfig(**ARCHITECTURES[args.model])
    cell_module = ElmoModel(config).eval().bilm.layers[0].forward_cell
    hidden_to_gates, projection = cell_module.hidden_to_gates.weight, cell_module.projection.weight
    clips = (config.cell_clip, config.projection_clip)
    onednn = (onednn_weight(hidden_to_gates), onednn_weight(projection))  # once, as the model does per call

    def eager(gate_inputs, hidden, cell):
        return lstm_step(gate_inputs, hidden, cell, hidden_to_gates, projection, *clips, onednn)

    def plain_weights(gate_inputs, hidden, cell):
        return lstm_step(gate_inputs, hidden, cell, hidden_to_gates, projection, *clips)

    def patched(step, **replacements):
        """`step` with functions of `modeling_elmo` replaced while it runs (the step looks them up at every call)."""

        def run(gate_inputs, hidden, cell):
            saved = {name: getattr(modeling_elmo, name) for name in replacements}
            for name, function in replacements.items():
                setattr(modeling_elmo, name, function)
            try:
                return step(gate_inputs, hidden, cell)
            finally:
                for name, function in saved.items():
                    setattr(modeling_elmo, name, function)

        return run

    print(
        f"torch {torch.__version__}, {args.threads} threads, {args.model} (lstm_dim {config.lstm_dim}, "
        f"projection_dim {config.projection_dim}), float32, inference mode"
    )
    print("| rows | variant | us/step | vs eager | first call s | max abs diff vs eager |")
    print("|---|---|---|---|---|---|")
    with torch.inference_mode():
        for rows in args.rows:
            torch._dynamo.reset()
            variants = {
                "eager (elmo_hf)": eager,
                "eager, plain weights": plain_weights,
                "TorchScript cell update": patched(eager, lstm_cell_update=torch.jit.script(lstm_cell_update)),
                "torch.compile cell update": patched(
                    eager, lstm_cell_update=torch.compile(lstm_cell_update, dynamic=False)
                ),
                # Inductor traces aten products (`linear` off the oneDNN path) and chooses its own kernels.
                "torch.compile step": patched(
                    torch.compile(plain_weights, dynamic=False), onednn_linear_available=lambda *tensors: False
                ),
            }
            inputs = (
                torch.randn(rows, 4 * config.lstm_dim),
                torch.randn(rows, config.projection_dim) * 0.1,
                torch.randn(rows, config.lstm_dim),
            )
            reference = eager(*inputs)
            eager_us = None
            for name, step in variants.items():
                start = time.perf_counter()
                outputs = step(*inputs)
                first_call = time.perf_counter() - start
                diff = max((a - b).abs().max().item() for a, b in zip(outputs, reference))
                timings = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    for _ in range(args.steps):
                        step(*inputs)
                    timings.append((time.perf_counter() - start) / args.steps * 1e6)
                us = statistics.median(timings)
                eager_us = eager_us or us
                print(f"| {rows} | {name} | {us:.0f} | {eager_us / us:.2f}x | {first_call:.2f} | {diff:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
