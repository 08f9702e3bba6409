"""Does `torch.compile` or TorchScript speed up the LSTM's recurrent step on this machine? One table, one run.

    python benchmarks/bench_recurrent_step.py                      # original architecture, rows 1, 8, 64
    python benchmarks/bench_recurrent_step.py --model small --threads 1

The recurrent step (hidden-to-gate product, element-wise cell update, projection, clipping) is the sequential part of
ELMo, run once per time step, layer and direction; everything else is a few large matrix products. This times one
step with random weights of a published architecture, without autograd, for each way of running it:
- CPU kernel: `elmo_hf.cpu_kernels.lstm_step` as `ElmoModel` runs it, each product by the kernel timed fastest for
  its row count, on weights reordered into oneDNN's layout where that pays over 100 steps;
- reference: `reference_elmo.lstm_step` on the cell's own `nn.Linear` layers (aten's products);
- TorchScript cell update: the CPU kernel with `lstm_cell_update` (the element-wise part) compiled by
  `torch.jit.script`;
- torch.compile cell update: the same compiled by Inductor (its C++ backend fuses the element-wise ops);
- torch.compile step: the reference `step` compiled by Inductor (it chooses the products' kernels and fuses the rest).
The compiled variants are specialised to the row count (`dynamic=False`), their best case; the first call's compile
time is reported. Each row gives microseconds per step (median of `--repeats` timings of `--steps` steps), the ratio to
the CPU kernel, and the max abs difference from it.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_inference import ARCHITECTURES

from elmo_hf import ElmoConfig, ElmoModel, cpu_kernels
from elmo_hf.cpu_kernels import RecurrentLinear, ReorderTimings
from elmo_hf.reference_elmo import LstmLinears, lstm_step


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
    cell = ElmoModel(config).eval().bilm.layers[0].forward_cell

    def with_cell_update(update):
        """The CPU kernel's step with `lstm_cell_update` replaced while it runs."""

        def step(gate_inputs, state, products):
            saved, cpu_kernels.lstm_cell_update = cpu_kernels.lstm_cell_update, update
            try:
                return cpu_kernels.lstm_step(gate_inputs, state, *products, cell.cell_clip, cell.projection_clip)
            finally:
                cpu_kernels.lstm_cell_update = saved

        return step

    print(
        f"torch {torch.__version__}, {args.threads} threads, {args.model} (lstm_dim {config.lstm_dim}, "
        f"projection_dim {config.projection_dim}), float32, inference mode, load average {os.getloadavg()[0]:.2f}"
    )
    print("| rows | variant | us/step | vs CPU kernel | first call s | max abs diff vs CPU kernel |")
    print("|---|---|---|---|---|---|")
    with torch.inference_mode():
        for rows in args.rows:
            torch._dynamo.reset()
            # Reordered weights where the timings say they pay over a 100-step call of `rows` rows, as the model does.
            products = (
                RecurrentLinear(cell.hidden_to_gates, row_counts=[rows] * 100),
                RecurrentLinear(cell.projection, row_counts=[rows] * 100),
            )
            bias = cell.hidden_to_gates.bias
            linears = LstmLinears(cell.input_to_gates, cell.hidden_to_gates, cell.projection)

            def reference_step(x, state):
                return lstm_step(x, state, linears, cell.cell_clip, cell.projection_clip)

            variants = {
                "CPU kernel (elmo_hf)": lambda x, state: cpu_kernels.lstm_step(
                    x + bias, state, *products, cell.cell_clip, cell.projection_clip
                ),
                "reference (module step)": reference_step,
                "TorchScript cell update": lambda x, state, step=with_cell_update(
                    torch.jit.script(cpu_kernels.lstm_cell_update)
                ): step(x + bias, state, products),
                "torch.compile cell update": lambda x, state, step=with_cell_update(
                    torch.compile(cpu_kernels.lstm_cell_update, dynamic=False)
                ): step(x + bias, state, products),
                "torch.compile step": torch.compile(reference_step, dynamic=False),
            }
            gate_inputs = torch.randn(rows, 4 * config.lstm_dim)
            state = (torch.randn(rows, config.projection_dim) * 0.1, torch.randn(rows, config.lstm_dim))
            reference = variants["CPU kernel (elmo_hf)"](gate_inputs, state)
            kernel_us = None
            for name, step in variants.items():
                start = time.perf_counter()
                outputs = step(gate_inputs, state)
                first_call = time.perf_counter() - start
                diff = max((a - b).abs().max().item() for a, b in zip(outputs, reference))
                timings = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    for _ in range(args.steps):
                        step(gate_inputs, state)
                    timings.append((time.perf_counter() - start) / args.steps * 1e6)
                us = statistics.median(timings)
                kernel_us = kernel_us or us
                print(f"| {rows} | {name} | {us:.0f} | {kernel_us / us:.2f}x | {first_call:.2f} | {diff:.1e} |")
    print("Kernels chosen:\n" + "\n".join(ReorderTimings.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
