"""The benchmark scripts run end to end and report agreement with the exact computation (speed is not asserted)."""

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run_script(name: str, *arguments: str) -> list[dict[str, str]]:
    """Runs a benchmark script; returns its markdown table's data rows, each as {column: cell}."""
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *arguments], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    header, *rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return [dict(zip(header, row)) for row in rows]


def test_inference_benchmark_prints_a_row_per_configuration_close_to_float64():
    rows = run_script(
        "bench_inference.py", *"--models small --batch-sizes 3 --sentences 5 --repeats 1 --threads 1".split()
    )
    configurations = [(row["model"], row["batch"], row["impl"]) for row in rows]
    assert configurations == [("small", "3", "auto"), ("small", "3", "eager")]
    for row in rows:
        assert float(row["tok/s"]) > 0 and 0 < float(row["GEMM GFLOP/s"]) and 0 < float(row["cell BW GB/s"])
        assert float(row["max abs diff vs float64"]) <= 1e-5


def test_recurrent_step_benchmark_compares_every_variant_with_the_cpu_kernel():
    rows = run_script("bench_recurrent_step.py", *"--model small --rows 2 --steps 2 --repeats 1".split())
    assert [row["variant"] for row in rows] == [
        "CPU kernel (elmo_hf)",
        "reference (module step)",
        "TorchScript cell update",
        "torch.compile cell update",
        "torch.compile step",
    ]
    assert all(float(row["max abs diff vs CPU kernel"]) <= 1e-5 for row in rows)
