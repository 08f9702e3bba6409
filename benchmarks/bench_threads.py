"""The thread count elmo-hf picks against one thread, batch by batch in one process (issue 24, goal 2).

    python benchmarks/bench_threads.py --batch-size 1 --sentences 100 --busy 2
    python benchmarks/bench_threads.py --batch-size 64 --sentences 512 --busy 2

Fresh processes differ by several percent from one another on a busy machine (`bench_inference.py --one-thread`
shows it process by process), more than the difference asked about. Here one process runs every batch twice, with
torch's thread count `--threads` (each layer's directions then run at once or in turn,
`cpu_kernels.DirectionsAtOnce`, and each step's count picked by `cpu_kernels.StepThreads`) and with one thread, in
alternating order (AB, BA, ...), so that both see the same load, caches and weights; the ratio of the two times is
taken batch by batch. Printed: words/s of each, the geometric mean of the per-batch ratio (picked / one thread, as
speed: above 1 is faster than one thread) with its 95% interval, and the share of batches where the picked count was
faster. Random-weight model of the architecture (`bench_inference.py`'s corpus), float32, two warm-up batches each.
"""

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_inference import ARCHITECTURES, build_model, busy_processes, cpu_description, synthetic_corpus

from elmo_hf import ElmoConfig, ElmoTokenizer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="original", choices=sorted(ARCHITECTURES))
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch's thread count (default: all)")
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes kept running while measuring")
    args = parser.parse_args()
    if args.threads < 2 or args.batch_size < 1 or args.sentences < 2 * args.batch_size or args.busy < 0:
        parser.error(
            "--threads must be at least 2, --batch-size at least 1, --sentences at least two batches and --busy at "
            "least 0"
        )
    model = build_model(ElmoConfig(**ARCHITECTURES[args.model]), "auto", torch.float32, torch.device("cpu"))
    tokenizer = ElmoTokenizer()
    sentences = synthetic_corpus(args.sentences)
    batches = [sentences[start : start + args.batch_size] for start in range(0, len(sentences), args.batch_size)]
    encoded = [tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt") for batch in batches]
    counts = {"picked": args.threads, "one thread": 1}
    seconds: dict[str, list[float]] = {name: [] for name in counts}

    def timed(name: str, inputs) -> float:
        torch.set_num_threads(counts[name])
        start = time.perf_counter()
        model(**inputs)
        return time.perf_counter() - start

    print(f"{cpu_description()}\ntorch {torch.__version__}; {args.model}, batch {args.batch_size}, "
          f"{len(batches)} batches, {args.busy} busy process(es); load average before {os.getloadavg()[0]:.2f}")
    with busy_processes(args.busy), torch.inference_mode():
        for name in counts:
            for inputs in encoded[:2]:
                timed(name, inputs)
        for index, inputs in enumerate(encoded):
            for name in list(counts)[:: 1 if index % 2 == 0 else -1]:
                seconds[name].append(timed(name, inputs))
        load = os.getloadavg()[0]
    words = sum(len(sentence) for sentence in sentences)
    logs = [math.log(one / picked) for picked, one in zip(seconds["picked"], seconds["one thread"])]
    mean, error = statistics.fmean(logs), 2 * statistics.stdev(logs) / math.sqrt(len(logs))
    faster = sum(log > 0 for log in logs) / len(logs)
    print(f"load average after {load:.2f}")
    print("| batch | busy | picked words/s | one thread words/s | picked / one thread (geometric mean per batch) | "
          "95% interval | batches where picked was faster |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {args.batch_size} | {args.busy} | {words / sum(seconds['picked']):.1f} | "
          f"{words / sum(seconds['one thread']):.1f} | {math.exp(mean):.3f}x | {math.exp(mean - error):.3f}-"
          f"{math.exp(mean + error):.3f} | {faster:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
