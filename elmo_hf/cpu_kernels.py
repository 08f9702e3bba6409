# Copyright 2026 The elmo-hf Authors. ELMo by Peters et al. (2018), Allen Institute for AI.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""CPU inference kernels: implementations of `reference_elmo`'s token layer and recurrence (same signatures, same
results) with faster matrix products, listed in `kernels_elmo.py`'s tables.

The dispatcher of `kernels_elmo.py` takes them only where the result cannot differ from the reference (stock layers
without hooks, no autograd recording, no tracing) and `supports` says this CPU runs them: float32, or bfloat16 where
the CPU has AVX-512 BF16 or AMX (elsewhere oneDNN may refuse bfloat16 products). They read the same weights and:
- run every matrix product through oneDNN, the library `torch.compile` uses for CPU linear layers, with the bias (and
  the addend of the recurrence) fused into the product; for the few-row products of the recurrence, on a copy of the
  weight reordered into oneDNN's blocked layout where timing on the CPU at hand says it pays (`RecurrentLinear`);
- compute the character convolutions as matrix products over the windows of a chunk of words, but for the windows
  inside each word's final padding, which equal its last window;
- compute the input-to-gate products of blocks of time steps at once, bias included, so that only the recurrence is
  sequential, and once per distinct row where rows repeat (the first layer's token vectors).

Reordered weights are kept across calls (`ReorderedWeights`: explicit `build` and `clear`, memory documented there),
each beside a snapshot of the weight it was made from, and used only after the weight is found byte for byte equal
to the snapshot: no cache can go stale, whatever changed the weight (`.data` edits, fused optimizers,
`load_state_dict`, tensor swapping do not bump a version counter reliably), and the comparison costs a fraction of a
reordering (2-3 ms against 15-70 ms for the original architecture's 32 MiB hidden-to-gate weight on a 2-vCPU EPYC).
"""

import contextlib
import ctypes
import functools
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from huggingface_hub import constants
from torch import nn

from .reference_elmo import (
    Direction,
    FinishedRows,
    KernelRequest,
    Layer,
    LstmLinears,
    LstmState,
    SequenceBatch,
    TokenLayers,
    directions_in_turn,
    group_rows,
    same_bytes,
    with_word_embeddings,
)

# Rows of input-to-gate products computed at once in `lstm_with_projection`: large enough for an efficient matrix
# product, small enough that memory stays bounded for any sequence length ((rows, 4 * lstm_dim) floats at a time).
# At 256 rows the original architecture's block is 16 MiB, below the 32 MiB up to which the C allocator reuses freed
# memory instead of mapping fresh pages for every block.
GATE_INPUT_BLOCK_ROWS = 256
# `GateInputs` looks for rows that repeat in spans of whole steps whose products, were no row repeated, would take up
# to this many bytes (as a block's, within what the C allocator reuses: 512 rows of the original architecture), and
# multiplies a span's distinct rows once where at least `REPEATED_SHARE` of its rows repeat another (the token vectors
# of 64 sentences: 53% in Moby-Dick, 64% in PTB); below that share, gathering each step's rows costs more than the
# products it saves.
DISTINCT_SPAN_BYTES = 32 * 2**20
REPEATED_SHARE = 1 / 8
# The steps of `StepThreads.run_rows` run on row counts rounded up to a multiple of this.
ROW_MULTIPLE = 8
# `encode_words` multiplies the first windows of a chunk's words in counts rounded up to a multiple of this.
WINDOW_MULTIPLE = 8
# A temporary file of `KnownThreadBits` older than this (seconds) was left by a killed process and is removed.
ORPHAN_SECONDS = 3600


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


@functools.cache
def bfloat16_supported() -> bool:
    """Whether this CPU computes bfloat16 products natively (AVX-512 BF16 or AMX), as torch reports it; without, oneDNN
    may refuse a bfloat16 product ("could not create a primitive descriptor"). The same answer in every process; asked
    once (torch's probe takes about 0.2 ms)."""
    capabilities = torch.cpu.get_capabilities()
    native = capabilities.get("avx512_bf16", False) or capabilities.get("amx_bf16", False)
    return native and torch.ops.mkldnn._is_mkldnn_bf16_supported()


class VectorMath:
    """MKL's vector math (VML), which computes torch's float32 and float64 element-wise `FUNCTIONS` on x86 (`tanh`
    of every LSTM step among them), made ready in a process before two threads can call it.

    oneMKL 2024.2, the MKL of torch 2.13's x86 wheels, picks each of these functions' kernels (instruction set and
    accuracy) at its first call in the process, and first calls made by two threads at the same time can give one
    of them, for a while, another kernel than the accurate one torch asks for: seen here in a fresh process whose
    first layer ran its two directions at once (`DirectionsAtOnce`), where five time steps of the forward direction
    took `tanh` from MKL's AVX2 "enhanced performance" kernel (bit for bit: relative errors up to 5.2e-5, against
    one rounding otherwise), and the layer's vectors moved by up to 3.7e-5; a product's OpenMP threads calling the
    function on their parts of a large tensor are exposed the same way. `resolve` calls each function once on one
    element of each dtype, in the calling thread, before anything else of ELMo runs in the process
    (`kernels_elmo.choose_implementation` asks first); 2-9 ms once.
    """

    # torch's functions whose float32 and float64 kernels call VML in its x86 builds (here each gave the bits of VML's
    # accurate kernel on 4,096 values of each dtype).
    FUNCTIONS = (
        "acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10", "log2", "sin", "sqrt", "tan",
        "tanh", "trunc",
    )  # fmt: skip
    _ready = False
    _lock = threading.Lock()

    @classmethod
    def resolve(cls) -> None:
        """Calls each of `FUNCTIONS` once on one element of float32 and of float64, the first time it is asked in the
        process (a forked child inherits the state); other threads asking meanwhile wait for it. Under a mode that
        keeps the calls from computing (fake tensors), a later call does it."""
        if cls._ready:
            return
        with cls._lock, torch.inference_mode():
            if cls._ready:
                return
            results = [
                getattr(torch, name)(torch.full((1,), 0.5, dtype=dtype, device="cpu"))
                for dtype in (torch.float32, torch.float64)
                for name in cls.FUNCTIONS
            ]
            cls._ready = all(type(result) is torch.Tensor and result.device.type == "cpu" for result in results)


def supports(request: KernelRequest) -> bool:
    """The kernels' capability: inference (no autograd recording, not traced) on a packed batch, on a CPU with oneDNN,
    in float32, or in bfloat16 where `bfloat16_supported`."""
    if request.device.type != "cpu" or request.recording or request.traced or not request.packed:
        return False
    if request.dtype == torch.bfloat16:
        return bfloat16_supported() and onednn_available()
    return request.dtype == torch.float32 and onednn_available()


def row_bucket(rows: int) -> int:
    """Products are timed per bucket of row counts: 1, 2, 4, 8, ... 256 (the next power of two, at most 256)."""
    return min(1 << (rows - 1).bit_length(), GATE_INPUT_BLOCK_ROWS)


# The kernels of a recurrent product: oneDNN on the plain weight, on the reordered weight, and (for single rows) on
# the reordered weight without repeating the row, and `BlockedRows` on the weight in column blocks.
PLAIN, REORDERED, REORDERED_SINGLE_ROW, BLOCKED = "plain", "reordered", "reordered single row", "blocked"
# The layouts of the copies `ReorderedWeights` keeps, and the copy each kernel reads (None: the weight itself).
ONEDNN_LAYOUT, BLOCKED_LAYOUT = "onednn", "blocked"
KERNEL_LAYOUTS = {
    PLAIN: None, REORDERED: ONEDNN_LAYOUT, REORDERED_SINGLE_ROW: ONEDNN_LAYOUT, BLOCKED: BLOCKED_LAYOUT
}


class BlockedRows:
    """The product of a few rows with a weight, `(rows, in_features)` -> `(rows, out_features)` plus an addend, written
    in C for AVX2 and FMA, reading the weight in column blocks of 8 (`blocked_weight`): one contiguous stream per
    block.

    The recurrence's products are bound by reading the weights: at batch 1 each step reads every recurrent weight
    once (160 MiB for the original architecture, five times the L3 of a 2-vCPU EPYC Zen 3), and oneDNN's single-row
    kernels read it at 7-9 GB/s with one thread there, where this loop reads 14-17 GB/s; with 2 to 64 rows, oneDNN's
    products of the same weights took 1.1-2.7x as long as this loop on that CPU. It computes what oneDNN computes for
    two rows or more (`recurrent_product`): each output a chain of fused multiply-adds over the inputs in order, from
    zero, in blocks of `k_block` inputs whose sums are added in order, then the addend (oneDNN splits 4096 inputs
    into blocks of 1024 on that CPU, and 512 not at all), whatever the rows beside it. `ReorderTimings` takes it only
    where a `k_block` gives oneDNN's bits exactly on random values, with and without the addend, on the CPU at hand,
    with torch's thread count and with one thread. It splits the outputs over torch's thread count, run by torch's
    own OpenMP threads (`openmp_parallel_region`; each output computed by one thread, the same way on any count); the
    two directions of a layer at once run one thread each (`DirectionsAtOnce`).

    Available on x86-64 Linux CPUs with AVX2 and FMA where a C compiler (`$CC`, else `cc`) builds `SOURCE`; the
    library is kept under `$ELMO_HF_CACHE` (as `KnownThreadBits`' file), named after the source's hash, built once
    per machine (a fraction of a second), in a temporary folder where the cache is off or not writable. Elsewhere
    the other kernels run, with the same bits.
    """

    SOURCE = r"""
#include <immintrin.h>

/* Loops over rows and column blocks, unrolled whole so that their chains are registers, not an array in memory. */
#define UNROLLED _Pragma("GCC unroll 8")

/* R rows of `inputs` (in_features apart) times C column blocks of `weight` (laid out [out_features / 8][in_features]
   [8]) over the inputs [start, end): each output a chain of fused multiply-adds from zero, in order, written to `out`
   (out_features apart) where start is 0 and added to it otherwise. R and C are constants where it is inlined, so the
   R * C <= 12 chains stay in registers beside the C weights and the broadcast input (AVX2 has 16). */
static inline __attribute__((always_inline)) void tile(const float *inputs, const float *weight, float *out,
                                                       long in_features, long out_features, long start, long end,
                                                       const int R, const int C)
{
    __m256 sum[6][4];
    UNROLLED for (int r = 0; r < R; r++)
        UNROLLED for (int c = 0; c < C; c++)
            sum[r][c] = _mm256_setzero_ps();
    for (long k = start; k < end; k++) {
        __m256 w[4];
        UNROLLED for (int c = 0; c < C; c++)
            w[c] = _mm256_loadu_ps(weight + (c * in_features + k) * 8);
        UNROLLED for (int r = 0; r < R; r++) {
            __m256 x = _mm256_broadcast_ss(inputs + r * in_features + k);
            UNROLLED for (int c = 0; c < C; c++)
                sum[r][c] = _mm256_fmadd_ps(x, w[c], sum[r][c]);
        }
    }
    UNROLLED for (int r = 0; r < R; r++)
        UNROLLED for (int c = 0; c < C; c++) {
            float *o = out + r * out_features + c * 8;
            _mm256_storeu_ps(o, start == 0 ? sum[r][c] : _mm256_add_ps(_mm256_loadu_ps(o), sum[r][c]));
        }
}

/* `tile` for each R and C used (at most 6 rows; at most 3 with more than 2 blocks), each its own function. */
typedef void tile_function(const float *, const float *, float *, long, long, long, long);
#define TILE(R, C)                                                                                                 \
    static void tile_##R##_##C(const float *inputs, const float *weight, float *out, long in_features,            \
                               long out_features, long start, long end)                                           \
    {                                                                                                             \
        tile(inputs, weight, out, in_features, out_features, start, end, R, C);                                   \
    }
TILE(1, 1) TILE(1, 2) TILE(1, 3) TILE(1, 4) TILE(2, 1) TILE(2, 2) TILE(2, 3) TILE(2, 4)
TILE(3, 1) TILE(3, 2) TILE(3, 3) TILE(3, 4) TILE(4, 1) TILE(4, 2) TILE(5, 1) TILE(5, 2) TILE(6, 1) TILE(6, 2)
static tile_function *const tiles[7][5] = {
    {0}, {0, tile_1_1, tile_1_2, tile_1_3, tile_1_4}, {0, tile_2_1, tile_2_2, tile_2_3, tile_2_4},
    {0, tile_3_1, tile_3_2, tile_3_3, tile_3_4}, {0, tile_4_1, tile_4_2}, {0, tile_5_1, tile_5_2},
    {0, tile_6_1, tile_6_2},
};

struct slice {
    const float *inputs, *weight, *add;
    float *out;
    long rows, first, last, in_features, out_features, k_block;
};

/* The outputs [first, last) of a slice for every row: up to 3 rows in tiles of all rows by 4 column blocks (a single
   row is bound by reading the weight: four chains in flight), more in tiles of 6 rows by 2 blocks (a block's
   weights reused by 6 rows from the L1 cache). Each input block's sums are added in order, then the addend. */
static void run_slice(const struct slice *s)
{
    long group = s->rows <= 3 ? 32 : 16, tile_rows = s->rows <= 3 ? 3 : 6;
    for (long first = s->first; first < s->last; first += group) {
        long width = s->last - first < group ? s->last - first : group;
        const float *weight = s->weight + first * s->in_features;
        for (long start = 0; start < s->in_features; start += s->k_block) {
            long end = start + s->k_block < s->in_features ? start + s->k_block : s->in_features;
            for (long row = 0; row < s->rows; row += tile_rows) {
                long rows = s->rows - row < tile_rows ? s->rows - row : tile_rows;
                tiles[rows][width / 8](s->inputs + row * s->in_features, weight,
                                       s->out + row * s->out_features + first, s->in_features, s->out_features,
                                       start, end);
            }
        }
        if (s->add)
            for (long row = 0; row < s->rows; row++)
                for (long n = first; n < first + width; n += 8) {
                    float *o = s->out + row * s->out_features + n;
                    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o),
                                                      _mm256_loadu_ps(s->add + row * s->out_features + n)));
                }
    }
}

/* The slices of a product, taken one at a time by each thread running `run_slices` until none is left. */
struct job {
    const struct slice *slices;
    long count, next;
};

static void run_slices(void *argument)
{
    struct job *job = argument;
    for (long t; (t = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED)) < job->count;)
        run_slice(&job->slices[t]);
}

/* The OpenMP runtime's entry to a parallel region (`GOMP_parallel`, what `#pragma omp parallel` compiles to). */
typedef void parallel_region(void (*)(void *), void *, unsigned, unsigned);

/* out = inputs @ weight.T (+ add), the outputs split into `threads` slices of whole groups of 32, run by the threads
   of torch's OpenMP runtime (`parallel`: its `GOMP_parallel`), or by the calling thread alone where `threads` is 1
   or `parallel` NULL. */
void rows_product(const float *inputs, const float *weight, const float *add, float *out, long rows,
                  long out_features, long in_features, long k_block, long threads, parallel_region *parallel)
{
    struct slice slices[64];
    long groups = (out_features + 31) / 32;
    threads = threads < 1 ? 1 : threads > 64 ? 64 : threads > groups ? groups : threads;
    for (long t = 0; t < threads; t++) {
        long first = groups * t / threads * 32, last = groups * (t + 1) / threads * 32;
        struct slice s = {inputs, weight, add, out, rows, first, last < out_features ? last : out_features,
                          in_features, out_features, k_block};
        slices[t] = s;
    }
    struct job job = {slices, threads, 0};
    if (threads > 1 && parallel)
        parallel(run_slices, &job, threads, 0);
    else
        run_slices(&job);
}
"""
    FLAGS = ("-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-shared", "-fPIC")
    # Input blocks tried, beside all inputs at once, for oneDNN's split of the sums.
    K_BLOCKS = (4096, 2048, 1024, 512, 256, 128, 64)
    _building = threading.Lock()

    @classmethod
    @functools.cache
    def function(cls) -> Callable[..., None] | None:
        """The compiled `rows_product`, or None where this machine cannot run or build it."""
        capabilities = torch.cpu.get_capabilities()
        if not (
            sys.platform.startswith("linux")
            and platform.machine() in ("x86_64", "AMD64")
            and capabilities.get("avx2", False)
            and capabilities.get("fma3", False)
        ):
            return None
        compiler = shutil.which(os.environ.get("CC") or "cc")
        if compiler is None:
            return None
        name = hashlib.sha256(json.dumps([cls.SOURCE, cls.FLAGS, compiler]).encode()).hexdigest()[:16]
        directory = os.environ.get("ELMO_HF_CACHE", os.path.join(constants.HF_HOME, "elmo_hf"))
        with cls._building:  # the two directions' threads ask at once on a first call
            if directory:
                library = Path(directory) / f"blocked-rows-{name}.so"
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    if not library.exists():
                        library.parent.mkdir(parents=True, exist_ok=True)
                        cls._build(compiler, library)
                function = cls._load(library)
                if function is not None:
                    return function
            with tempfile.TemporaryDirectory(prefix="elmo-hf-") as folder:  # no cache, or none usable
                library = Path(folder) / "blocked-rows.so"
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    cls._build(compiler, library)
                return cls._load(library)

    @classmethod
    def _build(cls, compiler: str, library: Path) -> None:
        """Compiles `SOURCE` into `library`, atomically: into a temporary file beside it, renamed."""
        temporary = library.with_name(f"{library.name}.{os.getpid()}.tmp")
        try:
            subprocess.run(
                [compiler, *cls.FLAGS, "-x", "c", "-", "-o", str(temporary)],
                input=cls.SOURCE.encode(), capture_output=True, check=True, timeout=120,
            )  # fmt: skip
            os.replace(temporary, library)
        finally:
            temporary.unlink(missing_ok=True)
        remove_orphans(library.parent, "blocked-rows-*.tmp")

    @staticmethod
    def _load(library: Path) -> Callable[..., None] | None:
        """`rows_product` of `library` (it stays mapped if the file goes), or None where it does not load."""
        try:
            function = ctypes.CDLL(str(library)).rows_product
        except OSError:
            return None
        function.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 5 + [ctypes.c_void_p]
        function.restype = None
        return function

    @classmethod
    def product(
        cls, inputs: torch.Tensor, blocked: torch.Tensor, add: torch.Tensor | None, k_block: int
    ) -> torch.Tensor:
        """`inputs @ weight.T + add` for float32 `inputs` `(rows, in_features)` and `add` `(rows, out_features)`, with
        `blocked` the weight's `blocked_weight`, on torch's thread count (each output is computed by one thread, the
        same way on any count); the caller has checked `function()`."""
        inputs = inputs.contiguous()
        rows, out_features, in_features = inputs.shape[0], blocked.shape[0] * 8, blocked.shape[1]
        add = None if add is None else add.expand(rows, out_features).contiguous()
        out = inputs.new_empty(rows, out_features)
        cls.function()(
            inputs.data_ptr(), blocked.data_ptr(), None if add is None else add.data_ptr(), out.data_ptr(),
            rows, out_features, in_features, k_block, torch.get_num_threads(), openmp_parallel_region(),
        )  # fmt: skip
        return out

    @classmethod
    def takes(cls, weight: torch.Tensor) -> bool:
        """Whether the kernel can multiply `weight` here: float32, a multiple of 8 outputs, `function()` built."""
        return weight.dtype == torch.float32 and weight.shape[0] % 8 == 0 and cls.function() is not None

    @classmethod
    def find_k_block(
        cls, blocked: torch.Tensor, inputs: torch.Tensor, adds: tuple[torch.Tensor | None, ...],
        expected_by_count: list[list[torch.Tensor]],
    ) -> int | None:
        """The block of inputs with which `product` gives, for `inputs` and each of `adds`, the bits of each list of
        `expected_by_count` (oneDNN's on one thread count or more), or None where none does (or the kernel is
        unavailable)."""
        if cls.function() is None:
            return None
        in_features = blocked.shape[1]
        for k_block in (in_features, *(size for size in cls.K_BLOCKS if size < in_features)):
            products = [cls.product(inputs, blocked, add, k_block) for add in adds]
            pairs = [(product, result) for results in expected_by_count for product, result in zip(products, results)]
            if all(torch.equal(product, result) for product, result in pairs):
                return k_block
        return None


@functools.cache
def openmp_parallel_region() -> int | None:
    """The address of `GOMP_parallel` in the OpenMP runtime torch's threads belong to (`libgomp`, or Intel's
    `libiomp5`, which provides it too), or None where torch runs without OpenMP or none is loaded.

    `BlockedRows` splits a product over these threads: they are the ones torch's element-wise work between two
    products leaves spinning (waiting for the next parallel region), so the product starts on them at once, where
    threads of its own would share the cores with them (on a 2-vCPU EPYC, 2-6 ms more per product of 4 to 64 rows
    after a sigmoid). The runtime torch was built with is found among the libraries loaded in this process, the one
    in torch's folder first."""
    if not torch._C.has_openmp:
        return None
    with contextlib.suppress(OSError):
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if ".so" in line}
        runtimes = sorted(
            (path for path in paths if Path(path).name.startswith(("libgomp", "libiomp5"))),
            key=lambda path: not path.startswith(str(Path(torch.__file__).parent)),
        )  # fmt: skip
        for path in runtimes:
            with contextlib.suppress(OSError, AttributeError):
                return ctypes.cast(ctypes.CDLL(path).GOMP_parallel, ctypes.c_void_p).value
    return None


def blocked_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` `(out_features, in_features)` in column blocks of 8 for `BlockedRows`: `(out_features / 8,
    in_features, 8)`, the block of outputs `8b..8b+7` holding, for each input, their 8 weights side by side."""
    out_features, in_features = weight.shape
    return weight.detach().reshape(out_features // 8, 8, in_features).transpose(1, 2).contiguous()


class ReorderTimings:
    """Which kernel computes a recurrent product fastest, measured on the CPU at hand, among kernels giving the same
    bits.

    oneDNN reorders a plain weight internally at every product; from a copy reordered once (`ReorderedWeights`),
    products of a few rows are faster (1.2-4x on recurrent weights here), but the copy costs time to make (20-70 ms
    for the original architecture's 32 MiB hidden-to-gate weight, most of it mapping fresh memory) and, at every
    later call, a comparison of the weight with the snapshot it was made from (2-3 ms).

    The result of a recurrent product is always oneDNN's product of two or more rows on the plain weight: a single row
    is computed as two copies of itself, since oneDNN's own single-row kernel gives other bits. The candidates that
    give exactly these bits (with and without a fused addend) are checked and timed on the first product of a kind
    (per weight shape, dtype, thread count and row bucket; a few milliseconds, the buckets of a call together) and
    kept for the process. Timings only choose among identical results, so the model stays deterministic across calls
    and processes whatever they say.
    """

    # How much faster than the reordered weight another kernel must measure to be taken instead.
    SWITCH_MARGIN = 0.1
    # {(out_features, in_features, dtype, threads, bucket): {kernel: seconds}, for the kernels giving the plain
    # weight's bits}
    products: dict[tuple, dict[str, float]] = {}
    # {(out_features, in_features, dtype, threads): seconds to compare the weight with a snapshot; seconds the last
    # reordering of a kept copy took (timed as it is made, for the summary)}
    comparisons: dict[tuple, float] = {}
    reorders: dict[tuple, float] = {}
    # {(out_features, in_features, dtype): [calls with a reordered copy, calls without]}
    decisions: dict[tuple, list[int]] = {}
    # {(out_features, in_features, dtype, threads, bucket): the `k_block` with which `BlockedRows` gives oneDNN's bits}
    k_blocks: dict[tuple, int] = {}
    # Held while measuring: two directions at once, whose weights have the same shapes, measured the same buckets
    # side by side otherwise, each slowing the other's timings.
    _measuring = threading.Lock()

    @classmethod
    def product(cls, weight: torch.Tensor, rows: int, threads: int) -> dict[str, float]:
        """Seconds per product of `rows` rows on `threads` threads of each kernel giving the plain weight's bits,
        measured now if new."""
        cls.measure(weight, [rows], threads)
        return cls.products[cls._key(weight, rows, threads)]

    @classmethod
    def measure(cls, weight: torch.Tensor, row_counts: Iterable[int], threads: int) -> None:
        """Measure now, on `threads` threads, the buckets of `row_counts` not measured yet, all with one reordered copy
        of `weight`: a first call of batch 64 measures seven buckets per weight, and a copy made for each was a fifth
        to a quarter of the measuring time (the original architecture's 32 MiB hidden-to-gate weight takes 10-45 ms
        to reorder)."""
        with cls._measuring:
            keys = {cls._key(weight, rows, threads) for rows in row_counts} - cls.products.keys()
            if not keys:
                return
            with torch_threads(threads):
                reordered = reorder_weight(weight)
                blocked = blocked_weight(weight) if BlockedRows.takes(weight) else None
                for key in sorted(keys, key=lambda key: key[-1]):
                    cls.products[key] = cls._measure(weight, reordered, blocked, key[-1])

    @staticmethod
    def _key(weight: torch.Tensor, rows: int, threads: int) -> tuple:
        return (*weight.shape, weight.dtype, threads, row_bucket(rows))

    @classmethod
    def kernel(cls, weight: torch.Tensor, rows: int, threads: int) -> str:
        """The kernel for products of `rows` rows on `threads` threads once a reordered copy is kept: `REORDERED`,
        unless another identical kernel measured `SWITCH_MARGIN` faster. Timings of kernels this close flip from
        process to process (the original architecture's 512x4096 projection under AVX2 took the plain weight in some
        fresh processes and the reordered one in others, at 16 to 64 rows), and the choice should be the same in
        every process."""
        timings = cls.product(weight, rows, threads)
        fastest = min(timings, key=timings.get)
        if REORDERED in timings and timings[fastest] > (1 - cls.SWITCH_MARGIN) * timings[REORDERED]:
            return REORDERED
        return fastest

    @classmethod
    def k_block(cls, weight: torch.Tensor, rows: int, threads: int) -> int | None:
        """The `k_block` with which `BlockedRows` gives oneDNN's bits for products of `rows` rows on `threads` threads
        (None if it does not)."""
        return cls.k_blocks.get(cls._key(weight, rows, threads))

    @classmethod
    def saving(cls, weight: torch.Tensor, rows: int, threads: int) -> float:
        """Seconds a reordered copy saves on one product of `rows` rows on `threads` threads (0 where no reordered
        kernel is identical)."""
        timings = cls.product(weight, rows, threads)
        reordered = [seconds for kernel, seconds in timings.items() if kernel != PLAIN]
        return max(0.0, timings[PLAIN] - min(reordered)) if reordered else 0.0

    @classmethod
    def comparison_seconds(cls, weight: torch.Tensor, threads: int) -> float:
        """Seconds to compare `weight` with a snapshot on `threads` threads (what using a kept copy costs a call)."""
        key = (*weight.shape, weight.dtype, threads)
        if key not in cls.comparisons:
            snapshot = weight.detach().clone()
            with torch_threads(threads):
                cls.comparisons[key] = min(_seconds(lambda: same_bytes(weight, snapshot)) for _ in range(3))
        return cls.comparisons[key]

    @classmethod
    def _measure(
        cls, weight: torch.Tensor, reordered: torch.Tensor, blocked: torch.Tensor | None, rows: int
    ) -> dict[str, float]:
        """Seconds per product of `rows` rows of each kernel giving the bits of `weight`'s plain product, with
        `reordered` its reordered copy and `blocked` its `blocked_weight` (None where `BlockedRows` does not take
        it)."""
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(rows, weight.shape[1], generator=generator).to(weight.dtype)
        add = torch.randn(rows, weight.shape[0], generator=generator).to(weight.dtype)
        candidates = {
            PLAIN: lambda addend=add: recurrent_product(inputs, weight, addend),
            REORDERED: lambda addend=add: recurrent_product(inputs, reordered, addend),
        }
        if rows == 1:
            candidates[REORDERED_SINGLE_ROW] = lambda addend=add: onednn_linear(inputs, reordered, None, addend)
        expected = [candidates[PLAIN](addend) for addend in (None, add)]
        if blocked is not None:
            threads = torch.get_num_threads()
            expected_by_count = [expected]
            if threads > 1:  # one thread's bits too: steps that `StepThreads` runs with one thread keep the kernel
                with torch_threads(1):
                    expected_by_count.append([recurrent_product(inputs, weight, addend) for addend in (None, add)])
            k_block = BlockedRows.find_k_block(blocked, inputs, (None, add), expected_by_count)
            if k_block is not None:
                cls.k_blocks[cls._key(weight, rows, threads)] = k_block
                candidates[BLOCKED] = lambda addend=add: BlockedRows.product(inputs, blocked, addend, k_block)
        # The blocked loop was checked by `find_k_block` on these inputs, with and without the addend.
        candidates = {
            kernel: run
            for kernel, run in candidates.items()
            if kernel in (PLAIN, BLOCKED)
            or all(torch.equal(run(addend), result) for addend, result in zip((None, add), expected))
        }
        # Repeat small products so that each timing covers about a millisecond.
        repeats = max(1, min(50, math.ceil(1e-3 / max(_seconds(candidates[PLAIN]), 1e-7))))
        seconds = dict.fromkeys(candidates, math.inf)
        for _ in range(3):  # interleaved rounds, the best of each: robust to a busy machine
            for kernel, run in candidates.items():
                seconds[kernel] = min(seconds[kernel], _seconds(run, repeats))
        return seconds

    @classmethod
    def summary(cls) -> list[str]:
        """What was measured and decided, one line per weight shape and thread count, for benchmark reports."""
        lines = []
        for shape in sorted({key[:4] for key in cls.products}, key=str):
            out, inp, dtype, threads = shape
            reordered, plain = cls.decisions.get((out, inp, dtype), [0, 0])
            costs = [
                f"{what} {seconds[shape] * 1e3:.1f} ms, "
                for what, seconds in (("reordering took", cls.reorders), ("checking a kept copy", cls.comparisons))
                if shape in seconds
            ]
            products = [
                f"rows <= {key[-1]}: "
                + ", ".join(f"{kernel} {timing * 1e6:.0f} us" for kernel, timing in timings.items())
                for key, timings in sorted(cls.products.items(), key=lambda item: item[0][-1])
                if key[:4] == shape
            ]
            lines.append(
                f"{out}x{inp} {str(dtype).removeprefix('torch.')}, {threads} threads: {''.join(costs)}reordered copy "
                f"used in {reordered} of {reordered + plain} calls; " + "; ".join(products)
            )
        return lines


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's thread count for the calling thread set to `count` within the block, restored after."""
    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _seconds(run: Callable[[], object], repeats: int = 1) -> float:
    """Seconds per call of `run`, over `repeats` calls."""
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats


class ReorderedWeights:
    """Recurrent weights copied into the layouts of faster kernels (oneDNN's blocked layout, `ONEDNN_LAYOUT`, and the
    column blocks of `BlockedRows`, `BLOCKED_LAYOUT`), kept across calls, beside a snapshot of the weight they
    were made from.

    A kept copy is used only after the weight's bytes are found equal to its snapshot (`same_bytes`, at every cell's
    call that uses it), so it never serves stale values, whatever changed the weight: optimizer steps (fused ones
    included), `.data` edits, `load_state_dict`, `.to()`, swapped tensors. Copies are keyed by the `nn.Linear` holding
    the weight, weakly, so they go with their model; they are made on first use where `RecurrentLinear` finds they
    pay, or ahead of use by `build`, and freed by `clear`. Memory: the weights kept, once for the snapshot and once
    per layout in use; for the hidden-to-gate and projection weights of all four cells, 160 MiB each for the original
    architecture and 10 MiB for small, in float32 (`memory_bytes`): 320 MiB where one layout is used (the timings
    take the column blocks for every row count of batch 1 with one thread per direction), 480 where both are.
    """

    _kept: "weakref.WeakKeyDictionary[nn.Module, tuple[torch.Tensor, dict[str, torch.Tensor]]]" = (
        weakref.WeakKeyDictionary()
    )

    @classmethod
    def get(cls, linear: nn.Module) -> torch.Tensor:
        """`linear.weight` in oneDNN's layout: the kept copy if the weight still equals its snapshot, else a new
        copy."""
        return cls.copies(linear, [ONEDNN_LAYOUT])[ONEDNN_LAYOUT]

    @classmethod
    def copies(cls, linear: nn.Module, layouts: Iterable[str]) -> dict[str, torch.Tensor]:
        """`linear.weight` in each of `layouts`, the weight compared with its snapshot once: the kept copies if it
        still equals it, new ones otherwise (kept in their place, the stale ones dropped)."""
        layouts = list(layouts)
        if not layouts:
            return {}
        kept = cls._kept.get(linear)
        if kept is None or not same_bytes(linear.weight, kept[0]):
            kept = (linear.weight.detach().clone(), {})
            cls._kept[linear] = kept
        for layout in layouts:
            if layout not in kept[1]:
                start = time.perf_counter()
                if layout == ONEDNN_LAYOUT:
                    kept[1][layout] = reorder_weight(linear.weight)
                    key = (*linear.weight.shape, linear.weight.dtype, torch.get_num_threads())
                    ReorderTimings.reorders[key] = time.perf_counter() - start
                else:
                    kept[1][layout] = blocked_weight(linear.weight)
        return {layout: kept[1][layout] for layout in layouts}

    @classmethod
    def build(cls, model: nn.Module) -> None:
        """Reorder the recurrent weights of every LSTM cell of `model` into oneDNN's layout now (the hidden-to-gate
        and projection weights), so that the first call does not pay for it."""
        with torch.no_grad():
            for linear in recurrent_linears(model):
                cls.get(linear)

    @classmethod
    def clear(cls, model: nn.Module | None = None) -> None:
        """Free the kept copies of `model`'s weights (of every model when `None`)."""
        for linear in list(cls._kept) if model is None else recurrent_linears(model):
            cls._kept.pop(linear, None)

    @classmethod
    def memory_bytes(cls, model: nn.Module | None = None) -> int:
        """Bytes held by the kept copies and their snapshots (a copy counted as large as its weight), of `model`'s
        weights (of every model when `None`)."""
        linears = recurrent_linears(model) if model is not None else list(cls._kept)
        kept = [cls._kept[linear] for linear in linears if linear in cls._kept]
        return sum((1 + len(copies)) * snapshot.nbytes for snapshot, copies in kept)


def recurrent_linears(model: nn.Module) -> list[nn.Module]:
    """The layers whose weights the recurrence multiplies at every step: each LSTM cell's `hidden_to_gates` and
    `projection`."""
    return [
        getattr(module, name)
        for module in model.modules()
        if hasattr(module, "hidden_to_gates") and hasattr(module, "projection")
        for name in ("hidden_to_gates", "projection")
    ]


def reorder_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` copied into oneDNN's blocked layout for its matrix product (an opaque oneDNN tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


def onednn_linear(
    inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, add: torch.Tensor | None
) -> torch.Tensor:
    """`inputs @ weight.T + bias + add` by oneDNN, bias and addend fused into the product; `weight` plain or
    reordered."""
    inputs = inputs.contiguous()
    if add is not None:
        return torch.ops.mkldnn._linear_pointwise.binary(inputs, add.contiguous(), weight, bias, "add")
    return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")


def recurrent_product(inputs: torch.Tensor, weight: torch.Tensor, add: torch.Tensor | None) -> torch.Tensor:
    """`inputs @ weight.T + add` as oneDNN computes it for two rows or more: a single row is computed as two copies
    of itself (oneDNN's single-row kernel gives other bits), so every kernel choice gives the same result."""
    if inputs.shape[0] != 1:
        return onednn_linear(inputs, weight, None, add)
    return onednn_linear(inputs.expand(2, -1), weight, None, None if add is None else add.expand(2, -1))[:1]


class CpuLinear:
    """The products of one weight within one call, by oneDNN: `(rows, in_features)` -> `(rows, out_features)`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        self.weight, self.bias = weight, bias

    def __call__(self, inputs: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
        return onednn_linear(inputs, self.weight, self.bias, add)


class RecurrentLinear:
    """The products of a recurrent layer's weight (no bias) over one call of `lstm_with_projection`, whose steps
    make products of `row_counts` rows: `(rows, in_features)` -> `(rows, out_features)`, plus the step's addend.

    Takes the copies of `ReorderedWeights` when the timings say the steps of this call save more than checking them
    costs (a copy made now pays off over the calls that follow): for each row count and each thread count the steps
    may run with (`StepThreads.counts`), the reordered weight unless a kernel giving the same bits measured clearly
    faster on that many threads (`ReorderTimings.kernel`), chosen once per call, with the copy that kernel reads.
    Every count is measured here, before the steps: measured where a step first ran with it (a try of one thread,
    a layer's two directions at once), the measuring fell inside that try's timing and that call (at batch 64, 1.2-1.7
    s of the original architecture's weights on one thread, on a 2-vCPU EPYC Zen 3, where the call took 3.5 s).
    """

    def __init__(self, linear: nn.Module, row_counts: list[int]):
        weight = self.weight = linear.weight
        products, counts = Counter(row_counts), StepThreads.counts()
        for threads in counts:
            ReorderTimings.measure(weight, products, threads)
        most = counts[0]
        saved = sum(count * ReorderTimings.saving(weight, rows, most) for rows, count in products.items())
        pays = saved > ReorderTimings.comparison_seconds(weight, most)
        ReorderTimings.decisions.setdefault((*weight.shape, weight.dtype), [0, 0])[not pays] += 1
        chosen = {
            (rows, threads): ReorderTimings.kernel(weight, rows, threads) if pays else PLAIN
            for rows in products
            for threads in counts
        }
        copies = ReorderedWeights.copies(linear, {KERNEL_LAYOUTS[kernel] for kernel in chosen.values()} - {None})
        # {(rows, threads): (kernel, the weight or copy it reads, the `k_block` of `BlockedRows`)}
        self.kernels: dict[tuple[int, int], tuple[str, torch.Tensor, int | None]] = {
            (rows, threads): (
                kernel, copies.get(KERNEL_LAYOUTS[kernel], weight), ReorderTimings.k_block(weight, rows, threads)
            )
            for (rows, threads), kernel in chosen.items()
        }  # fmt: skip

    def __call__(self, inputs: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
        kernel, weight, k_block = self.kernels[inputs.shape[0], torch.get_num_threads()]
        if kernel == REORDERED_SINGLE_ROW:
            return onednn_linear(inputs, weight, None, add)
        if kernel == BLOCKED:
            return BlockedRows.product(inputs, weight, add, k_block)
        return recurrent_product(inputs, weight, add)


class StepThreads:
    """Runs each step of a loop (a time step of a recurrence, a chunk of words) with one thread or with torch's thread
    count, whichever lately ran the recurrence's time steps faster, and only where both counts give the same bits.

    On a machine whose cores other processes use too, a product split over two threads waits for the thread the
    scheduler has put aside: on a 2-vCPU EPYC running two other CPU-bound processes, the original architecture ran 13
    words/s at batch 1 with two threads against 45 with one (156 against 305 at batch 64), while on the idle machine
    two threads are faster. So every so often a few time steps run with the other count (untimed while they pay for
    the count before it: waking threads, or threads still spinning after a product), and the faster count is kept;
    while the count in use stays faster the tries grow rarer (every 8, 16, ... up to 1024 time steps), so they cost
    under 1% once settled. Where the run queue says that no core is free for a second thread (`cores_free`: other
    CPU-bound processes hold them), a try of two threads is put off by an interval without running a step: with
    two threads each product would wait for a core, and the tries alone cost a busy process a fifth of its speed. A
    process starts from one thread where the machine already looks busy (`first_count`). The other steps (a chunk of
    words, a block of input-to-gate products) take the same count.

    A count changes the speed only: a kind of step runs with one thread only after one of its steps, run with both
    counts on a state that is not all zeros (where every product is exact), gave the same bits (checked once per
    kind of step, `step_kind`: its name and weight shapes, per row count, dtype and thread count, and kept for later
    processes by `KnownThreadBits`). Where they differ (a product that splits its sums over threads), that kind of
    step keeps torch's count, as without this class. torch's count is restored when the `with` block (or the
    outermost `scope`) ends.

    The choice and the timings are kept per process, so that later calls go on from what earlier ones found.
    """

    # Steps timed per try, and of the count in use to compare with: means, since on a busy machine several threads
    # are fast while all of them have a core and very slow while one waits for it (the best times would hide that).
    FIRST_TRY, LONGEST_INTERVAL, TRIAL_STEPS, RECENT_STEPS = 8, 1024, 4, 8
    # How much faster a try's steps must run to switch counts. The steps of a bucket of row counts lose rows as
    # sentences end, so a try's steps, coming after the recent ones, have fewer rows: with 5%, one fresh process in
    # eight at batch 64 on an idle 2-vCPU EPYC Zen 3 took one thread for a while (its 2-thread steps slowed by the
    # host meanwhile: 12.6 ms against 11.3 with one thread, where one thread runs them at half the speed). A busy
    # machine, where one thread is the faster, makes two threads several times slower.
    SWITCH_MARGIN = 0.15
    # How long the threads of a multi-threaded product may spin after it, waiting for more work, before they sleep
    # (OpenMP's default of 300,000 spins measured about 15 ms on a busy 2-vCPU EPYC), slowing a single thread then.
    SPIN_SECONDS = 0.02
    # When the last step with several threads ended (perf_counter seconds).
    parallel_until = -math.inf
    # {threads: [count in use, steps between tries, steps until the next try]}: one choice for every kind of
    # step, since a product with two threads slows what follows it too (its second thread spins a while, waiting for
    # more work, on a core that others need), which timing each kind apart would not see.
    choices: dict[int, list[int]] = {}
    # {(name, dtype, bucket, threads): (seconds of the last steps with the count in use, and of the steps of a try of
    # the other count)}
    timings: dict[tuple, tuple[list[float], list[float]]] = {}
    # {(name, dtype, rows, threads): whether one thread gives the same bits}
    same_bits: dict[tuple, bool] = {}

    # torch's thread count when the calling thread's outermost `scope` began (None outside one), and whether the
    # thread runs one of two directions at once (`one_of_two`).
    _scoped = threading.local()
    # Held while a kind of step is checked for same bits.
    _checking = threading.Lock()

    def __init__(self):
        self.current = torch.get_num_threads()
        self.most = self.torch_count()
        self.at_once = getattr(self._scoped, "at_once", False)

    @classmethod
    def torch_count(cls) -> int:
        """torch's thread count for the calling thread: the one its outermost `scope` (or `one_of_two`) began with,
        where the steps may have left another."""
        return getattr(cls._scoped, "most", None) or torch.get_num_threads()

    def __enter__(self) -> "StepThreads":
        return self

    def __exit__(self, *exc_info) -> None:
        if getattr(self._scoped, "most", None) is None:
            torch.set_num_threads(self.most)

    @classmethod
    @contextlib.contextmanager
    def scope(cls) -> Iterator[None]:
        """Within the block (a model's forward), the count the last step ran with stays for the work between steps
        (copies, concatenations, masks: no sums) instead of torch's count coming back after every loop: on a busy
        machine, each return to two threads waits for the second one to be scheduled. torch's count is restored at
        the end of the outermost block."""
        if getattr(cls._scoped, "most", None) is not None:
            yield
            return
        cls._scoped.most = torch.get_num_threads()
        try:
            yield
        finally:
            torch.set_num_threads(cls._scoped.most)
            cls._scoped.most = None

    @classmethod
    def counts(cls) -> tuple[int, ...]:
        """The thread counts the calling thread's steps may run with: torch's count (`torch_count`), then one where
        that is more."""
        most = cls.torch_count()
        return (most, 1) if most > 1 else (most,)

    @classmethod
    def resume_torch_count(cls) -> None:
        """torch's count (`torch_count`) from here until a step sets another: before a sum that is not a step (a
        reference's, or a product over all of a recurrence's steps) within a `scope`, so that its bits do not depend
        on the count the steps before it left."""
        if torch.get_num_threads() != cls.torch_count():
            torch.set_num_threads(cls.torch_count())

    @classmethod
    @contextlib.contextmanager
    def one_of_two(cls, most: int) -> Iterator[None]:
        """Within the block, the calling thread runs one of two directions at once (`DirectionsAtOnce`): each step
        with one thread, where a check (as for any step) found that one thread gives the bits of torch's count `most`,
        and with `most` threads otherwise; no timing, no tries. The thread's count and scope are restored after."""
        saved = (getattr(cls._scoped, "most", None), getattr(cls._scoped, "at_once", False), torch.get_num_threads())
        cls._scoped.most, cls._scoped.at_once = most, True
        torch.set_num_threads(1)
        try:
            yield
        finally:
            cls._scoped.most, cls._scoped.at_once = saved[:2]
            torch.set_num_threads(saved[2])

    def run(
        self, name: str, rows: int, step: Callable[..., object], *args, state: torch.Tensor, decides: bool = True
    ) -> object:
        """`step(*args)`, a step `name` of `rows` rows whose recurrent state (or input) is `state`, with the thread
        count chosen for it. Steps that `decides` (a recurrence's time steps: many, alike) are timed and tried with
        the other count; the others (once per call) take the count they chose."""
        if self.most == 1:
            return step(*args)
        if self.at_once:  # one of two directions at once: one thread each, where the bits allow
            trying, threads, decides = False, 1, False
        else:
            if self.most not in self.choices:
                self.choices[self.most] = [first_count(self.most), self.FIRST_TRY, self.FIRST_TRY]
            choice = self.choices[self.most]
            recent, trial = self.timings.setdefault((name, state.dtype, row_bucket(rows), self.most), ([], []))
            trying = decides and choice[2] <= 0 and len(recent) >= self.TRIAL_STEPS
            if trying and choice[0] == 1 and not trial and not second_core_free():
                # No core for a second thread now: trying two would only wait for one. Ask again an interval later.
                choice[2], trying = choice[1], False
            threads = (1 if choice[0] > 1 else self.most) if trying else choice[0]
        if threads == 1:
            bits_key = (name, state.dtype, rows, self.most)
            verified = self._known_bits(bits_key)
            if verified is None and bool(state.any()):
                with self._checking:  # two directions at once check a kind once, the second waiting for the first
                    if self._known_bits(bits_key) is None:
                        # One thread first, so that what the step writes in place is, in the end, torch's count's
                        # result.
                        single = self._with(1, step, args)
                        result = self._with(self.most, step, args)
                        self.same_bits[bits_key] = same_results(result, single)
                        KnownThreadBits.put(bits_key, self.same_bits[bits_key])
                        return result
                verified = self._known_bits(bits_key)
            if not verified:
                return self._with(self.most, step, args)
        if not decides:
            return self._with(threads, step, args)
        switched = threads != self.current
        start = time.perf_counter()
        result = self._with(threads, step, args)
        seconds = time.perf_counter() - start
        # A step tells its count's speed unless it pays for the count before it: the wake-up of the threads of a
        # count just switched to, or other threads still spinning on cores this one needs.
        settled = not switched if threads > 1 else start - StepThreads.parallel_until > self.SPIN_SECONDS
        if not trying:
            choice[2] -= 1
            if settled:
                recent[:] = [*recent[1 - self.RECENT_STEPS :], seconds]
            return result
        if settled:
            trial.append(seconds)
        # At least, not exactly: threads sharing a kind of step append to one trial, and two appends before either
        # thread compares would skip the count, leaving every later step a try.
        if len(trial) >= self.TRIAL_STEPS:
            keep_the_faster(
                choice, threads, recent, trial, self.FIRST_TRY, self.LONGEST_INTERVAL, self.SWITCH_MARGIN
            )
        return result

    def run_rows(self, name: str, step: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        """`step(rows)`, a step `name` that maps each row of `rows` `(count, ...)` to the same row of its result on its
        own (a block of input-to-gate products, a chunk of words), run once per call with the count the time steps
        chose. It runs on `rows` padded with zero rows to a multiple of `ROW_MULTIPLE`, and the padding's results are
        dropped: a kind of step is checked for same bits once per row count it runs on, and on a busy machine the
        check's run with torch's count waits for cores, so a fresh process of short sentences checked a count for
        almost every sentence; padded, one in `ROW_MULTIPLE` (for at most `ROW_MULTIPLE - 1` rows more)."""
        count = rows.shape[0]
        if count % ROW_MULTIPLE:
            rows = torch.cat([rows, rows.new_zeros(-count % ROW_MULTIPLE, *rows.shape[1:])])
        return self.run(name, rows.shape[0], step, rows, state=rows, decides=False)[:count]

    @classmethod
    def _known_bits(cls, key: tuple) -> bool | None:
        """Whether one thread gives torch's count's bits for this kind of step, as checked in this process or an
        earlier one (`KnownThreadBits`); None where no check was made."""
        verified = cls.same_bits.get(key)
        if verified is None:
            verified = KnownThreadBits.get(key)
            if verified is not None:
                cls.same_bits[key] = verified
        return verified

    def _with(self, threads: int, step: Callable[..., object], args: tuple) -> object:
        if threads != self.current:
            torch.set_num_threads(threads)
            self.current = threads
        result = step(*args)
        if threads > 1:
            StepThreads.parallel_until = time.perf_counter()
        return result


def keep_the_faster(
    choice: list, tried: object, recent: list[float], trial: list[float], first_try: int, longest_interval: int,
    margin: float,
) -> None:
    """After a try (`StepThreads`, `DirectionsAtOnce`): `choice` `[way in use, interval between tries, countdown to the
    next]` takes the `tried` way where its `trial` times averaged `margin` (a share) under the `recent` ones of the
    way in use, and tries again soon (`first_try`); otherwise the interval doubles, up to `longest_interval`. Both
    lists start anew."""
    if recent and statistics.fmean(trial) < (1 - margin) * statistics.fmean(recent):
        choice[0], choice[1] = tried, first_try
    else:
        choice[1] = min(2 * choice[1], longest_interval)
    choice[2] = choice[1]
    recent.clear()
    trial.clear()


class DirectionsAtOnce:
    """`reference_elmo.directions_in_turn` (same arguments and results) on a CPU: a biLSTM layer's two directions at
    once, the backward one in a worker thread, each with one torch thread (`StepThreads.one_of_two`), or in turn (each
    step with the count `StepThreads` picks), whichever lately ran this kind of layer faster per time step.

    The directions share nothing until the layer ends, so at once they need no barrier, where two threads splitting
    each product wait for each other at every product and, on a busy machine, for the one the scheduler put aside.
    Forwards of the original architecture on a 2-vCPU EPYC Zen 4 (float32, median ms): with two other CPU-bound
    processes, batch 1 435 at once, 561 in turn, 548 with one thread; batch 64 (sentences of one length) 3119, 4482,
    4669. Idle, at batch 1 a layer ran 108 ms at once and 95 in turn: its steps read 40 MiB of weights each, and
    memory, not arithmetic, bounds them; so do the steps of few rows that end a batch of sentences of many lengths
    (ten fresh processes at batch 64 ran 756-803 words/s at once, 795-826 in turn). Hence: a kind of layer starts at
    once where the machine looks busy (`first_count`), in turn otherwise; every so often (`FIRST_TRY` layer calls,
    doubling up to `LONGEST_INTERVAL` while the choice holds) `TRIAL_CALLS` calls run the other way, kept if 5%
    faster per step. The first call of a kind is not timed (it measures the kernels and builds reordered weights).

    The bits are those of torch's count either way: one thread runs a kind of step only where `StepThreads` found it
    gives the same bits. With one torch thread there is no second one to run a direction in: in turn.
    """

    FIRST_TRY, LONGEST_INTERVAL, TRIAL_CALLS, RECENT_CALLS = 4, 64, 2, 4
    # How much faster a try's calls must run per step to switch ways (idle, the two ways differ by about that much).
    SWITCH_MARGIN = 0.05
    # {(kind, bucket, threads): [at once, calls between tries, calls until the next try]}
    choices: dict[tuple, list] = {}
    # {(kind, bucket, threads): (seconds per step of the last calls of the choice, and of a try's calls)}
    timings: dict[tuple, tuple[list[float], list[float]]] = {}
    _lock = threading.Lock()
    _worker: tuple[int, ThreadPoolExecutor] | None = None

    @classmethod
    def run(
        cls, cells: tuple[Direction, Direction], inputs: tuple[torch.Tensor, torch.Tensor], batch: SequenceBatch,
        initial_states: tuple[LstmState, LstmState],
    ) -> tuple[tuple[torch.Tensor, LstmState], tuple[torch.Tensor, LstmState]]:
        most = StepThreads.torch_count()
        if most == 1:
            return directions_in_turn(cells, inputs, batch, initial_states)
        kind = step_kind("layer", [parameter for parameter in cells[0].parameters() if parameter.dim() == 2])
        key = (kind, row_bucket(batch.batch_sizes[0] if batch.batch_sizes else 1), most)
        with cls._lock:  # threads sharing a model share the choice
            first = key not in cls.choices
            if first:
                cls.choices[key], cls.timings[key] = [first_count(most) == 1, cls.FIRST_TRY, cls.FIRST_TRY], ([], [])
            choice = cls.choices[key]
            trying = not first and choice[2] <= 0 and len(cls.timings[key][0]) >= cls.TRIAL_CALLS
            at_once = choice[0] != trying
        start = time.perf_counter()
        if at_once:
            result = cls._at_once(cells, inputs, batch, initial_states, most)
        else:
            result = directions_in_turn(cells, inputs, batch, initial_states)
        if not first:
            cls._record(key, at_once, trying, (time.perf_counter() - start) / max(len(batch.batch_sizes), 1))
        return result

    @classmethod
    def _record(cls, key: tuple, at_once: bool, trying: bool, per_step: float) -> None:
        """Keeps a call's seconds per step; after a try's calls, keeps the faster way."""
        with cls._lock:
            choice, (recent, trial) = cls.choices[key], cls.timings[key]
            if not trying:
                choice[2] -= 1
                recent[:] = [*recent[1 - cls.RECENT_CALLS :], per_step]
                return
            trial.append(per_step)
            if len(trial) == cls.TRIAL_CALLS:
                keep_the_faster(
                    choice, at_once, recent, trial, cls.FIRST_TRY, cls.LONGEST_INTERVAL, cls.SWITCH_MARGIN
                )

    @classmethod
    def _at_once(
        cls, cells: tuple[Direction, Direction], inputs: tuple[torch.Tensor, torch.Tensor], batch: SequenceBatch,
        initial_states: tuple[LstmState, LstmState], most: int,
    ) -> tuple[tuple[torch.Tensor, LstmState], tuple[torch.Tensor, LstmState]]:
        """The backward direction in the worker thread, the forward one here; the worker takes this thread's autograd
        and inference modes (thread-local in torch)."""
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

        def backward() -> tuple[torch.Tensor, LstmState]:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad), StepThreads.one_of_two(most):
                return cells[1](inputs[1], batch, initial_states[1])

        future = cls._executor().submit(backward)
        try:
            with StepThreads.one_of_two(most):
                forward = cells[0](inputs[0], batch, initial_states[0])
        finally:
            futures.wait([future])  # the worker is done with the inputs before anything returns or raises
        return forward, future.result()

    @classmethod
    def _executor(cls) -> ThreadPoolExecutor:
        """This process's worker thread (a forked child makes its own: the parent's thread is not in it)."""
        with cls._lock:
            if cls._worker is None or cls._worker[0] != os.getpid():
                cls._worker = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="elmo-hf-direction"))
            return cls._worker[1]


def directions_at_once(
    cells: tuple[Direction, Direction], inputs: tuple[torch.Tensor, torch.Tensor], batch: SequenceBatch,
    initial_states: tuple[LstmState, LstmState],
) -> tuple[tuple[torch.Tensor, LstmState], tuple[torch.Tensor, LstmState]]:
    """`reference_elmo.directions_in_turn` by `DirectionsAtOnce`."""
    return DirectionsAtOnce.run(cells, inputs, batch, initial_states)


def supports_directions_at_once(request: KernelRequest) -> bool:
    """`supports`, on a machine where this process may run on two cores or more."""
    return supports(request) and available_cores() >= 2


class KnownThreadBits:
    """The checks of `StepThreads` (whether a kind of step gives the same bits with one thread as with torch's count),
    kept in a file across processes, so that a fresh process does not run them again.

    On a busy machine each check costs a step with torch's count that waits for cores (about 80 ms for the original
    architecture's token layer on a 2-vCPU EPYC running two other CPU-bound processes): a fresh process of 24
    sentences at batch 1 ran 10 of them, about 15% of its time. The answer depends only on the products' shapes, the
    thread counts and the kernels oneDNN picks, so the file is named after what picks them (`machine_fingerprint`:
    torch's build, the CPU model and its flags, oneDNN's ISA and math-mode variables): another torch, CPU, ISA limit
    or math mode reads another file. The file is `$ELMO_HF_CACHE/thread-bits-<fingerprint>.json`, by default under
    `HF_HOME` (`~/.cache/huggingface/elmo_hf`); `ELMO_HF_CACHE=""` keeps the checks in the process only. It is written
    atomically (a new file renamed over the old one, merged with what other processes wrote; a temporary file a killed
    process left is removed by a later write); a file that cannot be read or written is ignored, and the checks run
    as without it.
    """

    # {key as text: same bits}, read from the file at the first question of the process (None until then).
    _known: dict[str, bool] | None = None

    @staticmethod
    def path() -> Path | None:
        """The file for this machine, or None where `ELMO_HF_CACHE` is set empty."""
        directory = os.environ.get("ELMO_HF_CACHE", os.path.join(constants.HF_HOME, "elmo_hf"))
        return Path(directory) / f"thread-bits-{machine_fingerprint()}.json" if directory else None

    @classmethod
    def get(cls, key: tuple) -> bool | None:
        """What an earlier check found for `key` (`(name, dtype, rows, threads)`), in this process or another; None
        where none was made."""
        if cls._known is None:
            cls._known = cls._read()
        return cls._known.get(_key_text(key))

    @classmethod
    def put(cls, key: tuple, same: bool) -> None:
        """Record a check, for this process and the file."""
        if cls._known is None:
            cls._known = cls._read()
        cls._known[_key_text(key)] = same
        path = cls.path()
        if path is None:
            return
        known = {**cls._read(), _key_text(key): same}
        temporary = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", dir=path.parent, prefix="thread-bits-", suffix=".tmp", delete=False
            ) as file:
                temporary = file.name
                json.dump(known, file, indent=0, sort_keys=True)
            os.replace(temporary, path)
            remove_orphans(path.parent, "thread-bits-*.tmp")
        except OSError:  # a read-only or full disk: the check stays in this process
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)

    @classmethod
    def _read(cls) -> dict[str, bool]:
        path = cls.path()
        try:
            known = json.loads(path.read_text()) if path is not None else {}
        except (OSError, ValueError):  # missing or damaged: as if empty (the next `put` writes it anew)
            return {}
        if not isinstance(known, dict):
            return {}
        return {key: value for key, value in known.items() if isinstance(value, bool)}


def remove_orphans(directory: Path, pattern: str) -> None:
    """Removes the temporary files `pattern` of `directory` older than `ORPHAN_SECONDS`: left by a process killed
    between writing one and renaming it (a write takes milliseconds, a build of `BlockedRows` under a second)."""
    now = time.time()
    for temporary in directory.glob(pattern):
        with contextlib.suppress(OSError):
            if now - temporary.stat().st_mtime > ORPHAN_SECONDS:
                temporary.unlink()


def _key_text(key: tuple) -> str:
    return "|".join(map(str, key))


@functools.cache
def machine_fingerprint() -> str:
    """A short hash of what decides which oneDNN kernels compute a product here, so which bits each thread count
    gives: torch's version and build, the CPU's model and vector flags, and oneDNN's variables that limit or hint the
    instruction set or set its default floating-point math mode."""
    model = platform.processor()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    facts = {
        "torch": [torch.__version__, torch.version.git_version],
        "cpu": [platform.machine(), model, sorted(torch.cpu.get_capabilities().items())],
        "environment": {
            name: os.environ.get(name)
            for prefix in ("ONEDNN", "DNNL")
            for name in (f"{prefix}_MAX_CPU_ISA", f"{prefix}_CPU_ISA_HINTS", f"{prefix}_DEFAULT_FPMATH_MODE")
        },
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def step_kind(name: str, weights: list[torch.Tensor]) -> str:
    """The name under which `StepThreads` checks and times a kind of step: `name` with the shapes of the weights its
    products multiply, since the bits and speed of a thread count depend on them (two models in one process, or two
    cells of other sizes, are other kinds). E.g. `"step (16384x512, 512x4096)"`."""
    return f"{name} ({', '.join('x'.join(map(str, weight.shape)) for weight in weights)})"


def first_count(most: int) -> int:
    """The thread count a process starts from, before any timing: one where the machine already looks busy (a load
    average of at least the number of cores this process may run on, or no core free for a second thread now,
    `second_core_free`), `most` otherwise. Timing corrects it either way; it spares a process on a busy machine its
    first steps with threads that wait for a core."""
    if not second_core_free():
        return 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this system
        return most
    return 1 if load >= available_cores() else most


def second_core_free() -> bool:
    """Whether the run queue leaves a core for a second thread (`cores_free`; true where it cannot tell)."""
    free = cores_free()
    return free is None or free >= 2


def cores_free() -> int | None:
    """The cores that no other process's thread is running or waiting to run on right now: the machine's cores less
    the runnable threads of the run queue (Linux's `/proc/loadavg`) that are not this process's
    (`own_runnable_threads`: the caller, and a worker of a product just finished still spinning, are no load from
    others; counted as such, they made a fresh process on an idle 2-vCPU EPYC take the machine for busy). None where
    it cannot tell: no such file, or this process may run on only some of the cores (the count is the whole
    machine's)."""
    cores = os.cpu_count()
    if cores is None or available_cores() != cores:
        return None
    try:
        with open("/proc/loadavg") as loadavg:
            runnable = int(loadavg.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None
    return cores - max(runnable - own_runnable_threads(), 0)


def own_runnable_threads(tasks: Path = Path("/proc/self/task")) -> int:
    """This process's threads that are running or waiting to run (state `R` in Linux's `/proc/self/task/*/stat`), at
    least one: the caller. One where the system does not tell."""
    runnable = 0
    try:
        for task in tasks.iterdir():
            try:
                # "tid (name) state ...": the name may hold spaces and parentheses, the state follows the last ")".
                runnable += (task / "stat").read_text().rsplit(")", 1)[1].split()[0] == "R"
            except (OSError, IndexError):  # a thread that ended meanwhile
                continue
    except OSError:
        return 1
    return max(runnable, 1)


def available_cores() -> int:
    """The cores this process may run on (its affinity where the system has one, else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def same_results(result: object, other: object) -> bool:
    """Whether two step results (tensors, or tuples of them) hold the same bytes."""
    if isinstance(result, torch.Tensor):
        return same_bytes(result, other)
    return all(same_results(item, other_item) for item, other_item in zip(result, other, strict=True))


def encode_words(word_ids: torch.Tensor, layers: TokenLayers, chunk_size: int | None) -> torch.Tensor:
    """`reference_elmo.token_layer` (same arguments and result): `(num_words, row_width)` ids -> `(num_words,
    projection_dim)`, computed from the leaf layers.

    Each convolution is one matrix product over the windows of all words of a chunk (faster on CPU than the direct
    convolution), leaving out the windows inside the words' final runs of one repeated id, which equal each word's
    last window (`window_products_max`). Words are taken in chunks of similar run starts (short words together, so
    few windows are kept), each chunk running with the thread count `StepThreads` finds faster.
    """
    products = TokenLayerProducts(layers)
    starts = repeat_starts(word_ids[:, : layers.max_characters])
    if chunk_size is None:
        return products.encode(word_ids, distinct_windows(starts))
    weights = [product.weight for _, product in products.convolutions]
    weights += [product.weight for pair in products.highway for product in pair] + [products.projection.weight]
    order = starts.argsort(stable=True)
    with StepThreads() as threads:
        chunks = []
        for chunk in order.split(chunk_size):
            distinct = distinct_windows(starts[chunk])
            # The products' shapes depend on the windows kept: another kind of step for the thread checks.
            name = step_kind(f"token layer of {layers.max_characters} characters, {distinct} windows", weights)
            encode = functools.partial(products.encode, distinct=distinct)
            chunks.append(threads.run_rows(name, encode, word_ids[chunk]))
    return torch.cat(chunks)[order.argsort()]


def repeat_starts(char_ids: torch.Tensor) -> torch.Tensor:
    """`(num_words, max_characters)` character ids -> `(num_words,)` where each word's final run of its last id
    begins: one past its last character that differs from the last one (0 for a row of one repeated id)."""
    positions = torch.arange(1, char_ids.shape[1] + 1, device=char_ids.device)
    return ((char_ids != char_ids[:, -1:]) * positions).amax(dim=1)


def distinct_windows(starts: torch.Tensor) -> int:
    """The windows from which on every window of these words lies inside its word's final run: the largest of their
    `repeat_starts`, rounded up to a multiple of `WINDOW_MULTIPLE` (fewer kinds of step to check and time)."""
    largest = int(starts.max()) if starts.numel() else 0
    return -(-largest // WINDOW_MULTIPLE) * WINDOW_MULTIPLE


def window_products_max(
    embedded: torch.Tensor, width: int, product: Layer, distinct: int | None = None
) -> torch.Tensor:
    """A character convolution of `width` and its max over windows, as one matrix product over the windows:
    `(num_words, max_characters, char_embedding_dim)` -> `(num_words, num_filters)`.

    Window `k` holds characters `k .. k + width - 1`, flattened as the `Conv1d` weight `(num_filters,
    char_embedding_dim, width)` is, so `product` (the flattened weight and the bias) maps `(rows, char_embedding_dim *
    width)` to `(rows, num_filters)`. Where `distinct` is given, every window from `distinct` on lies inside its word's
    final run of one repeated id (`distinct_windows`) and so equals the word's last window: only windows `[:distinct]`
    and the last are multiplied, and the max is the same. The CPU token layer (`TokenLayerProducts`) and the GPU one
    without TF32 (`gpu_kernels.char_cnn_as_products`, every window) both compute it here."""
    windows = embedded.unfold(1, width, 1)  # (num_words, max_characters - width + 1, char_embedding_dim, width)
    if distinct is not None and distinct < windows.shape[1] - 1:
        windows = torch.cat([windows[:, :distinct], windows[:, -1:]], dim=1)
    num_words, kept, dim = windows.shape[:3]
    products = product(windows.reshape(-1, dim * width))  # (num_words * kept, num_filters), also for no words
    return products.view(num_words, kept, products.shape[-1]).amax(dim=1)


class TokenLayerProducts:
    """The token layer's products by oneDNN, from the leaf layers of `layers`: `encode` maps `(num_words, row_width)`
    ids to `(num_words, projection_dim)` vectors."""

    def __init__(self, layers: TokenLayers):
        self.layers = layers
        self.convolutions = [
            (conv.kernel_size[0], CpuLinear(conv.weight.reshape(conv.out_channels, -1), conv.bias))
            for conv in layers.convolutions
        ]
        self.highway = [
            (CpuLinear(gate.weight, gate.bias), CpuLinear(transform.weight, transform.bias))
            for transform, gate in layers.highway_layers
        ]
        self.projection = CpuLinear(layers.projection.weight, layers.projection.bias)

    def encode(self, word_ids: torch.Tensor, distinct: int) -> torch.Tensor:
        """`(num_words, row_width)` ids -> `(num_words, projection_dim)`, where from window `distinct` on every
        window lies inside its word's final run of one repeated id (`distinct_windows`)."""
        layers = self.layers
        embedded = layers.char_embeddings(word_ids[:, : layers.max_characters])
        pooled = [window_products_max(embedded, width, product, distinct) for width, product in self.convolutions]
        features = layers.activation(torch.cat(pooled, dim=-1))
        for gate_product, transform_product in self.highway:
            gate = torch.sigmoid(gate_product(features))
            features = gate * torch.relu(transform_product(features)) + (1 - gate) * features
        return self.projection(with_word_embeddings(features, word_ids, layers.word_embeddings, layers.max_characters))


def lstm_with_projection(
    inputs: torch.Tensor, batch: SequenceBatch, initial_state: LstmState, linears: LstmLinears,
    cell_clip: float | None, projection_clip: float | None,
) -> tuple[torch.Tensor, LstmState]:
    """`reference_elmo.lstm_recurrence` (same arguments and results) over a packed batch.

    The input-to-gate products are made ahead of the steps, bias included, once per distinct row where many rows
    repeat and otherwise in blocks (`GateInputs`); the recurrent products use reordered weights where that pays
    (`RecurrentLinear`). A first step whose rows all hold the same input and state (`alike_first_rows`) is computed
    for one row and copied.
    """
    batch_sizes = batch.batch_sizes
    # Rows of the first step that repeat its last row (it alone is computed); none after it.
    repeated = alike_first_rows(inputs, initial_state, batch_sizes[0]) if batch_sizes else 0
    computed_rows = [size - repeated * (step == 0) for step, size in enumerate(batch_sizes)]
    hidden_to_gates = RecurrentLinear(linears.hidden_to_gates, computed_rows)
    projection = RecurrentLinear(linears.projection, computed_rows)
    state, finished = initial_state, FinishedRows()
    outputs = inputs.new_empty(inputs.shape[0], linears.projection.weight.shape[0])
    position = 0
    step_name = step_kind("step", [linears.hidden_to_gates.weight, linears.projection.weight])
    with StepThreads() as threads:
        gate_inputs = GateInputs(
            inputs, batch_sizes, CpuLinear(linears.input_to_gates.weight, linears.hidden_to_gates.bias), threads
        )
        for step, active in enumerate(batch_sizes):
            step_gate_inputs = gate_inputs.rows(step, position, repeated)
            state = finished.running(state, active)
            state = threads.run(
                step_name, active - repeated, lstm_step, step_gate_inputs, tuple(t[repeated:] for t in state),
                hidden_to_gates, projection, cell_clip, projection_clip, state=state[0][repeated:],
            )  # fmt: skip
            if repeated:
                state, repeated = tuple(t.expand(active, -1).contiguous() for t in state), 0
            outputs[position : position + active] = state[0]
            position += active
    return outputs, finished.final(state)


def alike_first_rows(inputs: torch.Tensor, state: LstmState, rows: int) -> int:
    """How many of a packed batch's first `rows` rows (its first step) repeat the last of them, byte for byte in the
    inputs and in both state tensors: `rows - 1` or 0. Every row of a stateless call's first step is alike (zero
    state; the same boundary token, or what the layer below made of it), and a row's products do not depend on the
    rows beside it (`ReorderTimings`), so computing the last row alone gives every row's bits."""
    if rows < 2:
        return 0
    last = rows - 1
    alike = all(same_bytes(t[:last], t[last:rows].expand(last, *t.shape[1:])) for t in (inputs, *state))
    return last if alike else 0


class GateInputs:
    """The input-to-gate products of a packed batch's steps (bias included), each made before the first step that
    reads it, with the thread count `threads` chose.

    Rows that repeat byte for byte are multiplied once: the token vectors repeat wherever a word does (every `<S>`
    and `</S>` too: half or more of the positions of 64 English sentences), and a row's product does not depend on
    the rows beside it (`ReorderTimings`), so a step gathering its rows from the products of the distinct rows gets
    the bits of multiplying them all. The steps are taken in spans of up to `DISTINCT_SPAN_BYTES` of products; a span
    where fewer than `REPEATED_SHARE` of the rows repeat (a biLSTM layer's outputs) is multiplied in blocks of about
    `GATE_INPUT_BLOCK_ROWS` rows, the steps reading views of them.
    """

    def __init__(self, inputs: torch.Tensor, batch_sizes: list[int], product: CpuLinear, threads: StepThreads):
        self.inputs, self.batch_sizes, self.product, self.threads = inputs, batch_sizes, product, threads
        self.name = step_kind("input to gates", [product.weight])
        self.span_rows = DISTINCT_SPAN_BYTES // (product.weight.shape[0] * inputs.element_size())
        self.start = self.end = 0  # the products made hold the rows [start, end) of `inputs`
        self.products: torch.Tensor | None = None
        self.places: torch.Tensor | None = None  # each row's place among `products`, if they are of distinct rows
        self.blocks_until = 0  # rows before this lie in a span of few repeats: blocks

    def rows(self, step: int, position: int, skip: int) -> torch.Tensor:
        """The products of step `step`'s rows (`batch_sizes[step]`, from `position` of the packed inputs) less its
        first `skip`: `(rows - skip, 4 * lstm_dim)`."""
        if position == self.end:
            self._make(step, position, position + skip)
        start, stop = position + skip - self.start, position + self.batch_sizes[step] - self.start
        if self.places is None:
            return self.products[start:stop]
        return self.products.index_select(0, self.places[start:stop])

    def _make(self, step: int, position: int, start: int) -> None:
        """The products of the rows from `start` to the end of a span (or block) of whole steps from `step`."""
        if start >= self.blocks_until:
            end = self._steps_end(step, position, start, self.span_rows)
            found = distinct_rows(self.inputs[start:end])
            if found is not None:
                first, self.places = found
                self.products = self.threads.run_rows(self.name, self.product, self.inputs[start + first])
                self.start, self.end = start, end
                return
            self.blocks_until = end
        end = self._steps_end(step, position, start, GATE_INPUT_BLOCK_ROWS)
        self.products = self.threads.run_rows(self.name, self.product, self.inputs[start:end])
        self.places, self.start, self.end = None, start, end

    def _steps_end(self, step: int, position: int, start: int, most: int) -> int:
        """Where step `step` (at `position`) and the steps after it that fit in `most` rows from `start` end."""
        end = position + self.batch_sizes[step]
        for size in self.batch_sizes[step + 1 :]:
            if end + size - start > most:
                break
            end += size
        return end


def distinct_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Rows that repeat byte for byte: `(count, features)` -> where one row of each distinct value is `(distinct,)`
    and each row's value among them `(count,)`; None where fewer than `REPEATED_SHARE` of the rows repeat another (or
    there are none). Rows are keyed by their first 8 bytes (`group_rows`), which tell token vectors apart."""
    count = rows.shape[0]
    first, places = group_rows(rows, key_bytes=8)
    if not count or count - first.shape[0] < REPEATED_SHARE * count:
        return None
    return first, places


def lstm_step(
    gate_inputs: torch.Tensor,
    state: LstmState,
    hidden_to_gates: RecurrentLinear,
    projection: RecurrentLinear,
    cell_clip: float | None,
    projection_clip: float | None,
) -> LstmState:
    """`reference_elmo.lstm_step`: `(rows, 4 * lstm_dim)` input-to-gate products (bias included) and the state
    `(h, c)`, `(rows, projection_dim)` and `(rows, lstm_dim)` -> the new state."""
    hidden, memory = state
    memory, unprojected = lstm_cell_update(hidden_to_gates(hidden, add=gate_inputs), memory, cell_clip)
    hidden = projection(unprojected)
    if projection_clip is not None:
        hidden = hidden.clamp(-projection_clip, projection_clip)
    return hidden, memory


def lstm_cell_update(
    gates: torch.Tensor, cell: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The element-wise part of one LSTM step, with the input and forget gates' sigmoids in one call.

    Args:
        gates: `(rows, 4 * lstm_dim)` gate pre-activations, in the order i, f, g, o.
        cell: `(rows, lstm_dim)` cell state.
        cell_clip: clip bound of the new cell state, `None` for no clipping.

    Returns:
        The new cell state and the output before projection, `output_gate * tanh(cell)`, both `(rows, lstm_dim)`.
    """
    lstm_dim = cell.shape[1]
    input_and_forget = torch.sigmoid(gates[:, : 2 * lstm_dim])
    candidate = torch.tanh(gates[:, 2 * lstm_dim : 3 * lstm_dim])
    output_gate = torch.sigmoid(gates[:, 3 * lstm_dim :])
    cell = torch.addcmul(input_and_forget[:, lstm_dim:] * cell, input_and_forget[:, :lstm_dim], candidate)
    if cell_clip is not None:
        cell = cell.clamp(-cell_clip, cell_clip)
    return cell, output_gate * torch.tanh(cell)


__all__ = [
    "CpuLinear",
    "DirectionsAtOnce",
    "KnownThreadBits",
    "RecurrentLinear",
    "ReorderTimings",
    "ReorderedWeights",
    "VectorMath",
    "bfloat16_supported",
    "directions_at_once",
    "encode_words",
    "lstm_with_projection",
    "supports",
    "supports_directions_at_once",
]
