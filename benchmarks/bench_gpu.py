"""ELMo on a GPU, in one run: inference and training speed as fractions of the GPU's measured limits, against the same
architecture built from cuDNN LSTMs, and float32's distance from float64 with torch's default settings.

    python benchmarks/bench_gpu.py                      # everything below, on the first CUDA device
    python benchmarks/bench_gpu.py --sentences 512 --train-steps 2      # shorter
    python benchmarks/bench_gpu.py --sections inference                 # one part (others: training embed exactness)

Runs with the wheels a GPU machine has (torch 2.11 and transformers 5.17 were seen; Triton if present), offline.
On a machine without CUDA it stops with one `error:` line (`--device cpu` runs the same code on a CPU, for the
tests' smoke run; its numbers mean nothing).

What it prints:
- the GPU, torch, transformers and Triton versions, and which implementation the dispatcher of
  `elmo_hf/kernels_elmo.py` takes for the recurrence and the token layer in float32 and bfloat16 inference, and for
  the recurrence in float32 training;
- the limits, measured now: matrix-product TFLOP/s of an 8192^3 product in float32 (torch's default: no TF32) and
  bfloat16, and memory bandwidth (GB/s of a 1 GiB copy, bytes read plus written); the GB/s of a 64 MiB copy from
  the GPU into pageable and into page-locked host memory (the embed command's vectors take the second);
- inference, original architecture (random weights), `--sentences` synthetic sentences (`bench_inference.py`'s
  corpus, mean 25 words) in corpus order, tokenization included (the tokenizer's call, and the copy to the GPU where
  there is one, are timed with the model; elmo-hf reads the tokenizer's CPU tensors as they are, and one more row
  gives it the ids moved to the GPU first, the way that waits for the GPU): words/s for elmo-hf float32 and bfloat16
  and the cuDNN build (float32: the same character
  CNN, one `nn.LSTM(proj_size)` per layer and direction, no clipping; with torch's defaults, which let cuDNN use
  TF32, and without TF32), at each batch size; "of matmul" = useful FLOP/s over the matrix-product limit of the
  row's dtype; "of BW" = the recurrent and projection weights each time step reads, per second, over the bandwidth;
  peak GPU memory of the build (its weights and the peak its calls add, the CUDA graphs' buffers included: each row
  starts without graphs, captured again in its untimed pass); elmo-hf float32 also without its CUDA graphs (the
  dispatcher's next entry, the fused recurrence launching its kernels step by step), to show what the graphs gain at
  each batch size; the graphs captured in each pass (the untimed one first: a graph dropped when the static buffers
  grow is captured again, and a capture runs its blocks once before recording them; `--repeats` passes are timed,
  the best reported);
- training, `ElmoForPreTraining` forward, backward and Adam step as dispatched (the training kernel with Triton
  steps, `gpu_kernels.TRITON_STEPS`), through the reference modules (`elmo_implementation="eager"`, autograd), and
  the cuDNN build of `bench_training.py` (same loss, no clipping; with and without TF32), ptb and original
  architectures, at each training batch size: words/s, "of matmul" (3x forward FLOPs), and the ratio to cuDNN with
  torch's defaults; before timing, the dispatched step's and the reference step's loss and every gradient against
  the float64 reference step's on the same batch (max abs difference relative to the largest value, and which
  parameter it is);
- `elmo-hf embed` (`embed_corpus`, through part files and a merge) over `--embed-sentences` synthetic lines at
  `--embed-batch-size`, the model loaded from a saved folder in float32 and in bfloat16 (issue 25's goal 3), storing
  the command's default (all layers as float32 vectors, 12 KiB a word of the original) and the top layer as float16
  (2 KiB a word; `--embed-outputs` picks either): words/s of the run (first line read to last part written), steady
  (the words after the first batch over the run's time after the model's first call ended) and of the whole call, the
  seconds loading the weights took, the seconds before the first batch reached the model (counting lines, the model's
  fingerprint, reading and encoding the first batch) and the first batch's own (compiling and capturing included), the
  CPU time of the run's reader, main and writer threads and of its writer processes as shares of the run
  (`EmbedSummary.thread_seconds`), and the CUDA graphs captured during the call with the host's seconds in them; then
  the same with `bench_embed.py`'s stand-in, a model that costs nothing (its outputs on the GPU, as a model's are): the
  command's ceiling on this machine's host side, with the writer processes the command chooses for this host and with
  the writer thread alone (`--writers 0`);
- exactness with default settings: the max abs difference of every layer (token layer, then the LSTM layers) from
  float64 (same weights, `elmo_implementation="eager"` in float64) on the first 64 sentences, for float32 as
  dispatched, float32 through the reference modules, bfloat16 and float32 on the export path; whether each of them
  gives bitwise the same layers for ids on the host as for ids on the GPU; the graphed and the fused Triton recurrence
  (compiled and captured on the GPU) against the reference on one direction of the architecture's sizes, float32,
  bfloat16 and float64, packed and padded; and whether the global flags (TF32, matmul precision, cuDNN) are as
  before the run.
"""

import argparse
import contextlib
import copy
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import transformers  # noqa: E402
from bench_embed import StandIn, thread_shares  # noqa: E402
from bench_inference import flops_per_word, recurrent_bytes_per_step, synthetic_corpus  # noqa: E402
from bench_training import TorchLstmBiLm, forward_flops, pretraining_batch, sentences  # noqa: E402

from elmo_hf import ElmoConfig, ElmoForPreTraining, ElmoModel, ElmoTokenizer  # noqa: E402
from elmo_hf.gpu_kernels import CudaGraphs, RecurrenceGraphs, triton_available  # noqa: E402
from elmo_hf.kernels_elmo import (  # noqa: E402
    RECURRENCE_IMPLEMENTATIONS,
    TOKEN_LAYER_IMPLEMENTATIONS,
    Implementation,
)
from elmo_hf.corpus.embed import default_writers, embed_corpus  # noqa: E402
from elmo_hf.corpus.pretraining import PRESETS  # noqa: E402
from elmo_hf.reference_elmo import KernelRequest, LstmLinears, SequenceBatch, lstm_recurrence  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# exactness: against float64, and the Triton recurrences; profile: kernels launched and where the GPU's time goes
SECTIONS = ("inference", "training", "embed", "exactness", "profile")
# What the embed rows store (`--layers`, `--dtype`): the command's default, and the top layer in float16.
EMBED_OUTPUTS = ("all-float32", "top-float16")  # layers-dtype
VOCABULARY_SIZE = 10_002


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_of(run, device: torch.device, repeats: int = 1) -> float:
    """The best of `repeats` timings of `run()` (after one untimed call), synchronized with the device."""
    run()
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def matmul_tflops(dtype: torch.dtype, device: torch.device, size: int) -> float:
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    return 2 * size**3 / seconds_of(lambda: a @ b, device, repeats=5) / 1e12


def bandwidth_gbs(device: torch.device, num_bytes: int) -> float:
    """Bytes read plus written per second by a copy of `num_bytes`."""
    source = torch.ones(num_bytes // 4, device=device)
    target = torch.empty_like(source)
    return 2 * num_bytes / seconds_of(lambda: target.copy_(source), device, repeats=5) / 1e9


def host_copy_gbs(device: torch.device, num_bytes: int, pinned: bool) -> float:
    """Bytes per second of a copy of `num_bytes` from `device` to host memory, page-locked or pageable (how the embed
    command's vectors leave the GPU: `embed.gather_vectors`)."""
    source = torch.ones(num_bytes // 4, device=device)
    target = torch.empty(source.shape, pin_memory=pinned)
    return num_bytes / seconds_of(lambda: target.copy_(source), device, repeats=5) / 1e9


def chosen(table: dict, dtype: torch.dtype, device: torch.device, recording: bool = False) -> str:
    """The dispatcher's choice for inference (or training, `recording`) on a packed batch of stock layers
    (`kernels_elmo.choose_implementation` after its checks of the module)."""
    request = KernelRequest(dtype, device, recording=recording, packed=True, traced=False)
    return next(name for name, implementation in table.items() if implementation.supports(request))


def global_flags() -> dict:
    return {
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn.enabled": torch.backends.cudnn.enabled,
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
    }


class CudnnBiLm(nn.Module):
    """The inference biLM from stock layers: `bench_training.TorchLstmBiLm`'s token layer and `nn.LSTM`s (its
    weights; its softmax, of three words, unused), run over the tokenizer's batches; returns the top layer of both
    directions."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        config = copy.deepcopy(config)
        config.word_vocab_size = 3
        self.stock = TorchLstmBiLm(config)
        self.boundaries = ElmoModel.boundary_char_ids_of(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        batch_size, length, chars = input_ids.shape
        lengths = attention_mask.sum(1) + 2
        steps = torch.arange(length + 2, device=input_ids.device)
        # <S> words </S> in each row, padding after
        padding = input_ids.new_zeros(batch_size, 1, chars)
        char_ids = torch.cat([padding, input_ids, padding], 1)
        char_ids[:, 0] = self.boundaries[0].to(input_ids.device)
        char_ids[steps.unsqueeze(0) == lengths.unsqueeze(1) - 1] = self.boundaries[1].to(input_ids.device)
        tokens = self.stock.token_encoder(char_ids.view(-1, chars)).view(batch_size, length + 2, -1)
        reverse = torch.where(steps < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - steps, steps)
        reverse = reverse.unsqueeze(-1).expand_as(tokens)
        lengths = lengths.cpu()
        forward_top = self.stock._direction(tokens, lengths, 0)
        backward_top = self.stock._direction(tokens.gather(1, reverse), lengths, 1).gather(1, reverse)
        return torch.cat([forward_top, backward_top], -1)


@contextlib.contextmanager
def without_graphs(active: bool):
    """While `active`, the dispatcher's CUDA-graph entry supports no call (it takes the next entry)."""
    entry = RECURRENCE_IMPLEMENTATIONS["cuda graphs"]
    if active:
        RECURRENCE_IMPLEMENTATIONS["cuda graphs"] = Implementation(entry.function, lambda request: False)
    try:
        yield
    finally:
        RECURRENCE_IMPLEMENTATIONS["cuda graphs"] = entry


def without_tf32(active: bool) -> contextlib.AbstractContextManager:
    """While `active`, cuDNN without TF32 (torch lets cuDNN's convolutions and LSTMs use it by default): the cuDNN
    build as exact as elmo-hf's float32. Restored after."""
    if not active:
        return contextlib.nullcontext()
    return torch.backends.cudnn.flags(
        enabled=True, benchmark=torch.backends.cudnn.benchmark, deterministic=torch.backends.cudnn.deterministic,
        allow_tf32=False,
    )


class CountedGraphs(CudaGraphs):
    """`gpu_kernels.CudaGraphs` counting its captures and the host's seconds in them, so that an inference row says
    how many of the graphs it replays were captured while it was timed (a capture runs its blocks once before
    recording them), and an embed row how many a stream of new batches brought and what they cost the host."""

    captures = 0
    seconds = 0.0

    @classmethod
    def capture(cls, body: Callable[[], None], device: torch.device, pool: tuple) -> Callable[[], None]:
        cls.captures += 1
        start = time.perf_counter()
        try:
            return super().capture(body, device, pool)
        finally:
            cls.seconds += time.perf_counter() - start


def inference_rows(args, device: torch.device, limits: dict) -> Iterator[str]:
    """One table row per build and batch size; also the peak memory of each."""
    config = ElmoConfig(**PRESETS[args.architecture])
    corpus = synthetic_corpus(args.sentences)
    words = sum(map(len, corpus))
    tokenizer = ElmoTokenizer()
    torch.manual_seed(0)
    float32 = ElmoModel(config).eval().to(device)
    builds = {
        "elmo-hf float32": float32,
        "elmo-hf float32, ids moved to the GPU first": float32,
        "elmo-hf float32 without graphs": ElmoModel(config).eval().to(device),
        "elmo-hf bfloat16": ElmoModel(config).eval().to(device, torch.bfloat16),
        "cuDNN nn.LSTM float32": CudnnBiLm(config).eval().to(device),
    }
    builds["cuDNN nn.LSTM float32 without TF32"] = builds["cuDNN nn.LSTM float32"]
    for batch_size in args.batch_sizes:
        batches = [corpus[start : start + batch_size] for start in range(0, len(corpus), batch_size)]
        steps = sum(max(map(len, batch)) + 2 for batch in batches)

        for name, model in builds.items():
            dtype = torch.bfloat16 if "bfloat16" in name else torch.float32

            captures = []  # per pass: the untimed one, then each timed one

            # elmo-hf reads the tokenizer's CPU tensors where they are (no wait for the GPU); the other builds, and
            # one elmo-hf row for comparison, are given them on the GPU, copied there first (which waits for it).
            on_host = name.startswith("elmo-hf") and "moved" not in name

            def run(model=model, on_host=on_host):
                before = CountedGraphs.captures
                for batch in batches:
                    inputs = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
                    model(**(inputs if on_host else inputs.to(device)))
                captures.append(CountedGraphs.captures - before)

            peak = "n/a"
            if device.type == "cuda":  # this build's own: its weights, and what its calls allocate (graphs included)
                RecurrenceGraphs.clear()
                before = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            exact = without_tf32("without TF32" in name)
            with torch.inference_mode(), without_graphs("without graphs" in name), exact:
                seconds = seconds_of(run, device, repeats=args.repeats)
            if device.type == "cuda":
                weights = sum(p.numel() * p.element_size() for p in model.parameters())
                peak = f"{(torch.cuda.max_memory_allocated(device) - before + weights) / 2**30:.2f}"
            tflops = words / seconds * flops_per_word(config) / 1e12
            streamed = steps / seconds * recurrent_bytes_per_step(config, torch.finfo(dtype).bits // 8) / 1e9
            matmul = limits["bfloat16" if dtype == torch.bfloat16 else "float32"]
            yield (
                f"| {batch_size} | {name} | {words / seconds:,.0f} | {tflops:.2f} | {tflops / matmul:.1%} | "
                f"{streamed / limits['bandwidth']:.1%} | {peak} | {', '.join(map(str, captures))} |"
            )


class FirstCall(nn.Module):
    """`model` as `embed_corpus` sees it, with the time its first call started and finished (the GPU synchronised)
    and that call's mask (its words are counted after the run: reading a mask on the GPU would wait for it)."""

    def __init__(self, model: nn.Module, device: torch.device):
        super().__init__()
        self.model, self.config, self.device = model, model.config, device
        self.started: float | None = None
        self.finished: float | None = None
        self.mask: torch.Tensor | None = None

    def forward(self, **inputs):
        if self.started is None:
            self.started, self.mask = time.perf_counter(), inputs["attention_mask"]
        outputs = self.model(**inputs)
        if self.finished is None:
            synchronize(self.device)
            self.finished = time.perf_counter()
        return outputs

    def steady(self, summary) -> str:
        """Words/s once the first batch (compiling, first captures) is behind: the words of every later batch over the
        time from the first call's end to the run's end, taken as the first call's start plus the run's seconds (the
        run starts a little earlier, by the reading of the first batch, so this errs low)."""
        end = self.started + summary.seconds
        return f"{(summary.words - int(self.mask.sum())) / (end - self.finished):,.0f}"


def embed_rows(args, device: torch.device) -> Iterator[str]:
    """`embed_corpus` (what `elmo-hf embed` runs) over `--embed-sentences` lines at `--embed-batch-size`, storing each
    of `EMBED_OUTPUTS`, the model loaded from a saved folder in float32 and in bfloat16, then `bench_embed.py`'s
    stand-in (a model that costs nothing: the command's ceiling on this host), with the writer processes the command
    chooses here and with the writer thread alone."""
    config = ElmoConfig(**PRESETS[args.architecture])
    lines = [" ".join(words) for words in synthetic_corpus(args.embed_sentences, seed=1)]
    with tempfile.TemporaryDirectory() as scratch:
        folder, source, output = Path(scratch) / "model", Path(scratch) / "input.txt", Path(scratch) / "vectors.hdf5"
        torch.manual_seed(0)
        ElmoModel(config).save_pretrained(folder)
        ElmoTokenizer().save_pretrained(folder)
        source.write_text("\n".join(lines) + "\n", encoding="utf-8")
        builds = {
            "elmo-hf float32": (torch.float32, None), "elmo-hf bfloat16": (torch.bfloat16, None),
            f"stand-in, {default_writers()} writer processes": (None, None), "stand-in, writer thread": (None, 0),
        }
        for build, (dtype, writers) in builds.items():
            start = time.perf_counter()
            if dtype is None:
                model = StandIn(config).to(device)
            else:
                model = ElmoModel.from_pretrained(folder).to(device, dtype)
            synchronize(device)
            loading = time.perf_counter() - start
            for layers, vectors_dtype in (output.split("-") for output in args.embed_outputs):
                timed = FirstCall(model.eval(), device).eval()
                captures, capturing = CountedGraphs.captures, CountedGraphs.seconds
                start = time.perf_counter()
                summary = embed_corpus(
                    source, output, model=(timed, ElmoTokenizer.from_pretrained(folder)), layers=layers,
                    dtype=vectors_dtype, batch_size=args.embed_batch_size, writers=writers, overwrite=True,
                    progress=False,
                )
                whole = time.perf_counter() - start
                yield (
                    f"| {build} | {layers} {vectors_dtype} | {summary.words / summary.seconds:,.0f} | "
                    f"{timed.steady(summary)} | {summary.words / whole:,.0f} | {loading:.1f} | "
                    f"{timed.started - start:.1f} | {timed.finished - timed.started:.1f} | {thread_shares(summary)} | "
                    f"{CountedGraphs.captures - captures}, {CountedGraphs.seconds - capturing:.2f} s |"
                )
                del timed
            del model


def training_rows(args, device: torch.device, limits: dict) -> Iterator[str]:
    """One row per architecture and batch size: elmo-hf and the cuDNN build, steps interleaved."""
    for architecture in args.train_architectures:
        config = ElmoConfig(**PRESETS[architecture], word_vocab_size=VOCABULARY_SIZE, pretraining_dropout=0.0)
        for batch_size in args.train_batch_sizes:
            text = sentences(batch_size)
            words = sum(map(len, text))
            batch = pretraining_batch(text)
            flops = 3 * forward_flops(config, words, len(text))
            torch.manual_seed(0)
            elmo = ElmoForPreTraining(config).train().to(device)
            reference = copy.deepcopy(elmo)
            reference.config.elmo_implementation = "eager"
            stock = TorchLstmBiLm(config).train().to(device)
            on_device = {key: value.to(device) for key, value in batch.items()}
            exact = copy.deepcopy(reference).double()
            for name, build in (("dispatched", elmo), ("reference", reference)):
                print(f"{architecture}, batch {batch_size}: {name} step against float64, "
                      f"{gradient_difference(build, exact, on_device)}")
            del exact

            stock_exact = copy.deepcopy(stock)

            def stock_loss(model: nn.Module = stock) -> torch.Tensor:
                with device:  # its forward makes index tensors without naming a device: on the GPU here
                    return model(**on_device)

            builds = [
                ("elmo-hf", elmo, lambda: elmo(**on_device).loss),
                ("elmo-hf reference", reference, lambda: reference(**on_device).loss),
                ("cuDNN nn.LSTM without TF32", stock_exact, lambda: stock_loss(stock_exact)),
                ("cuDNN nn.LSTM", stock, stock_loss),
            ]
            optimizers = [torch.optim.Adam(model.parameters(), lr=1e-4) for _, model, _ in builds]
            times = [[] for _ in builds]
            for step in range(args.train_steps + 1):  # the first step warms up
                for (name, _, loss_of), optimizer, build_times in zip(builds, optimizers, times):
                    synchronize(device)
                    start = time.perf_counter()
                    with without_tf32("without TF32" in name):
                        loss_of().backward()
                    optimizer.step()
                    optimizer.zero_grad()
                    synchronize(device)
                    if step:
                        build_times.append(time.perf_counter() - start)
            medians = [statistics.median(build_times) for build_times in times]
            for (name, _, _), seconds in zip(builds, medians):
                tflops = flops / seconds / 1e12
                yield (
                    f"| {architecture} | {batch_size} | {name} | {words / seconds:,.0f} | {tflops:.2f} | "
                    f"{tflops / limits['float32']:.1%} | {medians[-1] / seconds:.2f}x |"
                )


def gradient_difference(model: nn.Module, reference: nn.Module, batch: dict) -> str:
    """One step's loss and every parameter's gradient by `model` against `reference` (same weights, same batch; the
    float64 build of the reference modules in the training rows): the max abs differences relative to the reference's
    largest value."""
    values = []
    for build in (model, reference):
        build.zero_grad()
        loss = build(**batch).loss
        loss.backward()
        gradients = {name: parameter.grad.double() for name, parameter in build.named_parameters()}
        values.append((loss.detach().double(), gradients))
        build.zero_grad()
    (loss, gradients), (reference_loss, reference_gradients) = values
    worst, name = max(
        (float((gradients[name] - expected).abs().max() / expected.abs().max().clamp_min(1e-30)), name)
        for name, expected in reference_gradients.items()
    )
    return f"loss {float(loss):.6f} / {float(reference_loss):.6f}, gradients within {worst:.1e} (relative; {name})"


def kernel_rows(args, device: torch.device) -> Iterator[str]:
    """The graphed (CUDA only) and the fused Triton recurrence against the reference on this device: one LSTM
    direction of the architecture's sizes, random weights, 64 rows (4 on a CPU, in Triton's interpreter) of random
    lengths, both clips active and not float32 numbers (0.6 and 0.4: a float64 kernel clipping at a float32 bound is
    off by 1e-8), packed and padded; max abs difference of outputs and final states (the contract test
    checks the same on small sizes, the graphs stood in by eager runs). The graphed one runs each batch twice: the
    capture, then a replay."""
    config = ElmoConfig(**PRESETS[args.architecture])
    generator = torch.Generator().manual_seed(0)
    num_rows = 64 if device.type == "cuda" else 4
    lengths = torch.randint(1, 40, (num_rows,), generator=generator)
    names = ["cuda graphs", "triton"] if device.type == "cuda" else ["triton"]
    linears = LstmLinears(
        nn.Linear(config.projection_dim, 4 * config.lstm_dim, bias=False),
        nn.Linear(config.projection_dim, 4 * config.lstm_dim),
        nn.Linear(config.lstm_dim, config.projection_dim, bias=False),
    )
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        for packed in (True, False):
            batch = SequenceBatch(lengths.to(device), int(lengths.max()), packed)
            tokens = torch.randn(num_rows, int(lengths.max()), config.projection_dim, generator=generator)
            inputs = batch.directions(tokens.to(device, dtype))[0]
            dims = (config.projection_dim, config.lstm_dim)
            state = tuple(torch.randn(num_rows, dim, generator=generator).to(device, dtype) for dim in dims)
            for linear in linears:
                linear.to(device, dtype)
            with torch.inference_mode():
                expected = lstm_recurrence(inputs, batch, state, linears, 0.6, 0.4)
                for name in names:
                    recurrence = RECURRENCE_IMPLEMENTATIONS[name].function
                    differences = []
                    for _ in range(2 if name == "cuda graphs" else 1):
                        actual = recurrence(inputs, batch, state, linears, 0.6, 0.4)
                        pairs = zip((actual[0], *actual[1]), (expected[0], *expected[1]))
                        differences += [(value.double() - truth.double()).abs().max().item() for value, truth in pairs]
                    difference = max(differences)
                    layout = "packed" if packed else "padded"
                    yield f"| {name} | {str(dtype).removeprefix('torch.')} | {layout} | {difference:.1e} |"


def exactness_rows(args, device: torch.device) -> Iterator[str]:
    """Max abs difference of each layer from float64 (and its ratio to the layer's largest float64 value), with default
    settings: float32 as dispatched, float32 through the reference modules (`elmo_implementation="eager"`, whose
    convolutions follow torch's cuDNN TF32 flag), and bfloat16."""
    config = ElmoConfig(**PRESETS[args.architecture])
    batch = synthetic_corpus(args.sentences)[:64]
    inputs = ElmoTokenizer()(batch, is_split_into_words=True, padding=True, return_tensors="pt").to(device)
    torch.manual_seed(0)
    model = ElmoModel(config).eval().to(device)
    exact, eager = copy.deepcopy(model).double(), copy.deepcopy(model)
    bfloat16 = copy.deepcopy(model).to(torch.bfloat16)
    exact.config.elmo_implementation = eager.config.elmo_implementation = "eager"
    padded = copy.deepcopy(model)
    padded.config.elmo_implementation = "export"
    mask = inputs["attention_mask"].bool()
    on_host = {key: value.cpu() for key, value in inputs.items()}
    with torch.inference_mode():
        expected = exact(**inputs, output_hidden_states=True).hidden_states
        same = []  # each build given the ids on the host against the ids on the device: the same values, bitwise
        builds = ("float32", model), ("float32 eager", eager), ("bfloat16", bfloat16), ("float32 export", padded)
        for name, build in builds:
            layers = build(**inputs, output_hidden_states=True).hidden_states
            read_there = build(**on_host, output_hidden_states=True).hidden_states
            same.append(f"{name} {all(torch.equal(a, b) for a, b in zip(layers, read_there))}")
            cells = []
            for layer, truth in zip(layers, expected):
                difference = (layer.double() - truth)[mask].abs().max().item()
                cells.append(f"{difference:.1e} ({difference / truth[mask].abs().max().item():.1e})")
            yield f"| {name} | {' | '.join(cells)} |"
    yield ""
    yield f"ids on the host give bitwise the layers of ids on the device: {', '.join(same)}"


def profile_rows(args, device: torch.device) -> Iterator[str]:
    """Where the time of one call goes, by torch's profiler (after a warm-up call): an inference batch of
    `--profile-batch-size` sentences (tokenized beforehand) in float32 and bfloat16, each given the ids on the host
    and moved to the GPU in the call, and a training step (forward,
    backward) of `--train-architectures[-1]` at `--train-batch-sizes[-1]`: the wall time, the kernels launched, the
    GPU's busy time (the sum of its kernels' times), and the kernels taking the most of it; then the host's side of
    another call (cProfile: the Python functions taking the most time of their own)."""
    from torch.profiler import ProfilerActivity, profile

    config = ElmoConfig(**PRESETS[args.architecture])
    batch = synthetic_corpus(args.profile_batch_size)
    inputs = ElmoTokenizer()(batch, is_split_into_words=True, padding=True, return_tensors="pt")
    torch.manual_seed(0)
    calls = {}
    for dtype in DTYPES.values():
        model = ElmoModel(config).eval().to(device, dtype)
        calls[f"inference {str(dtype).removeprefix('torch.')}, batch {args.profile_batch_size}, ids on the host"] = (
            lambda model=model: model(**inputs), True
        )
        calls[f"inference {str(dtype).removeprefix('torch.')}, batch {args.profile_batch_size}, ids on the GPU"] = (
            lambda model=model: model(**{key: value.to(device) for key, value in inputs.items()}), True
        )
    architecture, batch_size = args.train_architectures[-1], args.train_batch_sizes[-1]
    training_config = ElmoConfig(**PRESETS[architecture], word_vocab_size=VOCABULARY_SIZE, pretraining_dropout=0.0)
    text = sentences(batch_size)
    collated = {key: value.to(device) for key, value in pretraining_batch(text).items()}
    trained = ElmoForPreTraining(training_config).train().to(device)
    calls[f"training {architecture}, batch {batch_size}"] = (lambda: trained(**collated).loss.backward(), False)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    for name, (call, inference) in calls.items():
        with torch.inference_mode(inference):
            call()
            synchronize(device)
            start = time.perf_counter()
            with profile(activities=activities) as profiler:
                call()
                synchronize(device)
            wall = time.perf_counter() - start
        kernels = [event for event in profiler.events() if event.device_type == torch.autograd.DeviceType.CUDA]
        busy = sum(event.device_time for event in kernels) / 1e3
        by_name: dict[str, list[float]] = {}
        for event in kernels:
            by_name.setdefault(event.name, []).append(event.device_time / 1e3)
        top = sorted(by_name.items(), key=lambda item: -sum(item[1]))[: args.profile_top]
        yield f"{name}: {wall * 1e3:.1f} ms wall (profiled), {len(kernels)} kernels, GPU busy {busy:.1f} ms"
        with torch.inference_mode(inference):
            waits = synchronisations(call, device)
        yield f"  host synchronisations: {sum(waits.values())} (" + ", ".join(
            f"{place} {count}x" for place, count in waits.most_common()
        ) + ")"
        for kernel, times in top:
            yield f"    {sum(times):8.2f} ms {len(times):6d}x  {kernel[:110]}"
        host = cProfile.Profile()
        with torch.inference_mode(inference):
            start = time.perf_counter()
            host.runcall(call)
            synchronize(device)
            wall = time.perf_counter() - start
        report = io.StringIO()
        for order in ("tottime", "cumulative"):
            report = io.StringIO()
            pstats.Stats(host, stream=report).sort_stats(order).print_stats(2 * args.profile_top)
            lines = [line for line in report.getvalue().splitlines() if line.strip()]
            yield f"  host (cProfile, {wall * 1e3:.1f} ms wall), functions by {order} time:"
            yield from (f"    {line[:150]}" for line in lines[-2 * args.profile_top - 1 :])


def synchronisations(call: Callable[[], object], device: torch.device) -> Counter:
    """Where one `call` makes the host wait for the device (torch's sync debug mode: `.item()`, `.tolist()`, boolean
    indexing, `nonzero`, `unique`...), as `file:line` of the Python that asked, with counts; none on a CPU. A wait
    after the call has queued heavy work stalls the host for that work; waits before it cost a round trip each."""
    if device.type != "cuda":
        return Counter()
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return Counter(f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke run of the code only)")
    parser.add_argument("--architecture", default="original", choices=sorted(PRESETS), help="of the inference rows")
    parser.add_argument("--sentences", type=int, default=2048, help="inference corpus size")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--repeats", type=int, default=2, help="timed passes over the corpus; the best is reported")
    parser.add_argument("--train-architectures", nargs="+", default=["ptb", "original"], choices=sorted(PRESETS))
    parser.add_argument("--train-batch-sizes", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--train-steps", type=int, default=5, help="timed training steps per build (median)")
    parser.add_argument("--embed-sentences", type=int, default=4096, help="lines of the embed rows")
    parser.add_argument("--embed-batch-size", type=int, default=256)
    parser.add_argument(
        "--embed-outputs", nargs="+", choices=EMBED_OUTPUTS, default=list(EMBED_OUTPUTS),
        help="what the embed rows store: layers-dtype",
    )
    parser.add_argument(
        "--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS),
        help="what to measure after the limits (default: all; a subset splits a run over calls of a time limit)",
    )
    parser.add_argument("--profile-batch-size", type=int, default=256, help="inference batch of the profile section")
    parser.add_argument("--profile-top", type=int, default=8, help="kernels listed per profiled call")
    parser.add_argument("--matmul-size", type=int, default=8192)
    parser.add_argument("--bandwidth-mib", type=int, default=1024)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # each row as it is measured, also when a time limit stops the run
    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # the Triton kernels on CPU tensors, read as they are first made
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA GPU here (torch.cuda.is_available() is False): run bench_gpu.py on a GPU machine, or "
              "--device cpu for a smoke run of the code", file=sys.stderr)
        return 1
    flags = global_flags()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (smoke run: numbers mean nothing)"
    triton = "absent"
    if triton_available():
        import triton as triton_module

        triton = triton_module.__version__
    print(f"device: {name}; torch {torch.__version__}, transformers {transformers.__version__}, Triton {triton}")
    for dtype in DTYPES.values():
        print(f"dispatcher, {str(dtype).removeprefix('torch.')} inference: recurrence "
              f"{chosen(RECURRENCE_IMPLEMENTATIONS, dtype, device)}, token layer "
              f"{chosen(TOKEN_LAYER_IMPLEMENTATIONS, dtype, device)}")
    training = chosen(RECURRENCE_IMPLEMENTATIONS, torch.float32, device, recording=True)
    print(f"dispatcher, float32 training: recurrence {training}")
    limits = {
        "float32": matmul_tflops(torch.float32, device, args.matmul_size),
        "bfloat16": matmul_tflops(torch.bfloat16, device, args.matmul_size),
        "bandwidth": bandwidth_gbs(device, args.bandwidth_mib * 2**20),
    }
    print(f"limits: matmul {limits['float32']:.1f} TFLOP/s float32, {limits['bfloat16']:.1f} TFLOP/s bfloat16; "
          f"bandwidth {limits['bandwidth']:,.0f} GB/s")
    if device.type == "cuda":  # page-locked memory needs a GPU
        batch_bytes = 64 * 2**20  # about a batch of 256 sentences' vectors, all layers in float32
        print(f"device to host, 64 MiB: {host_copy_gbs(device, batch_bytes, pinned=False):,.1f} GB/s into pageable "
              f"memory, {host_copy_gbs(device, batch_bytes, pinned=True):,.1f} GB/s into page-locked memory")

    if device.type == "cuda":
        RecurrenceGraphs.device_graphs = CountedGraphs  # the inference rows count each pass's captures
    if "inference" in args.sections:
        print(f"\ninference, {args.architecture}, {args.sentences} sentences in corpus order, tokenization included")
        print("| batch | build | words/s | TFLOP/s | of matmul | of BW | peak GiB | graphs captured per pass |")
        print("|---|---|---|---|---|---|---|---|")
        for row in inference_rows(args, device, limits):
            print(row)

    if "training" in args.sections:
        print("\ntraining step (forward, backward, Adam), float32")
        print("| architecture | batch | build | words/s | TFLOP/s | of matmul | speed vs cuDNN |")
        print("|---|---|---|---|---|---|---|")
        for row in training_rows(args, device, limits):
            print(row)

    if "embed" in args.sections:
        print(f"\nelmo-hf embed (embed_corpus), {args.architecture}, {args.embed_sentences} lines, batch "
              f"{args.embed_batch_size}; the model's first call per stored output")
        print("| build | vectors | run words/s | steady words/s | whole call words/s | loading s | before the first "
              "batch s | first batch s | reader CPU | main CPU | writer CPU | writer processes CPU | graphs captured, "
              "host s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for row in embed_rows(args, device):
            print(row)

    if "exactness" in args.sections:
        config = ElmoConfig(**PRESETS[args.architecture])
        print("\nmax abs difference from float64 per layer (relative to the layer's largest value), default settings")
        print("| dtype | " + " | ".join(f"layer {i}" for i in range(config.num_layers + 1)) + " |")
        print("|---|" + "---|" * (config.num_layers + 1))
        for row in exactness_rows(args, device):
            print(row)
        print("\nthe Triton recurrences against the reference (max abs difference of outputs and final states)")
        if triton_available():
            print("| implementation | dtype | batch | difference |")
            print("|---|---|---|---|")
            for row in kernel_rows(args, device):
                print(row)
        else:
            print("Triton is not installed: not checked")
    if "profile" in args.sections:
        print("\nprofile: one call each, after a warm-up (kernel time summed by kernel name)")
        for row in profile_rows(args, device):
            print(row)
    print(f"\nglobal flags unchanged by the run: {'yes' if global_flags() == flags else f'no: {global_flags()}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
