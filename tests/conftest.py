"""Shared fixtures: offline environment, a tiny config, and the converted fixture checkpoints."""

import atexit
import collections
import errno
import itertools
import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The CPU kernels' record of thread checks (`cpu_kernels.KnownThreadBits`) goes to a directory of this run, not the
# user's cache, for the tests and the commands they start.
if "ELMO_HF_CACHE" not in os.environ:
    os.environ["ELMO_HF_CACHE"] = tempfile.mkdtemp(prefix="elmo-hf-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ELMO_HF_CACHE"], ignore_errors=True)

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from elmo_hf.conversion.convert import convert_checkpoint  # noqa: E402
from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer  # noqa: E402
from elmo_hf.gpu_kernels import RecurrenceGraphs  # noqa: E402
from elmo_hf.reference_elmo import LstmLinears, SequenceBatch  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_SETS = ("allennlp", "bilm-tf")
# A batch with empty rows, repeated words, a one-word sentence and non-ASCII text.
MIXED_SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    [],
    ["the"],
    ["Dogs", "bark", "the", "the", "cat", "Dogs"],
    ["Über", "naïve", "café", "😀"],
    [],
]


# Rows of `random_batch`: a row without tokens passes its state through.
LENGTHS = [6, 6, 5, 4, 4, 3, 0, 1]
# `elmo-hf pretrain`'s architecture options for a tiny model, and a text to train it on (the `corpus` fixture).
TINY_PRETRAINING = ["--lstm-dim", "8", "--projection-dim", "4", "--filters", "1:4,2:4", "--num-highway-layers", "1"]
PRETRAINING_TEXT = "the cat sat on the mat\na dog barked at the cat\nthe mat was red\na cat and a dog\n" * 6


def random_linears(dtype: torch.dtype) -> LstmLinears:
    """Linear maps of one LSTM direction (5 inputs, 7 cells, 5 projections) of odd sizes, with weights large enough
    that both clips (0.6, 0.4) cut some values and leave others."""
    torch.manual_seed(0)
    linears = LstmLinears(nn.Linear(5, 28, bias=False), nn.Linear(5, 28), nn.Linear(7, 5, bias=False))
    for linear in linears:
        nn.init.normal_(linear.weight, std=0.7)
        linear.to(dtype)
    return linears


def random_batch(
    dtype: torch.dtype, packed: bool, with_state: bool, lengths: list[int] = LENGTHS, final_steps: bool = True
):
    """Inputs of one direction (rows of `lengths` tokens) in the layout, the layout and an initial state (random, or
    zeros)."""
    generator = torch.Generator().manual_seed(1)
    batch = SequenceBatch(torch.tensor(lengths), max(lengths), packed, final_steps)
    tokens = torch.randn(len(lengths), max(lengths), 5, generator=generator, dtype=torch.float64)
    tokens = tokens * (torch.arange(max(lengths)) < torch.tensor(lengths).unsqueeze(1)).unsqueeze(-1)
    state = [torch.randn(1, len(lengths), dim, generator=generator, dtype=torch.float64) for dim in (5, 7)]
    if not with_state:
        state = [torch.zeros_like(tensor) for tensor in state]
    state = tuple(batch.sorted_rows(tensor)[0].to(dtype) for tensor in state)
    return batch.directions(tokens.to(dtype))[0], batch, state


def tiny_config(**overrides) -> ElmoConfig:
    """A small architecture that builds in milliseconds (same shape as the fixture checkpoints)."""
    fields = dict(
        char_embedding_dim=4,
        filters=[[1, 4], [2, 8], [3, 16]],
        num_highway_layers=1,
        projection_dim=8,
        lstm_dim=16,
        num_layers=2,
    )
    fields.update(overrides)
    return ElmoConfig(**fields)


def encode(tokenizer: ElmoTokenizer, sentences: list[list[str]], **kwargs) -> dict[str, torch.Tensor]:
    """Pre-split sentences as a padded batch of tensors."""
    return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt", **kwargs)


@pytest.fixture
def one_thread():
    """Tiny products with one thread: OpenMP's spin-waiting dominates them on a busy 2-core machine. torch's count is
    restored after the test."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def corpus(tmp_path) -> Path:
    """A small training text (`PRETRAINING_TEXT`) for `elmo-hf pretrain` runs of a `TINY_PRETRAINING` model."""
    path = tmp_path / "train.txt"
    path.write_text(PRETRAINING_TEXT, encoding="utf-8")
    return path


@pytest.fixture
def tiny_model() -> ElmoModel:
    torch.manual_seed(0)
    return ElmoModel(tiny_config()).eval()


@pytest.fixture(scope="session")
def tokenizer() -> ElmoTokenizer:
    return ElmoTokenizer()


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> Path:
    """A small random biLM (`tiny_config`) saved as an ELMo folder, with the UTF-8 byte tokenizer."""
    path = tmp_path_factory.mktemp("tiny-elmo")
    torch.manual_seed(0)
    ElmoModel(tiny_config()).save_pretrained(path)
    ElmoTokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def converted(tmp_path_factory) -> dict[str, Path]:
    """Both fixture checkpoints converted once with conversion/convert.py."""
    root = tmp_path_factory.mktemp("converted")
    return {
        name: convert_checkpoint(FIXTURES / name / "options.json", FIXTURES / name / "lm_weights.hdf5", root / name)
        for name in FIXTURE_SETS
    }


def fixture_sentences(name: str) -> list[list[list[str]]]:
    """sentences.json: 3 lists of 10 whitespace-tokenized sentences."""
    lists = json.loads((FIXTURES / name / "sentences.json").read_text())
    return [[sentence.split() for sentence in sentences] for sentences in lists]


def expected_top_layer(name: str, row: int, batch: int) -> np.ndarray:
    """The original's top layer for sentence `batch` of list `row`, `(words, 2 * projection_dim)`."""
    with h5py.File(FIXTURES / name / f"lm_embeddings_{row}.hdf5", "r") as file:
        forward, backward = file[str(batch)][...]
    return np.concatenate([forward, backward], axis=-1)


class EagerGraphs:
    """`gpu_kernels.CudaGraphs` on a CPU (CI has no CUDA): "capturing" runs the body once, as the capture's warm-up
    does, and "replaying" runs it again; `captures` lists each capture's pool. A pool lives as torch's does: from its
    first capture until the last graph captured into it is freed; a capture into a pool freed so fails, as torch's
    allocator does (`INTERNAL ASSERT FAILED ... use_count > 0`)."""

    captures: list[tuple] = []
    graphs_alive: collections.Counter = collections.Counter()
    made = itertools.count()

    @classmethod
    def capture(cls, body, device, pool):
        if pool in cls.captures and cls.graphs_alive[pool] == 0:
            raise RuntimeError(f"it->second->use_count > 0 INTERNAL ASSERT FAILED: {pool} was freed with its graphs")
        cls.captures.append(pool)
        cls.graphs_alive[pool] += 1
        body()
        replay = Replay(body)
        weakref.finalize(replay, cls.graphs_alive.subtract, [pool])
        return replay

    @classmethod
    def pool(cls, device):
        return ("pool", device, next(cls.made))

    @staticmethod
    def after(event, device):
        return object()

    @staticmethod
    def end(event, device):
        pass


class Replay:
    """A stand-in graph: calling it runs the captured body again."""

    def __init__(self, body):
        self.body = body

    def __call__(self):
        self.body()


@pytest.fixture(autouse=True)
def graphs_on_cpu(monkeypatch):
    """The graphed recurrence's graphs stood in by eager runs, and none kept from one test to the next."""
    monkeypatch.setattr(RecurrenceGraphs, "device_graphs", EagerGraphs)
    EagerGraphs.captures.clear()
    EagerGraphs.graphs_alive.clear()
    yield
    RecurrenceGraphs.clear()


@pytest.fixture
def read_only_folder(tmp_path, monkeypatch) -> Path:
    """An empty folder in which nothing can be created, as the kernel refuses it to a user without write access (the
    tests may run as root, whom permission bits do not stop)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    mkdir = os.mkdir

    def refusing_mkdir(path, *args, **kwargs):
        if Path(path).parent == folder:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", refusing_mkdir)
    return folder


@pytest.fixture(scope="module")
def batch(tokenizer):
    """Two sentences of 3 and 1 words, padded."""
    return tokenizer(["Ann lives here", "Hi"], padding=True, return_tensors="pt")
