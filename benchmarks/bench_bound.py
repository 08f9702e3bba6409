"""What the products alone allow: a pass of the model against its own products replayed without the rest (issue 24).

    python benchmarks/bench_bound.py --batch-size 1 --sentences 24
    python benchmarks/bench_bound.py --batch-size 64 --sentences 64

Issue 24 asks, where 3x AllenNLP cannot be reached on a kind of CPU, for the numbers that show it. This script takes
them from the model itself: it times passes over `bench_inference.py`'s corpus (float32, the CPU kernels as
dispatched, `--threads` torch threads), then records one more pass, every matrix product (`onednn_linear`,
`BlockedRows.product`: the token layer's, the input-to-gate and the recurrent ones) and every cell update
(`lstm_cell_update`) with the thread that made it, that thread's torch thread count, its shapes and the weight it
read, and replays them without anything else: phase by phase (before, within and after each biLSTM layer), each
recorded thread's calls in its order (the main thread's here, a worker's in a thread kept for it), the threads of a
phase started together (two directions at once replay side by side), on slices of random inputs (a product's time
does not depend on its values; warm slices can only make the replay faster). The best of `--replays` replays gives
the products' seconds a pass, alone and with the cell updates: words per second that no pass can exceed with these
kernels and thread counts, and the share of it the passes reached. Everything else a pass does (copies, masks, the
choice of kernels and counts, Python) is left out.
"""

import argparse
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_inference import ARCHITECTURES, build_model, cpu_description, synthetic_corpus

from elmo_hf import ElmoConfig, ElmoTokenizer
from elmo_hf import cpu_kernels
from elmo_hf.modeling_elmo import ElmoLstmLayer


@dataclass
class Call:
    """One recorded call: `kind` "product" (`onednn_linear` or `BlockedRows.product`) or "cell" (`lstm_cell_update`),
    made by `thread` with `threads` torch threads within `phase`; its two tensors' `shape_of` (inputs and addend, or
    gates and cell), and for a product the weight and bias it read."""

    kind: str
    thread: int
    threads: int
    phase: int
    run: object  # the recorded function
    shapes: tuple
    weight: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    k_block: int | None = None
    clip: float | None = None


def shape_of(tensor: torch.Tensor | None) -> tuple | None:
    """`(rows, width, expanded)` of a 2-D tensor (expanded: one row repeated with stride 0, as `recurrent_product`
    passes a single row), None for None."""
    if tensor is None:
        return None
    return tensor.shape[0], tensor.shape[1], tensor.shape[0] > 1 and tensor.stride(0) == 0


class Recorder:
    """Records the products and cell updates of the passes run within `recording()`, and the phase each belongs to
    (each biLSTM layer's call is a phase of its own, and so is what comes before, between and after them)."""

    def __init__(self):
        self.calls: list[Call] = []
        self.phase = 0
        self.lock = threading.Lock()

    def add(self, kind: str, run: object, shapes: tuple, **fields) -> None:
        call = Call(kind, threading.get_ident(), torch.get_num_threads(), self.phase, run, shapes, **fields)
        with self.lock:
            self.calls.append(call)

    def recording(self) -> list:
        """The patches that record (start them for the pass, stop them after)."""
        onednn_linear, blocked_product = cpu_kernels.onednn_linear, cpu_kernels.BlockedRows.product
        cell_update, layer_forward = cpu_kernels.lstm_cell_update, ElmoLstmLayer.forward

        def onednn(inputs, weight, bias, add):
            self.add("product", onednn_linear, (shape_of(inputs), shape_of(add)), weight=weight, bias=bias)
            return onednn_linear(inputs, weight, bias, add)

        def blocked(inputs, weight, add, k_block):
            self.add("product", blocked_product, (shape_of(inputs), shape_of(add)), weight=weight, k_block=k_block)
            return blocked_product(inputs, weight, add, k_block)

        def cell(gates, memory, clip):
            self.add("cell", cell_update, (shape_of(gates), shape_of(memory)), clip=clip)
            return cell_update(gates, memory, clip)

        def layer(module, *args, **kwargs):
            self.phase += 1
            try:
                return layer_forward(module, *args, **kwargs)
            finally:
                self.phase += 1

        return [
            mock.patch.object(cpu_kernels, "onednn_linear", onednn),
            mock.patch.object(cpu_kernels.BlockedRows, "product", staticmethod(blocked)),
            mock.patch.object(cpu_kernels, "lstm_cell_update", cell),
            mock.patch.object(ElmoLstmLayer, "forward", layer),
        ]


class Replay:
    """Replays recorded calls on random inputs, phase by phase, the threads of a phase at once."""

    def __init__(self, calls: list[Call]):
        self.calls = calls
        rows: dict[int, int] = defaultdict(int)
        for call in calls:
            for shape in call.shapes:
                if shape is not None:
                    rows[shape[1]] = max(rows[shape[1]], shape[0])
        generator = torch.Generator().manual_seed(0)
        # One random block per width, sliced for each call: inputs, addends, gates and cells.
        self.pools = {width: torch.randn(count, width, generator=generator) for width, count in rows.items()}
        self.workers: dict[int, ThreadPoolExecutor] = {}

    def tensor(self, shape: tuple | None) -> torch.Tensor | None:
        """A slice of the pool of `shape`'s width with `shape`'s rows (one row expanded where it was)."""
        if shape is None:
            return None
        rows, width, expanded = shape
        pool = self.pools[width]
        return pool[:1].expand(rows, width) if expanded else pool[:rows]

    def execute(self, call: Call) -> None:
        """Runs `call`'s function as it was called, on pool slices of its shapes."""
        first, second = (self.tensor(shape) for shape in call.shapes)
        if call.kind == "cell":
            call.run(first, second, call.clip)
        elif call.k_block is not None:
            call.run(first, call.weight, second, call.k_block)
        else:
            call.run(first, call.weight, call.bias, second)

    def phase_seconds(self, calls: list[Call]) -> float:
        """Seconds of `calls` (one phase), each recorded thread's in its order: the calling thread's here (the pass's
        main thread made them), each other's in a worker thread of its own kept across phases and replays (its
        OpenMP threads made once, as the pass's worker thread keeps them), all started at once."""
        by_thread: dict[int, list[Call]] = defaultdict(list)
        for call in calls:
            by_thread[call.thread].append(call)
        own = by_thread.pop(threading.get_ident(), [])
        start = threading.Barrier(len(by_thread) + 1)

        def run(calls: list[Call]) -> None:
            with torch.inference_mode():
                for call in calls:
                    if torch.get_num_threads() != call.threads:
                        torch.set_num_threads(call.threads)
                    self.execute(call)

        def work(calls: list[Call]) -> None:
            start.wait()
            run(calls)

        futures = [self.worker(thread).submit(work, calls) for thread, calls in by_thread.items()]
        start.wait()  # timed from here: a worker made for the first phase is not
        began = time.perf_counter()
        run(own)
        for future in futures:
            future.result()
        return time.perf_counter() - began

    def worker(self, thread: int) -> ThreadPoolExecutor:
        """The worker thread that replays the calls of the recorded thread `thread`."""
        if thread not in self.workers:
            self.workers[thread] = ThreadPoolExecutor(1)
        return self.workers[thread]

    def seconds(self, kinds: set[str]) -> dict[int, float]:
        """{phase: seconds} of the calls of `kinds`, phases in order."""
        phases: dict[int, list[Call]] = defaultdict(list)
        for call in self.calls:
            if call.kind in kinds:
                phases[call.phase].append(call)
        return {phase: self.phase_seconds(calls) for phase, calls in sorted(phases.items())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="original", choices=sorted(ARCHITECTURES))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch's thread count (default: all)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes over the corpus")
    parser.add_argument("--replays", type=int, default=3, help="replays of the recorded pass (the best is kept)")
    parser.add_argument(
        "--directions", choices=("picked", "at-once", "in-turn"), default="picked",
        help="a layer's two directions as `DirectionsAtOnce` picks them (default), or always at once or in turn",
    )  # fmt: skip
    args = parser.parse_args()
    for name in ("batch_size", "sentences", "threads", "passes", "replays"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.directions != "picked" and args.threads < 2:
        parser.error("--directions at-once or in-turn needs --threads 2 or more (one thread runs them in turn)")
    torch.set_num_threads(args.threads)
    model = build_model(ElmoConfig(**ARCHITECTURES[args.model]), "auto", torch.float32, torch.device("cpu"))
    sentences = synthetic_corpus(args.sentences)
    tokenizer = ElmoTokenizer()
    batches = [sentences[start : start + args.batch_size] for start in range(0, len(sentences), args.batch_size)]
    encoded = [tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt") for batch in batches]
    words = sum(len(sentence) for sentence in sentences)

    def one_pass() -> float:
        start = time.perf_counter()
        for inputs in encoded:
            model(**inputs)
        return time.perf_counter() - start

    recorder = Recorder()
    with torch.inference_mode():
        one_pass()  # untimed: measures the kernels, builds the reordered weights, meets every kind of layer
        if args.directions != "picked":  # every kind of layer seen so far, held to one way: no more tries
            for choice in cpu_kernels.DirectionsAtOnce.choices.values():
                choice[:] = [args.directions == "at-once", 2**62, 2**62]
        passes = [one_pass() for _ in range(args.passes)]
        patches = recorder.recording()
        for patch in patches:
            patch.start()
        try:
            one_pass()
        finally:
            for patch in reversed(patches):
                patch.stop()
    torch.set_num_threads(args.threads)
    replay = Replay(recorder.calls)
    products = [replay.seconds({"product"}) for _ in range(args.replays)]
    with_cells = [replay.seconds({"product", "cell"}) for _ in range(args.replays)]
    for worker in replay.workers.values():
        worker.shutdown()
    products_seconds = min(sum(phases.values()) for phases in products)
    with_cells_seconds = min(sum(phases.values()) for phases in with_cells)
    measured = statistics.median(passes)

    print(f"{cpu_description()}\ntorch {torch.__version__}; {args.model}, float32, batch {args.batch_size}, "
          f"{len(sentences)} sentences ({words} words), {args.threads} threads, directions {args.directions}; "
          f"load average {os.getloadavg()[0]:.2f}")
    counts = defaultdict(int)
    for call in recorder.calls:
        counts[call.kind] += 1
    print(f"recorded pass: {counts['product']} products, {counts['cell']} cell updates, "
          f"{len({call.phase for call in recorder.calls})} phases")
    print("| batch | words/s, passes (median) | pass s | products alone s | with cell updates s | "
          "bound words/s, products | bound words/s, with cell updates | passes / bound with cell updates |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {args.batch_size} | {words / measured:.1f} | {measured:.3f} | {products_seconds:.3f} | "
          f"{with_cells_seconds:.3f} | {words / products_seconds:.1f} | {words / with_cells_seconds:.1f} | "
          f"{with_cells_seconds / measured:.0%} |")
    print()
    print("| phase | recorded threads (torch threads of each) | products | products alone s | cell updates | "
          "with cell updates s |")
    print("|---|---|---|---|---|---|")
    best_products = min(products, key=lambda phases: sum(phases.values()))
    best_cells = min(with_cells, key=lambda phases: sum(phases.values()))
    for phase in sorted({call.phase for call in recorder.calls}):
        calls = [call for call in recorder.calls if call.phase == phase]
        counts_by_thread: dict[int, set[int]] = defaultdict(set)
        for call in calls:
            counts_by_thread[call.thread].add(call.threads)
        described = "; ".join(",".join(map(str, sorted(counts))) for counts in counts_by_thread.values())
        print(f"| {phase} | {len(counts_by_thread)} ({described}) | {sum(call.kind == 'product' for call in calls)} | "
              f"{best_products.get(phase, 0.0):.3f} | {sum(call.kind == 'cell' for call in calls)} | "
              f"{best_cells.get(phase, 0.0):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
