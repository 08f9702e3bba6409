"""What `elmo-hf embed` can do around the model: words/s of the whole command with the model replaced by a stand-in
that computes nothing, so that reading, tokenizing, gathering the vectors, writing and merging are all that is timed.

    python benchmarks/bench_embed.py                                  # original architecture, 20,000 sentences
    python benchmarks/bench_embed.py --layers all top --dtypes float32 float16 --sentences 5000
    python benchmarks/bench_embed.py --package /tmp/elmo-hf-45559af   # another checkout's elmo_hf, for a before/after
    python benchmarks/bench_embed.py --layers top --dtypes float16 --writers 0 1 2   # writer thread, 1 or 2 processes

A GPU runs the original architecture at 90,000-220,000 words/s (issue measurements in benchmarks/README.md), so the
command reaches such rates only if everything else does: this table is that ceiling on the machine at hand. The
stand-in returns the architecture's outputs (`num_layers + 1` layers of `(batch, length, 2 * projection_dim)`, views of
tensors made once), as a model on a GPU costs the host nothing but its launches; everything the command does
with them runs as it does for a real model, on the CPU. The corpus is `bench_inference.py`'s synthetic one, or the
lines of `--text` files as they are (one sentence a line, whitespace-split).

Columns: the writer processes (`--writers`; 0: the writer thread writes the parts), run words/s
(`EmbedSummary.seconds`: first line read to last part written), the CPU time of the run's reader, main (the model and
the gathering of the vectors) and writer threads and of its writer processes together as a share of the run
(`EmbedSummary.thread_seconds`: a thread near 100% bounds the run; together the threads cannot pass the cores, nor, for
their Python, one core's worth of the GIL, which the writer processes do not share), the seconds of the call outside
the run ("other s": counting the lines, the model's fingerprint, the final merge and its checks), total words/s (the
whole call of `embed_corpus`), the output's size, and the rate it was written at over the whole call (MB/s; the merge
writes it a second time). The header
gives the CPU, the load average, and the rate at which the output's folder takes a fresh 1 GiB file (written and
synced): the vectors of `--layers all` in float32 are 12 KiB a word for the original architecture, so that rate
alone bounds the command.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--architecture", choices=["small", "medium", "original"], default="original", help="bench_inference.py's"
    )
    parser.add_argument("--sentences", type=int, default=20_000, help="sentences (lines) to embed")
    parser.add_argument("--text", nargs="*", default=None, help="text files, one sentence a line (default: synthetic)")
    parser.add_argument("--layers", nargs="+", choices=["all", "top", "average"], default=["all", "top"])
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "float16"], default=["float32", "float16"])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument(
        "--writers", type=int, nargs="+", default=[None],
        help="writer processes, one table row per count (default: the command's choice for this machine)",
    )
    parser.add_argument("--scratch", default=None, help="folder for input and output (default: a temporary folder)")
    parser.add_argument("--package", default=None, help="a checkout whose elmo_hf to measure (default: this one)")
    return parser.parse_args()


class StandIn(nn.Module):
    """The outputs of `config`'s architecture for any batch, views of tensors made once (grown when a batch is larger
    than all before it) on the stand-in's device: a model that costs nothing. Moved to a GPU, its outputs are where
    a real model's are, so that the command gathers, checks and copies them to the host as it does a real model's."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.weight = nn.Parameter(torch.zeros(1))
        self.layers: list[torch.Tensor] = []

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, output_hidden_states: bool = True):
        from transformers.modeling_outputs import BaseModelOutput

        batch_size, length = attention_mask.shape
        if not self.layers or batch_size > self.layers[0].shape[0] or length > self.layers[0].shape[1]:
            shape = (max(batch_size, 256), max(length, 128), 2 * self.config.projection_dim)
            device = self.weight.device
            self.layers = [torch.full(shape, 0.25, device=device) for _ in range(self.config.num_layers + 1)]
        layers = tuple(layer[:batch_size, :length] for layer in self.layers)
        return BaseModelOutput(last_hidden_state=layers[-1], hidden_states=layers)


def thread_shares(summary) -> str:
    """The CPU time of an embed run's reader, main and writer threads and of its writer processes together
    (`EmbedSummary.thread_seconds`) as shares of the run, as four table cells."""
    return " | ".join(
        f"{100 * summary.thread_seconds[name] / summary.seconds:.0f}%"
        for name in ("reader", "main", "writer", "writer processes")
    )


def write_rate(folder: Path, num_bytes: int = 2**30) -> float:
    """MB/s at which `folder` takes a fresh file of `num_bytes`, written in 64 MiB blocks and synced."""
    block = os.urandom(64 * 2**20)
    path = folder / "write-rate.bin"
    start = time.perf_counter()
    with open(path, "wb") as file:
        for _ in range(num_bytes // len(block)):
            file.write(block)
        os.fsync(file.fileno())
    seconds = time.perf_counter() - start
    path.unlink()
    return num_bytes / seconds / 1e6


def main() -> int:
    args = parse_args()
    sys.path.insert(0, str(Path(args.package).resolve() if args.package else ROOT))
    from elmo_hf import ElmoConfig, ElmoTokenizer
    from elmo_hf.corpus.embed import embed_corpus

    sys.path.insert(1, str(ROOT / "benchmarks"))
    from bench_inference import ARCHITECTURES, cpu_description, synthetic_corpus  # after elmo_hf: it imports that too

    config = ElmoConfig(**ARCHITECTURES[args.architecture])
    if args.text:
        lines = [line for path in args.text for line in Path(path).read_text(encoding="utf-8").splitlines()]
        lines = lines[: args.sentences]
    else:
        lines = [" ".join(words) for words in synthetic_corpus(args.sentences)]
    words = sum(len(line.split()) for line in lines)
    scratch = Path(tempfile.mkdtemp(prefix="bench-embed-", dir=args.scratch))
    try:
        source = scratch / "input.txt"
        source.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"CPU: {cpu_description()}; load average {os.getloadavg()[0]:.1f}")
        print(f"elmo_hf from {Path(sys.modules['elmo_hf'].__file__).parent}; torch {torch.__version__}")
        print(f"{scratch} takes a fresh 1 GiB file at {write_rate(scratch):,.0f} MB/s (written and synced)")
        print(f"{args.architecture} architecture (stand-in), {len(lines):,} sentences, {words:,} words, "
              f"batch {args.batch_size}\n")
        print("| layers | dtype | writers | run words/s | reader CPU | main CPU | writer CPU | writer processes CPU | "
              "other s | total words/s | output MiB | written MB/s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        model, tokenizer = StandIn(config).eval(), ElmoTokenizer()
        for layers in args.layers:
            for dtype in args.dtypes:
                for writers in args.writers:
                    output = scratch / f"{layers}-{dtype}.hdf5"
                    start = time.perf_counter()
                    summary = embed_corpus(
                        source, output, model=(model, tokenizer), layers=layers, dtype=dtype,
                        batch_size=args.batch_size, writers=writers, progress=False,
                    )
                    total = time.perf_counter() - start
                    size = output.stat().st_size
                    print(
                        f"| {layers} | {dtype} | {'default' if writers is None else writers} | "
                        f"{summary.words / summary.seconds:,.0f} | {thread_shares(summary)} | "
                        f"{total - summary.seconds:.1f} | {summary.words / total:,.0f} | {size / 2**20:,.0f} | "
                        f"{size / total / 1e6:,.0f} |"
                    )
                    output.unlink()
    finally:
        shutil.rmtree(scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
