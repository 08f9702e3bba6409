"""The benchmark scripts run end to end and report agreement with the exact computation (speed is not asserted)."""

import importlib.util
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run_script(name: str, *arguments: str) -> list[dict[str, str]]:
    """Runs a benchmark script; returns its markdown table's data rows, each as {column: cell}."""
    return table_rows(run_output(name, *arguments))


def run_output(name: str, *arguments: str) -> str:
    """Runs a benchmark script; returns what it printed."""
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *arguments], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def table_rows(text: str) -> list[dict[str, str]]:
    """The data rows of the first markdown table in `text`, each as {column: cell}."""
    lines = []
    for line in text.splitlines():
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if not line.startswith("|---")]
    header, *rows = cells
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


def test_inference_benchmark_alternates_fresh_processes_under_busy_load_and_describes_the_cpu():
    """--processes 2 --busy 1 --isa avx2 --one-thread: each row gives the tok/s of each of its processes, and a table
    gives the shipped model's over one thread's, process by process; the header names the CPU's flags, the cores
    available, the instruction-set limit every measuring process got (and the one torch's own kernels then use), the
    processes per configuration and the busy load. Nothing is compared with a speed."""
    output = run_output(
        "bench_inference.py",
        *"--models small --batch-sizes 2 --sentences 4 --repeats 1 --threads 2 --implementations auto".split(),
        *"--processes 2 --busy 1 --isa avx2 --one-thread".split(),
    )
    header, limit = output.splitlines()[:2]
    assert all(f"{flag} " in header for flag in ("avx2", "avx512f", "avx512_bf16", "amx_tile"))
    assert "available to this process" in header and "caches" in header
    assert "ONEDNN_MAX_CPU_ISA=AVX2" in limit and limit.endswith("(torch's kernels in a child: AVX2)")
    assert "2 process(es) per configuration, 1 busy process(es) while measuring" in output
    rows = table_rows(output)
    assert [(row["model"], row["batch"], row["impl"]) for row in rows] == [
        ("small", "2", "auto"), ("small", "2", "auto, 1 thread")
    ]
    for row in rows:
        by_process = [float(value) for value in row["tok/s by process"].split(",")]
        assert len(by_process) == 2 and all(value > 0 for value in by_process)
        assert abs(float(row["tok/s"]) - statistics.median(by_process)) <= 1  # the median of the processes (rounded)
        assert float(row["max abs diff vs float64"]) <= 1e-5
    (ratios,) = table_rows(output.split("/ one thread, process by process:")[1])
    assert ratios["elmo-hf tok/s by process"] == rows[0]["tok/s by process"]
    assert ratios["one thread tok/s by process"] == rows[1]["tok/s by process"]
    assert len(ratios["elmo-hf / one thread by process"].split(",")) == 2


def test_inference_benchmark_refuses_an_allennlp_interpreter_that_is_not_one():
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_inference.py"), "--allennlp", str(BENCHMARKS / "no-python")],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 2 and "--allennlp" in result.stderr and "not an executable Python" in result.stderr
    assert "Traceback" not in result.stderr


def test_inference_benchmark_ratio_table_gives_each_pair_and_the_smallest():
    spec = importlib.util.spec_from_file_location("bench_inference", BENCHMARKS / "bench_inference.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    table = bench.format_ratios([("original", 1, "float32", "auto", [120.0, 90.0], [30.0, 30.0])], busy=2)
    (row,) = table_rows(table)
    assert row["busy processes"] == "2" and row["elmo-hf / AllenNLP by process"] == "4.00, 3.00"
    assert row["min ratio"] == "**3.000x**" and row["median ratio"] == "3.500x"


def test_threads_benchmark_times_each_batch_with_the_picked_count_and_one_thread():
    (row,) = run_script("bench_threads.py", *"--model small --batch-size 2 --sentences 6 --threads 2 --busy 1".split())
    assert (row["batch"], row["busy"]) == ("2", "1")
    assert float(row["picked words/s"]) > 0 and float(row["one thread words/s"]) > 0
    low, high = (float(bound) for bound in row["95% interval"].split("-"))
    assert low <= float(row["picked / one thread (geometric mean per batch)"].removesuffix("x")) <= high
    assert row["batches where picked was faster"].endswith("%")
    for bad in ("--batch-size 0", "--threads 1", "--batch-size 4 --sentences 6", "--busy -1"):
        refused = subprocess.run([sys.executable, str(BENCHMARKS / "bench_threads.py"), *bad.split()],
                                 capture_output=True, text=True, timeout=600)
        assert refused.returncode == 2 and "--batch-size at least 1" in refused.stderr, bad
        assert "Traceback" not in refused.stderr


def test_bound_benchmark_replays_the_products_of_a_pass_phase_by_phase():
    """The recorded pass's products and cell updates, replayed by phase: a layer's directions at once replay in two
    threads, in turn in one; the token layer (phase 0) in one; the phases' calls add up to the recorded ones, and the
    bounds are the words over the replays' seconds."""
    for directions, layer_threads in (("at-once", "2 ("), ("in-turn", "1 (")):
        output = run_output(
            "bench_bound.py",
            *f"--model small --batch-size 2 --sentences 4 --threads 2 --passes 1 --replays 1 --directions {directions}"
            .split(),
        )
        (row, *_), phases = table_rows(output), table_rows(output.split("\n\n", 1)[1])
        assert row["batch"] == "2" and float(row["words/s, passes (median)"]) > 0
        words = float(row["words/s, passes (median)"]) * float(row["pass s"])
        for seconds, bound in (("products alone s", "bound words/s, products"),
                               ("with cell updates s", "bound words/s, with cell updates")):
            assert abs(words / float(row[seconds]) - float(row[bound])) <= 0.01 * float(row[bound]) + 0.1
        recorded = output.split("recorded pass: ")[1].split(",")
        assert sum(int(phase["products"]) for phase in phases) == int(recorded[0].split()[0])
        assert sum(int(phase["cell updates"]) for phase in phases) == int(recorded[1].split()[0])
        layers = [phase for phase in phases if int(phase["cell updates"])]
        assert [int(phase["phase"]) for phase in layers] == [1, 3, 5, 7]  # two batches of two layers
        assert all(phase["recorded threads (torch threads of each)"].startswith(layer_threads) for phase in layers)
        assert phases[0]["phase"] == "0" and phases[0]["recorded threads (torch threads of each)"].startswith("1 (")
    for bad, said in (("--replays 0", "--replays must be at least 1"),
                      ("--threads 1 --directions at-once", "needs --threads 2 or more")):
        refused = subprocess.run([sys.executable, str(BENCHMARKS / "bench_bound.py"), *bad.split()],
                                 capture_output=True, text=True, timeout=600)
        assert refused.returncode == 2 and said in refused.stderr and "Traceback" not in refused.stderr, bad


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


def test_gpu_benchmark_answers_help_refuses_a_machine_without_cuda_and_runs_every_check():
    """`bench_gpu.py` runs on a GPU machine only; here: `--help`, its one-line refusal without CUDA, and a smoke run
    of all its code on the CPU (tiny sizes; the numbers mean nothing, the exactness and flag checks do)."""
    script = [sys.executable, str(BENCHMARKS / "bench_gpu.py")]
    helped = subprocess.run([*script, "--help"], capture_output=True, text=True, timeout=600)
    assert helped.returncode == 0 and "--train-batch-sizes" in helped.stdout
    without_cuda = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    refused = subprocess.run(script, capture_output=True, text=True, timeout=600, env=without_cuda)
    # the last line (libraries may warn on import before it), no traceback
    assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1].startswith("error: no CUDA GPU here")
    assert "Traceback" not in refused.stderr
    smoke = "--device cpu --architecture small --sentences 6 --batch-sizes 2 --repeats 1 --train-architectures ptb "
    smoke += "--train-batch-sizes 2 --train-steps 1 --matmul-size 128 --bandwidth-mib 8 --embed-sentences 5 "
    smoke += "--embed-batch-size 2"
    result = subprocess.run([*script, *smoke.split()], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    rows = [line.strip("|").split("|") for line in lines]
    builds = [row[1].strip() for row in rows if row[0].strip() == "2" and len(row) == 8]
    assert {row[-1].strip() for row in rows if row[0].strip() == "2" and len(row) == 8} == {"0, 0"}  # no CUDA graphs
    assert builds == [
        "elmo-hf float32", "elmo-hf float32, ids moved to the GPU first", "elmo-hf float32 without graphs",
        "elmo-hf bfloat16", "cuDNN nn.LSTM float32", "cuDNN nn.LSTM float32 without TF32",
    ]  # fmt: skip
    assert [row[2].strip() for row in rows if row[0].strip() == "ptb"] == [
        "elmo-hf", "elmo-hf reference", "cuDNN nn.LSTM without TF32", "cuDNN nn.LSTM"
    ]
    embed_builds = ["elmo-hf float32", "elmo-hf bfloat16", "stand-in, 0 writer processes", "stand-in, writer thread"]
    sections = [*script, *smoke.split(), "--sections", "embed", "--embed-outputs", "top-float16"]
    only = subprocess.run(sections, capture_output=True, text=True, timeout=600)
    assert only.returncode == 0 and "elmo-hf embed (embed_corpus)" in only.stdout
    assert "inference," not in only.stdout and "training step" not in only.stdout and "max abs" not in only.stdout
    table = [line for line in only.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    stored = [line.split("|")[2].strip() for line in table]
    assert stored[1:] == ["top float16"] * len(embed_builds)  # after the header: one row a build, the output asked for
    embed = [[cell.strip() for cell in row] for row in rows if row[0].strip() in embed_builds]
    assert [row[:2] for row in embed] == [[build, vectors] for build in embed_builds
                                          for vectors in ("all float32", "top float16")]
    assert all(float(row[2].replace(",", "")) > 0 and float(row[6]) >= 0 for row in embed)
    assert all(float(row[3].replace(",", "")) > 0 for row in embed)  # steady: the batches after the first
    # reader, main, writer CPU, writer processes CPU
    assert all(int(share.removesuffix("%")) >= 0 for row in embed for share in row[8:12])
    assert {row[12] for row in embed} == {"0, 0.00 s"}  # no CUDA graphs on a CPU
    assert "dispatcher, float32 training: recurrence training" in result.stdout  # on a CPU, the CPU's kernel
    for build in ("dispatched", "reference"):
        check = next(line for line in result.stdout.splitlines() if f"{build} step against float64" in line)
        assert float(check.split("gradients within ")[1].split()[0]) <= 1e-5
    # the profile: each call's kernels (none on a CPU) and the host's functions, by own and by cumulative time
    profiled = [line for line in result.stdout.splitlines() if "ms wall (profiled)" in line]
    assert [line.split(":")[0] for line in profiled] == [
        *(f"inference {dtype}, batch 256, ids on the {side}" for dtype in ("float32", "bfloat16") for side in
          ("host", "GPU")),
        "training ptb, batch 2",
    ]
    assert result.stdout.count("functions by cumulative time") == 5
    assert result.stdout.count("host synchronisations: 0 ()") == 5  # counted on CUDA only
    # ids read on the host: the same layers as ids on the device, bitwise, in every build (one device here)
    same = next(line for line in result.stdout.splitlines() if line.startswith("ids on the host give bitwise"))
    assert same.count(" True") == 4 and "False" not in same
    float32 = next(row for row in rows if row[0].strip() == "float32")  # the exactness table's row
    assert all(float(cell.split()[0]) <= 1e-5 for cell in float32[1:])
    # Triton vs reference (on a CPU the fused recurrence only: graphs need CUDA)
    kernel = [
        [cell.strip() for cell in row] for row in rows if len(row) == 4 and row[0].strip() in ("triton", "cuda graphs")
    ]
    assert [(name, dtype, layout) for name, dtype, layout, _ in kernel] == [
        ("triton", dtype, layout) for dtype in ("float32", "bfloat16", "float64") for layout in ("packed", "padded")
    ]
    assert all(float(difference) <= (1e-6 if dtype != "bfloat16" else 2e-2) for _, dtype, _, difference in kernel)
    assert "global flags unchanged by the run: yes" in result.stdout


def test_embed_benchmark_runs_the_command_around_a_stand_in_and_prints_its_rates():
    arguments = "--architecture small --sentences 40 --layers all top --dtypes float16 --writers 0 1"
    output = run_output("bench_embed.py", *arguments.split())
    rows = table_rows(output)
    assert [(row["layers"], row["dtype"], row["writers"]) for row in rows] == [
        (layers, "float16", writers) for layers in ("all", "top") for writers in ("0", "1")
    ]
    for row in rows:
        assert float(row["run words/s"].replace(",", "")) > 0 and float(row["total words/s"].replace(",", "")) > 0
        # each of the run's threads' CPU time as a share of the run (a thread may use more than one core), and the
        # writer processes' together (none with --writers 0)
        assert all(int(row[f"{thread} CPU"].removesuffix("%")) >= 0 for thread in ("reader", "main", "writer"))
        assert (row["writer processes CPU"] == "0%") == (row["writers"] == "0")
    assert "takes a fresh 1 GiB file at" in output and "CPU:" in output
