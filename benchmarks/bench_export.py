"""Exported ELMo in onnxruntime against the eager model's fast path and its export path, measured in one run.

    python benchmarks/bench_export.py                                  # small and original, batch 1, 8, 64
    python benchmarks/bench_export.py --models small --batch-sizes 1 8 --sentences 32   # a quick run

Random-weight models of the published architectures (speed does not depend on the values), float32, CPU. For each
architecture the model is exported with `elmo_hf.conversion.onnx` (the path `elmo-hf export-onnx` takes) into a
temporary folder, then three paths embed the same sentences (the synthetic corpus of `bench_inference.py`, in corpus
order, batches padded to their longest sentence, the first two batches a warm-up, tokenization not timed):
- fast path: the eager model as it runs by default (`torch.inference_mode()`; packed, length-sorted recurrence that
  spends no work on padding, the character CNN once per distinct word, CPU kernels);
- export path: the eager model with `elmo_implementation="export"`, the computation that is exported (every row runs
  to the batch's longest length, the character CNN on every position);
- onnxruntime: the exported graph (CPU execution provider, `--threads` intra-op threads).
Columns: words/s of real words (no `<S>`, `</S>`); "padding" is positions run per real word by the export path and
onnxruntime (1.0 = no padding); ratios are to the fast path of the same row; "ORT diff" is the max abs difference of
onnxruntime's last layer from the fast path on the first timed batch.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_inference import ARCHITECTURES, synthetic_corpus

from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer
from elmo_hf.conversion.onnx import export_onnx


def words_per_second(run, batches: list[dict[str, torch.Tensor]], words: int, repeats: int) -> float:
    """Median words/s of `run` over all batches (after two warm-up batches)."""
    for inputs in batches[:2]:
        run(inputs)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for inputs in batches:
            run(inputs)
        seconds.append(time.perf_counter() - start)
    return words / statistics.median(seconds)


def benchmark_model(name: str, args: argparse.Namespace, sentences: list[list[str]]) -> list[dict]:
    """Rows of one architecture: every batch size, the three paths."""
    import onnxruntime

    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**ARCHITECTURES[name])).eval()
    tokenizer = ElmoTokenizer()
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        start = time.perf_counter()
        path, _ = export_onnx(folder)
        export_seconds = time.perf_counter() - start
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        onnx_mib = os.path.getsize(path) / 2**20

    def fast(inputs):
        model.config.elmo_implementation = "auto"
        return model(**inputs).last_hidden_state

    def export_path(inputs):
        model.config.elmo_implementation = "export"
        return model(**inputs).last_hidden_state

    def onnx(inputs):
        feeds = {"input_ids": inputs["input_ids"].numpy(), "attention_mask": inputs["attention_mask"].numpy()}
        return session.run(["last_hidden_state"], feeds)[0]

    rows = []
    words = sum(map(len, sentences))
    for batch_size in args.batch_sizes:
        batches = [
            dict(tokenizer(sentences[i : i + batch_size], is_split_into_words=True, padding=True, return_tensors="pt"))
            for i in range(0, len(sentences), batch_size)
        ]
        positions = sum(inputs["attention_mask"].numel() for inputs in batches)
        with torch.inference_mode():
            speeds = {label: words_per_second(run, batches, words, args.repeats)
                      for label, run in (("fast", fast), ("export", export_path), ("onnx", onnx))}
            difference = float(np.abs(onnx(batches[0]) - fast(batches[0]).numpy()).max())
        rows.append(dict(model=name, batch=batch_size, padding=positions / words, **speeds, diff=difference,
                         export_seconds=export_seconds, onnx_mib=onnx_mib))
        print(f"  {name} batch {batch_size}: {speeds}", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["small", "original"], choices=list(ARCHITECTURES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--sentences", type=int, default=128, help="sentences of the synthetic corpus")
    parser.add_argument("--repeats", type=int, default=1, help="timed passes over the corpus (median)")
    parser.add_argument("--threads", type=int, default=2, help="torch and onnxruntime intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sentences = synthetic_corpus(args.sentences)
    rows = [row for name in args.models for row in benchmark_model(name, args, sentences)]

    print(f"{sum(map(len, sentences))} words in {len(sentences)} sentences, {args.threads} threads, float32, "
          f"torch {torch.__version__}, load average {os.getloadavg()[0]:.2f} at the end")
    for name in args.models:
        row = next(row for row in rows if row["model"] == name)
        print(f"{name}: export + check {row['export_seconds']:.1f} s, model.onnx {row['onnx_mib']:.0f} MiB")
    print()
    print("| model | batch | padding | fast path words/s | export path words/s | onnxruntime words/s "
          "| ORT / fast | export / fast | ORT diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['model']} | {row['batch']} | {row['padding']:.2f} | {row['fast']:,.0f} | {row['export']:,.0f} "
              f"| {row['onnx']:,.0f} | {row['onnx'] / row['fast']:.2f} | {row['export'] / row['fast']:.2f} "
              f"| {row['diff']:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
