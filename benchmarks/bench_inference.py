"""ELMo inference speed, as a fraction of what the machine allows, measured in the same run.

    python benchmarks/bench_inference.py                        # small and original, batch 1, 8, 64, CPU
    python benchmarks/bench_inference.py --quick                # a one-minute smoke run
    python benchmarks/bench_inference.py --models original --batch-sizes 64 --dtype bfloat16
    python benchmarks/bench_inference.py --text ../shared/data/mobydick/*.txt   # real text instead of the corpus
    python benchmarks/bench_inference.py --device cuda --batch-sizes 1 64 256
    python benchmarks/bench_inference.py --models original --batch-sizes 1 --int8   # adds int8-weight rows

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

Every configuration runs in its own process (so its peak RSS is its own); the machine's limits are measured (in a
child process) before and after each configuration, and the median of those two samples is the row's limit:
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
  weights) on the first sentences, each alone and in its batch.
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
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer
from elmo_hf.cpu_kernels import ReorderTimings, onednn_linear

ARCHITECTURES = {
    "small": dict(lstm_dim=1024, projection_dim=128, num_highway_layers=1),  # 2x1024_128_2048cnn_1xhighway
    "medium": dict(lstm_dim=2048, projection_dim=256, num_highway_layers=1),  # 2x2048_256_2048cnn_1xhighway
    "original": dict(lstm_dim=4096, projection_dim=512, num_highway_layers=2),  # 2x4096_512_2048cnn_2xhighway
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
IMPLEMENTATIONS = ("auto", "eager", "int8")
CHECK_SENTENCES = 4


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

        # Deviation from the reference modules in float64 on the first sentences (each alone and in its batch).
        reference = build_model(config, "eager", torch.float64, device)
        check = sentences[:CHECK_SENTENCES]
        batch_layers = model(**encoded[0], output_hidden_states=True).hidden_states
        diff = 0.0
        for row, sentence in enumerate(check):
            inputs = tokenizer(sentence, is_split_into_words=True, return_tensors="pt").to(device)
            expected = reference(**inputs, output_hidden_states=True).hidden_states
            alone = model(**inputs, output_hidden_states=True).hidden_states
            for index, expected_layer in enumerate(expected):
                diff = max(diff, (alone[index][0].double() - expected_layer[0]).abs().max().item())
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
        kernels=ReorderTimings.summary(),
    )


def format_table(rows: list[dict]) -> str:
    header = (
        "| model | batch | dtype | impl | tok/s | sent/s | GFLOP/s | GEMM GFLOP/s | of GEMM | BW GB/s | stream tok/s | "
        "of stream | cell BW GB/s | of cell stream | peak RSS GiB | max abs diff vs float64 | runs tok/s |"
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


def cpu_description() -> str:
    """The CPU model and its cache sizes, from Linux's /proc and /sys (empty elsewhere)."""
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        "unknown CPU",
    ) if Path("/proc/cpuinfo").exists() else "unknown CPU"
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
        caches.append(f"L{level}{'d' if kind == 'Data' else 'i' if kind == 'Instruction' else ''} {size}")
    return f"{model}, {os.cpu_count()} CPUs, caches per core or shared: {', '.join(caches) or 'unknown'}"


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
    parser.add_argument("--quick", action="store_true", help="32 sentences, one repeat")
    parser.add_argument("--worker", nargs=4, metavar=("MODEL", "BATCH", "DTYPE", "IMPL"), help=argparse.SUPPRESS)
    parser.add_argument("--limits", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.sentences, args.repeats = 32, 1
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
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

    samples = [limits()]
    print(
        f"{cpu_description()}\ntorch {torch.__version__}, {args.device}, {args.threads} threads, load average "
        f"before: {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    implementations = args.implementations + (["int8"] if args.int8 else [])
    configurations = [
        (model, dtype, batch, implementation)
        for model in args.models
        for dtype in args.dtype
        for batch in args.batch_sizes
        for implementation in implementations
        if implementation != "int8" or dtype == "float32"
    ]
    rows = []
    for model, dtype, batch, implementation in configurations:
        command = [sys.executable, __file__, "--worker", model, str(batch), dtype, implementation]
        command += ["--sentences", str(args.sentences), "--repeats", str(args.repeats)]
        command += ["--threads", str(args.threads), "--device", args.device]
        command += ["--text", *args.text] if args.text else []
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode:
            sys.stderr.write(result.stderr)
            return result.returncode
        row = json.loads(result.stdout.strip().splitlines()[-1])
        samples.append(limits())
        row["gemm"] = statistics.median(sample[0] for sample in samples[-2:])
        row["bandwidth"] = statistics.median(sample[1] for sample in samples[-2:])
        row["cell_bandwidth"] = statistics.median(sample[2][f"{model} {dtype}"] for sample in samples[-2:])
        rows.append(row)
        print(
            f"{model} batch {batch} {dtype} {implementation}: {row['tokens_per_s']:.0f} tok/s "
            f"({row['words']} words, {row['distinct']:.0%} distinct per batch), load average "
            f"{os.getloadavg()[0]:.2f}",
            flush=True,
        )
    print(
        f"load average after: {os.getloadavg()[0]:.2f}; limit samples (GEMM GFLOP/s, GB/s, cell GB/s): "
        + ", ".join(f"({g:.0f}, {b:.1f}, {'/'.join(f'{c:.0f}' for c in cells.values())})" for g, b, cells in samples)
    )
    print(format_table(rows))
    for row in rows:
        if row["kernels"]:
            print(f"\nKernels chosen by timing, {row['model']} batch {row['batch']} {row['dtype']}:")
            print("\n".join(row["kernels"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
