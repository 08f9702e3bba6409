"""ELMo inference speed, as a fraction of what the machine allows, measured in the same run.

    python benchmarks/bench_inference.py                        # small and original, batch 1, 8, 64, CPU
    python benchmarks/bench_inference.py --quick                # a one-minute smoke run
    python benchmarks/bench_inference.py --models original --batch-sizes 64 --dtype bfloat16
    python benchmarks/bench_inference.py --text ../shared/data/mobydick/*.txt   # real text instead of the corpus
    python benchmarks/bench_inference.py --device cuda --batch-sizes 1 64 256
    python benchmarks/bench_inference.py --models original --batch-sizes 1 --int8   # adds int8-weight rows
    python benchmarks/bench_inference.py --models original --batch-sizes 1 64 --threads 2 --implementations auto \
        --allennlp /work/allennlp-venv/bin/python --processes 10 --busy 2   # against AllenNLP, 10 processes, busy
    python benchmarks/bench_inference.py --models original --batch-sizes 1 64 --threads 2 --implementations auto \
        --one-thread --processes 10 --busy 2   # the threads elmo-hf picks against one thread, process by process

Random-weight models of the published architectures are built from `ElmoConfig` (speed does not depend on the
values). The default corpus is reproducible: sentence lengths drawn from a gamma distribution (mean 25 words, as
`elmo_reference.md` §6) and words from a Zipf distribution over a synthetic vocabulary, since real text repeats
words. Sentences are fed in corpus order (not sorted by length); the first two batches are a warm-up; each
configuration runs `--repeats` times and the median is reported. Tokenization is done beforehand, not timed.

Implementations ("impl" column): `auto` is the model as shipped (the CPU kernels of `elmo_hf/cpu_kernels.py` where
they apply), `eager` the model's reference modules (`elmo_implementation="eager"`), `int8` the model with its
`nn.Linear` weights quantised to int8 by torchao (`Int8WeightOnlyConfig`; `--int8`), which runs the reference
modules with torchao's int8 products. The script prints the CPU model, its cache sizes and, per `auto`
configuration, the product kernels the CPU kernels chose by timing.

AllenNLP side by side (`--allennlp PYTHON`, an interpreter with AllenNLP 2.10.1: benchmarks/README.md): `allennlp`
rows (float32 only) run AllenNLP's `Elmo` (`benchmarks/allennlp_worker.py`) on the same corpus and the same random
weights, written once in the original format by `export_original`. Before measuring, the script checks that this
AllenNLP computes the original (its stateful outputs of tests/fixtures/allennlp against the original implementation's,
and its layers of that checkpoint's sentences, each alone, against elmo-hf's); its rows' diff is AllenNLP's deviation
from the float64 reference on the same first sentences. A table of ratios (elmo-hf `auto`, or the first
implementation, over AllenNLP, process by process) follows the main table.

One thread side by side (`--one-thread`): `auto, 1 thread` rows run the shipped model in processes told
`--threads 1`, alternating with the others; a table of ratios (`auto` with `--threads`, whose layers then run their
directions at once or in turn, `cpu_kernels.DirectionsAtOnce`, and whose steps' thread counts
`cpu_kernels.StepThreads` picks, over one thread, process by process) follows the main table.

`--processes N` measures each configuration in N fresh processes, the implementations alternating (auto, allennlp,
auto, allennlp, ...); a row then gives the median over its processes and each process's tok/s. `--busy N` keeps N
CPU-bound processes (Python busy loops, not pinned) running while each configuration is measured, limits included.
The header gives the CPU model, its vector flags (AVX2, AVX-512, AVX-512 BF16, AMX), cache sizes, the cores this
process may run on and the load average.

Every configuration runs in its own process (so its peak RSS is its own); the machine's limits are measured (in a
child process) before a configuration and after its last process, and the median of those samples is the row's
limit:
- GEMM: fp32 4096 x 4096 x 4096 matrix product, the faster of MKL (`torch.mm`) and oneDNN (`elmo_hf`'s `linear`).
- bandwidth: read bandwidth of a 512 MiB sum (memory), and of sums over the recurrent weights of one cell (one layer
  and direction: the working set of a time step, since the model runs each cell over the whole batch in turn; on a
  CPU whose cache holds it, this is the cache's bandwidth, the real limit at batch 1).
Columns:
- tok/s, sent/s: real words (no `<S>`, `</S>`) and sentences per second.
- GFLOP/s: tok/s times the architecture's FLOPs per word (`elmo_reference.md` §7); useful work only, so boundary
  tokens are not credited and the char CNN is credited for every word even when run once per distinct word.
- of GEMM: GFLOP/s / GEMM GFLOP/s (the batch-64 target).
- stream: weight-streaming bound in words/s: bandwidth / bytes of recurrent and projection weights that each time
  step reads, times words / (words + 2 boundaries per sentence); "of stream" is tok/s over it (the batch-1 target).
  "cell BW" and "of cell stream": the same bound with the bandwidth over one cell's weights.
- RSS: peak resident memory of the configuration's process.
- diff: max abs difference of all layers from the reference modules in float64 (`elmo_implementation="eager"`, same
  weights) on the first sentences, each alone and in its batch, in the first of a configuration's processes
  (AllenNLP: each alone).
"""

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer, export_original
from elmo_hf.conversion.checkpoint import convert_config, read_options, read_weights
from elmo_hf.conversion.convert import model_from_checkpoint
from elmo_hf.conversion.export import OPTIONS_FILE, WEIGHTS_FILE
from elmo_hf.cpu_kernels import ReorderTimings, available_cores, onednn_linear

ARCHITECTURES = {
    "small": dict(lstm_dim=1024, projection_dim=128, num_highway_layers=1),  # 2x1024_128_2048cnn_1xhighway
    "medium": dict(lstm_dim=2048, projection_dim=256, num_highway_layers=1),  # 2x2048_256_2048cnn_1xhighway
    "original": dict(lstm_dim=4096, projection_dim=512, num_highway_layers=2),  # 2x4096_512_2048cnn_2xhighway
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
IMPLEMENTATIONS = ("auto", "eager", "int8", "allennlp")
ONE_THREAD = "auto, 1 thread"  # `--one-thread`: the shipped model in a process with one thread
CHECK_SENTENCES = 4
ALLENNLP_WORKER = Path(__file__).resolve().parent / "allennlp_worker.py"
FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "allennlp"  # an original checkpoint
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
# `--isa avx2`: what every measuring process (elmo-hf's, AllenNLP's, the limits') is told, so that torch's own
# kernels, oneDNN and MKL use no instruction beyond AVX2 on a CPU that has more.
ISA_LIMITS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}


def flops_per_word(config: ElmoConfig) -> float:
    """Multiply-adds x 2 per word: char convolutions, highway, projection, and all LSTM products."""
    chars, dim = config.max_characters_per_token, config.char_embedding_dim
    conv = sum((chars - width + 1) * width * dim * num * 2 for width, num in config.filters)
    highway = config.num_highway_layers * 2 * config.num_filters**2 * 2
    projection = config.num_filters * config.projection_dim * 2
    lstm_dim, projection_dim = config.lstm_dim, config.projection_dim
    lstm = config.num_layers * 2 * (4 * lstm_dim * 2 * projection_dim + lstm_dim * projection_dim) * 2
    return conv + highway + projection + lstm


def cell_recurrent_bytes(config: ElmoConfig, element_size: int) -> int:
    """Bytes of the hidden-to-gate and projection weights of one cell (one layer and direction)."""
    return (4 * config.lstm_dim * config.projection_dim + config.lstm_dim * config.projection_dim) * element_size


def recurrent_bytes_per_step(config: ElmoConfig, element_size: int) -> int:
    """Bytes of hidden-to-gate and projection weights that one time step of all layers and directions reads."""
    return config.num_layers * 2 * cell_recurrent_bytes(config, element_size)


def synthetic_corpus(num_sentences: int, seed: int = 0) -> list[list[str]]:
    """Sentences of gamma(3, 25/3) words (mean 25, median ~22) drawn Zipf-like from 20,000 synthetic word types."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    letter_weights = 1 / np.arange(1, len(letters) + 1)
    vocabulary = []
    for rank in range(20_000):
        length = int(np.clip(rng.poisson(2 + 1.2 * math.log2(rank + 2)), 1, 20))
        word = "".join(rng.choice(letters, size=length, p=letter_weights / letter_weights.sum()))
        vocabulary.append(word.capitalize() if rng.random() < 0.1 else word)
    vocabulary[:8] = [".", ",", "the", "of", "and", "to", "a", "in"]
    word_weights = 1 / (np.arange(len(vocabulary)) + 2.7)
    word_weights /= word_weights.sum()
    lengths = np.maximum(1, np.round(rng.gamma(3.0, 25 / 3, size=num_sentences))).astype(int)
    return [[vocabulary[index] for index in rng.choice(len(vocabulary), size=n, p=word_weights)] for n in lengths]


def text_corpus(paths: list[str], num_sentences: int) -> list[list[str]]:
    """Sentences from text files: split after `.`, `!` or `?`, words on whitespace."""
    sentences = []
    for path in paths:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            words = sentence.split()
            if words:
                sentences.append(words)
            if len(sentences) == num_sentences:
                return sentences
    return sentences


def gemm_gflops(device: torch.device) -> float:
    """fp32 4096^3 matrix product, the best of MKL and oneDNN (CPU) or cuBLAS (CUDA)."""
    size = 4096
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    products = [lambda: a @ b]
    if device.type == "cpu":
        b_transposed = b.t().contiguous()
        products.append(lambda: onednn_linear(a, b_transposed, None, None))
    best = math.inf
    with torch.inference_mode():
        for product in products:
            product()
            for _ in range(2):
                seconds = timed(product, device)
                best = min(best, seconds)
    return 2 * size**3 / best / 1e9


def bandwidth_gbs(device: torch.device, num_bytes: int = 512 * 2**20) -> float:
    """Read bandwidth: the best of five sums over `num_bytes` (512 MiB: memory, beyond any cache)."""
    data = torch.ones(num_bytes // 4, device=device)
    data.sum()
    best = min(timed(data.sum, device) for _ in range(5))
    return data.numel() * 4 / best / 1e9


def timed(function, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    function()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is in KiB on Linux


def build_model(config: ElmoConfig, implementation: str, dtype: torch.dtype, device: torch.device) -> ElmoModel:
    """A random-weight model (seed 0) as the implementation runs it."""
    torch.manual_seed(0)
    model = ElmoModel(config).eval().to(device=device, dtype=dtype)
    model.config.elmo_implementation = "eager" if implementation == "eager" else "auto"
    if implementation == "int8":
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        quantize_(model, Int8WeightOnlyConfig())
    return model


def run_configuration(args) -> dict:
    """One model, batch size, dtype and implementation in this process: speed, peak memory, the deviation check."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    config = ElmoConfig(**ARCHITECTURES[args.model])
    model = build_model(config, args.implementation, DTYPES[args.dtype], device)
    sentences = text_corpus(args.text, args.sentences) if args.text else synthetic_corpus(args.sentences)
    tokenizer = ElmoTokenizer()
    batches = [sentences[start : start + args.batch_size] for start in range(0, len(sentences), args.batch_size)]
    encoded = [
        tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt").to(device) for batch in batches
    ]
    words = sum(len(sentence) for sentence in sentences)
    distinct = statistics.mean(len({w for s in batch for w in s}) / sum(map(len, batch)) for batch in batches)

    with torch.inference_mode():
        for inputs in encoded[:2]:
            model(**inputs)
        seconds = []
        for _ in range(args.repeats):
            seconds.append(sum(timed(lambda inputs=inputs: model(**inputs), device) for inputs in encoded))
        peak = peak_memory_gib(device)

        # Deviation from the reference modules in float64 on the first sentences (each alone and in its batch), in
        # the first process of a configuration (the same weights and sentences in the others).
        check = [] if args.no_check else sentences[:CHECK_SENTENCES]
        diff = allennlp_diff = 0.0 if check else math.nan
        reference = build_model(config, "eager", torch.float64, device) if check else None
        batch_layers = model(**encoded[0], output_hidden_states=True).hidden_states
        allennlp_layers = np.load(args.allennlp_layers) if args.allennlp_layers else None
        for row, sentence in enumerate(check):
            inputs = tokenizer(sentence, is_split_into_words=True, return_tensors="pt").to(device)
            expected = reference(**inputs, output_hidden_states=True).hidden_states
            alone = model(**inputs, output_hidden_states=True).hidden_states
            for index, expected_layer in enumerate(expected):
                diff = max(diff, (alone[index][0].double() - expected_layer[0]).abs().max().item())
                if allennlp_layers is not None:
                    allennlp = torch.from_numpy(allennlp_layers[f"s{row}l{index}"]).double()
                    allennlp_diff = max(allennlp_diff, (allennlp - expected_layer[0].cpu()).abs().max().item())
                if row < len(batches[0]):
                    batched = batch_layers[index][row, : len(sentence)].double()
                    diff = max(diff, (batched - expected_layer[0]).abs().max().item())

    median = statistics.median(seconds)
    return dict(
        model=args.model,
        batch=args.batch_size,
        dtype=args.dtype,
        implementation=args.implementation,
        words=words,
        sentences=len(sentences),
        distinct=distinct,
        tokens_per_s=words / median,
        sentences_per_s=len(sentences) / median,
        runs=[round(words / s, 1) for s in seconds],
        gflops=words / median * flops_per_word(config) / 1e9,
        stream_bytes=recurrent_bytes_per_step(config, torch.tensor([], dtype=DTYPES[args.dtype]).element_size()),
        boundary_factor=words / (words + 2 * len(sentences)),
        peak_gib=peak,
        diff=diff,
        allennlp_diff=allennlp_diff,
        kernels=ReorderTimings.summary(),
    )


def format_table(rows: list[dict], processes: int = 1) -> str:
    runs = "tok/s by process" if processes > 1 else "runs tok/s"
    header = (
        "| model | batch | dtype | impl | tok/s | sent/s | GFLOP/s | GEMM GFLOP/s | of GEMM | BW GB/s | stream tok/s "
        f"| of stream | cell BW GB/s | of cell stream | peak RSS GiB | max abs diff vs float64 | {runs} |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for row in rows:
        stream, cell_stream = (
            bandwidth * 1e9 / row["stream_bytes"] * row["boundary_factor"]
            for bandwidth in (row["bandwidth"], row["cell_bandwidth"])
        )
        lines.append(
            f"| {row['model']} | {row['batch']} | {row['dtype']} | {row['implementation']} | "
            f"{row['tokens_per_s']:.0f} | {row['sentences_per_s']:.1f} | {row['gflops']:.1f} | {row['gemm']:.0f} | "
            f"{row['gflops'] / row['gemm']:.0%} | {row['bandwidth']:.1f} | {stream:.0f} | "
            f"{row['tokens_per_s'] / stream:.0%} | {row['cell_bandwidth']:.1f} | "
            f"{row['tokens_per_s'] / cell_stream:.0%} | {row['peak_gib']:.2f} | {row['diff']:.1e} | "
            f"{', '.join(f'{r:.0f}' for r in row['runs'])} |"
        )
    return "\n".join(lines)


def format_ratios(
    groups: list[tuple[str, int, str, str, list[float], list[float]]], busy: int, other: str = "AllenNLP"
) -> str:
    """Per configuration: elmo-hf's and `other`'s (AllenNLP's, or one thread's) tok/s process by process, their
    ratios, the smallest and the median."""
    lines = [
        "| model | batch | dtype | busy processes | elmo-hf impl | elmo-hf tok/s by process | "
        f"{other} tok/s by process | elmo-hf / {other} by process | min ratio | median ratio |",
        "|" + "---|" * 10,
    ]
    for model, batch, dtype, implementation, ours, theirs in groups:
        ratios = [mine / other for mine, other in zip(ours, theirs)]
        lines.append(
            f"| {model} | {batch} | {dtype} | {busy} | {implementation} | {', '.join(f'{r:.0f}' for r in ours)} | "
            f"{', '.join(f'{r:.0f}' for r in theirs)} | {', '.join(f'{r:.2f}' for r in ratios)} | "
            f"**{min(ratios):.3f}x** | {statistics.median(ratios):.3f}x |"
        )
    return "\n".join(lines)


def cpu_description() -> str:
    """The CPU model, its vector flags, its cache sizes and the cores this process may use, from Linux's /proc and
    /sys (unknown elsewhere)."""
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "unknown CPU")
    flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), []))
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
        caches.append(f"L{level}{'d' if kind == 'Data' else 'i' if kind == 'Instruction' else ''} {size}")
    available = available_cores()
    present = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in CPU_FLAGS) if flags else "unknown"
    return (
        f"{model}, {os.cpu_count()} CPUs, {available} available to this process; flags: {present}; "
        f"caches per core or shared: {', '.join(caches) or 'unknown'}"
    )


def isa_description(isa: str | None) -> str:
    """The header's line on `--isa`: the variables every measuring process gets, and the instruction set torch's own
    kernels then use in a child (asked of one)."""
    if isa is None:
        return ""
    command = [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"]
    used = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
    variables = " ".join(f"{name}={value}" for name, value in ISA_LIMITS[isa].items())
    return f"instruction sets limited in every measuring process: {variables} (torch's kernels in a child: {used})\n"


@contextmanager
def busy_processes(count: int):
    """`count` CPU-bound processes (Python busy loops, not pinned) running for the duration of the block."""
    processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait()


def prepare_allennlp(args) -> dict:
    """For `--allennlp`: checks that AllenNLP computes the original and writes, under `args.prepare_allennlp`, the
    corpus, its first sentences, each model's random weights in the original format and AllenNLP's layers of them."""
    folder = Path(args.prepare_allennlp)
    worker = [args.allennlp, str(ALLENNLP_WORKER)]

    def run(*arguments: str) -> str:
        result = subprocess.run([*worker, *arguments], capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"the AllenNLP worker failed ({' '.join(arguments[:1])}):\n{result.stderr}")
        return result.stdout

    original = json.loads(run("fixture", str(FIXTURE)))
    fixture_sentences = [sentence.split() for sentences in json.loads((FIXTURE / "sentences.json").read_text())
                         for sentence in sentences]
    (folder / "fixture_sentences.json").write_text(json.dumps(fixture_sentences))
    run("layers", str(FIXTURE / "options.json"), str(FIXTURE / "lm_weights.hdf5"),
        str(folder / "fixture_sentences.json"), str(folder / "fixture_layers.npz"))
    config = convert_config(read_options(FIXTURE / "options.json"))
    model = model_from_checkpoint(read_weights(FIXTURE / "lm_weights.hdf5", config), config)
    tokenizer, allennlp_layers = ElmoTokenizer(), np.load(folder / "fixture_layers.npz")
    largest, close = 0.0, True
    with torch.inference_mode():
        for row, sentence in enumerate(fixture_sentences):
            inputs = tokenizer(sentence, is_split_into_words=True, return_tensors="pt")
            for index, layer in enumerate(model(**inputs, output_hidden_states=True).hidden_states):
                ours, theirs = layer[0].numpy(), allennlp_layers[f"s{row}l{index}"]
                largest = max(largest, float(np.abs(ours - theirs).max()))
                close = close and bool(np.allclose(ours, theirs, atol=1e-6, rtol=1e-5))

    sentences = text_corpus(args.text, args.sentences) if args.text else synthetic_corpus(args.sentences)
    (folder / "corpus.json").write_text(json.dumps(sentences))
    (folder / "check.json").write_text(json.dumps(sentences[:CHECK_SENTENCES]))
    for name in args.models:
        build_model(ElmoConfig(**ARCHITECTURES[name]), "auto", torch.float32, torch.device("cpu")).save_pretrained(
            folder / name / "hf"
        )
        original_folder = folder / name / "original"
        export_original(folder / name / "hf", original_folder)
        run("layers", str(original_folder / OPTIONS_FILE), str(original_folder / WEIGHTS_FILE),
            str(folder / "check.json"), str(folder / name / "check_layers.npz"))
    return dict(original=original, against_elmo_hf=dict(max_abs_diff=largest, allclose=close,
                                                        sentences=len(fixture_sentences)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["small", "original"], choices=sorted(ARCHITECTURES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--sentences", type=int, default=128, help="corpus size (sentences)")
    parser.add_argument("--text", nargs="*", default=None, help="text files to take sentences from")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the corpus; the median is reported")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", nargs="+", default=["float32"], choices=sorted(DTYPES))
    parser.add_argument(
        "--implementations", nargs="+", default=["auto", "eager"], choices=IMPLEMENTATIONS[:2],
        help="auto: as shipped (CPU kernels); eager: the reference modules",
    )
    parser.add_argument("--int8", action="store_true", help="also rows with torchao int8 weights (float32 only)")
    parser.add_argument(
        "--allennlp", metavar="PYTHON",
        help="also rows of AllenNLP 2.10.1 run by this interpreter (float32, CPU; see benchmarks/README.md)",
    )
    parser.add_argument(
        "--processes", type=int, default=1,
        help="fresh processes per configuration, the implementations alternating; the median is the row's tok/s",
    )
    parser.add_argument(
        "--one-thread", action="store_true",
        help=f"also rows of the shipped model with one thread ('{ONE_THREAD}'), and their ratios to `auto`",
    )
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes kept running while measuring")
    parser.add_argument(
        "--isa", choices=sorted(ISA_LIMITS),
        help="limit the instruction sets of torch, oneDNN and MKL in every measuring process (e.g. AVX2 kernels on an "
        "AVX-512 CPU; the CPU's microarchitecture and caches stay its own)",
    )
    parser.add_argument("--quick", action="store_true", help="32 sentences, one repeat")
    parser.add_argument("--worker", nargs=4, metavar=("MODEL", "BATCH", "DTYPE", "IMPL"), help=argparse.SUPPRESS)
    parser.add_argument("--allennlp-layers", help=argparse.SUPPRESS)
    parser.add_argument("--no-check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--limits", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prepare-allennlp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.sentences, args.repeats = 32, 1
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    if args.processes < 1 or args.busy < 0:
        parser.error("--processes must be at least 1 and --busy at least 0")
    if args.allennlp and (args.device != "cpu" or "float32" not in args.dtype):
        parser.error("--allennlp: AllenNLP rows are float32 on the CPU; add --dtype float32 and --device cpu")
    if args.allennlp and not (Path(args.allennlp).is_file() and os.access(args.allennlp, os.X_OK)):
        parser.error(f"--allennlp {args.allennlp}: not an executable Python interpreter")
    if args.one_thread and "auto" not in args.implementations:
        parser.error("--one-thread: the ratios are to `auto`; add auto to --implementations")
    if args.isa:
        os.environ.update(ISA_LIMITS[args.isa])
    if args.limits:
        torch.set_num_threads(args.threads)
        device = torch.device(args.device)
        cell_bandwidths = {
            f"{model} {dtype}": bandwidth_gbs(
                device, cell_recurrent_bytes(ElmoConfig(**ARCHITECTURES[model]), DTYPES[dtype].itemsize)
            )
            for model in args.models
            for dtype in args.dtype
        }
        print(json.dumps([gemm_gflops(device), bandwidth_gbs(device), cell_bandwidths]))
        return 0
    if args.prepare_allennlp:
        print(json.dumps(prepare_allennlp(args)))
        return 0
    if args.worker:
        args.model, batch, args.dtype, args.implementation = args.worker
        args.batch_size = int(batch)
        print(json.dumps(run_configuration(args)))
        return 0

    def limits() -> tuple[float, float, dict[str, float]]:
        """GEMM GFLOP/s, bandwidth GB/s and bandwidth over one cell's weights per "model dtype", measured in a child
        so that this process stays small (a worker's `ru_maxrss` starts from its parent's peak: Linux keeps it across
        exec)."""
        command = [sys.executable, __file__, "--limits", "--threads", str(args.threads), "--device", args.device]
        command += ["--models", *args.models, "--dtype", *args.dtype]
        return tuple(json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout))

    print(
        f"{cpu_description()}\n{isa_description(args.isa)}torch {torch.__version__}, {args.device}, {args.threads} "
        "threads, load average "
        f"before: {os.getloadavg()[0]:.2f}; {args.processes} process(es) per configuration, {args.busy} busy "
        "process(es) while measuring",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench_inference_") as scratch:
        if args.allennlp:
            command = [sys.executable, __file__, "--prepare-allennlp", scratch, "--allennlp", args.allennlp]
            command += ["--models", *args.models, "--sentences", str(args.sentences)]
            command += ["--text", *args.text] if args.text else []
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode:
                sys.stderr.write(result.stderr)
                return result.returncode
            check = json.loads(result.stdout.strip().splitlines()[-1])
            original, ours = check["original"], check["against_elmo_hf"]
            print(
                f"AllenNLP ({args.allennlp}) on {FIXTURE.name}'s original checkpoint: against the original "
                f"implementation's outputs (stateful, {original['sentences']} sentences) max abs diff "
                f"{original['max_abs_diff']:.1e}, allclose: {'yes' if original['allclose'] else 'NO'}; against "
                f"elmo-hf (all layers, {ours['sentences']} sentences each alone) max abs diff "
                f"{ours['max_abs_diff']:.1e}, allclose: {'yes' if ours['allclose'] else 'NO'}",
                flush=True,
            )
        rows, ratios, thread_ratios, samples = measure(args, limits, Path(scratch))
    print(
        f"load average after: {os.getloadavg()[0]:.2f}; limit samples (GEMM GFLOP/s, GB/s, cell GB/s): "
        + ", ".join(f"({g:.0f}, {b:.1f}, {'/'.join(f'{c:.0f}' for c in cells.values())})" for g, b, cells in samples)
    )
    print(format_table(rows, args.processes))
    if ratios:
        print(f"\nelmo-hf / AllenNLP, process by process ({args.processes} pairs per configuration, alternating):")
        print(format_ratios(ratios, args.busy))
    if thread_ratios:
        print(f"\nelmo-hf with {args.threads} threads (as it picks them) / one thread, process by process:")
        print(format_ratios(thread_ratios, args.busy, other="one thread"))
    for row in rows:
        if row["kernels"]:
            print(f"\nKernels chosen by timing, {row['model']} batch {row['batch']} {row['dtype']}:")
            print("\n".join(row["kernels"]))
    return 0


def measure(args, limits, scratch: Path) -> tuple[list[dict], list[tuple], list[tuple], list[tuple]]:
    """Every configuration in `args.processes` rounds of fresh processes, one per implementation in turn: the rows
    (median over processes), with `--allennlp` per configuration the tok/s by process of elmo-hf and AllenNLP, with
    `--one-thread` those of `auto` and one thread, and the limit samples."""
    implementations = args.implementations + (["int8"] if args.int8 else []) + (["allennlp"] if args.allennlp else [])
    implementations += [ONE_THREAD] if args.one_thread else []
    with busy_processes(args.busy):
        samples = [limits()]
    rows, ratios, thread_ratios = [], [], []
    for model, dtype, batch in [(m, d, b) for m in args.models for d in args.dtype for b in args.batch_sizes]:
        chosen = [impl for impl in implementations if impl in ("auto", "eager", ONE_THREAD) or dtype == "float32"]
        results = {implementation: [] for implementation in chosen}
        with busy_processes(args.busy):
            for round_ in range(args.processes):
                for implementation in chosen:
                    result = run_worker(args, model, dtype, batch, implementation, scratch, check=round_ == 0)
                    results[implementation].append(result)
                    distinct = f", {result['distinct']:.0%} distinct per batch" if "distinct" in result else ""
                    print(
                        f"{model} batch {batch} {dtype} {implementation}: {result['tokens_per_s']:.0f} tok/s "
                        f"({result['words']} words{distinct}), load average {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
            samples.append(limits())
        group = samples[-2:]
        config = ElmoConfig(**ARCHITECTURES[model])
        for implementation in chosen:
            processes = results[implementation]
            row = dict(processes[0])
            row.update(
                implementation=implementation,
                tokens_per_s=statistics.median(p["tokens_per_s"] for p in processes),
                sentences_per_s=statistics.median(p["sentences_per_s"] for p in processes),
                gflops=statistics.median(p["tokens_per_s"] for p in processes) * flops_per_word(config) / 1e9,
                runs=[p["tokens_per_s"] for p in processes] if args.processes > 1 else processes[0]["runs"],
                peak_gib=max(p["peak_gib"] for p in processes),
                gemm=statistics.median(sample[0] for sample in group),
                bandwidth=statistics.median(sample[1] for sample in group),
                cell_bandwidth=statistics.median(sample[2][f"{model} {dtype}"] for sample in group),
            )
            if implementation == "allennlp":
                row.update(
                    model=model, batch=batch, dtype=dtype, kernels=[],
                    diff=results[chosen[0]][0]["allennlp_diff"],
                    stream_bytes=recurrent_bytes_per_step(config, 4),
                    boundary_factor=row["words"] / (row["words"] + 2 * row["sentences"]),
                )
            rows.append(row)
        if args.allennlp and dtype == "float32":
            ours = "auto" if "auto" in chosen else chosen[0]
            ratios.append((model, batch, dtype, ours, [p["tokens_per_s"] for p in results[ours]],
                           [p["tokens_per_s"] for p in results["allennlp"]]))
        if args.one_thread:
            thread_ratios.append((model, batch, dtype, "auto", [p["tokens_per_s"] for p in results["auto"]],
                                  [p["tokens_per_s"] for p in results[ONE_THREAD]]))
    return rows, ratios, thread_ratios, samples


def run_worker(
    args, model: str, dtype: str, batch: int, implementation: str, scratch: Path, check: bool = True
) -> dict:
    """One configuration measured in a fresh process: elmo-hf's worker (`ONE_THREAD`: `auto` with one thread), or
    AllenNLP's with `implementation` "allennlp"; elmo-hf's checks its deviation from float64 if `check`."""
    if implementation == "allennlp":
        original = scratch / model / "original"
        command = [args.allennlp, str(ALLENNLP_WORKER), "speed", str(original / OPTIONS_FILE)]
        command += [str(original / WEIGHTS_FILE), str(scratch / "corpus.json"), "--batch-size", str(batch)]
        command += ["--threads", str(args.threads), "--repeats", str(args.repeats)]
    else:
        shipped, threads = ("auto", 1) if implementation == ONE_THREAD else (implementation, args.threads)
        command = [sys.executable, __file__, "--worker", model, str(batch), dtype, shipped]
        command += ["--sentences", str(args.sentences), "--repeats", str(args.repeats)]
        command += ["--threads", str(threads), "--device", args.device]
        command += ["--text", *args.text] if args.text else []
        command += ["--allennlp-layers", str(scratch / model / "check_layers.npz")] if args.allennlp else []
        command += [] if check else ["--no-check"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode:
        sys.stderr.write(result.stderr)
        raise SystemExit(result.returncode)
    return json.loads(result.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
