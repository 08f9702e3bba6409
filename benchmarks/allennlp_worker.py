"""AllenNLP 2.10.1's `Elmo`, run for `bench_inference.py --allennlp PYTHON` by an interpreter that has AllenNLP.

    PYTHON benchmarks/allennlp_worker.py speed OPTIONS WEIGHTS CORPUS.json --batch-size 64 --threads 2 --repeats 3
    PYTHON benchmarks/allennlp_worker.py layers OPTIONS WEIGHTS SENTENCES.json OUT.npz
    PYTHON benchmarks/allennlp_worker.py fixture tests/fixtures/allennlp

- speed: words/s of `Elmo(options, weights, num_output_representations=1, dropout=0.0)` in eval mode under
  `torch.no_grad()` over a corpus (a JSON list of sentences, each a list of words), fed in corpus order in batches;
  `batch_to_ids` is done beforehand (not timed), the first two batches are a warm-up, the corpus is timed `--repeats`
  times. AllenNLP's biLM is stateful (each row starts from the state the same row ended the previous batch with), as
  its users run it. Prints one JSON line.
- layers: the three layers (token layer twice, then each LSTM layer; sentence boundaries removed, as elmo-hf's
  `hidden_states`) of each sentence run alone from zero states, into an `.npz` (`s{sentence}l{layer}`).
- fixture: runs a fixture folder's original checkpoint (`options.json`, `lm_weights.hdf5`) the way its expected
  top-layer outputs (`lm_embeddings_{k}.hdf5`) were made (stateful; batch i holds sentence i of each list, see
  tests/fixtures/README.md) and prints the largest absolute difference from them as JSON: this proves the AllenNLP
  installation computes the original. AllenNLP runs only checkpoints with skip connections (tests/fixtures/allennlp).

This script imports no elmo-hf. AllenNLP imports, at module level, packages that the `Elmo` path never calls
(transformers, spacy, fairscale, torchvision, huggingface_hub, cached_path); where one is not installed a shim
stands in for it (`install_shims`): any class of it raises when built, and `cached_path.cached_path` returns an
existing local file (the only use on the `Elmo` path). benchmarks/README.md gives the installation.
"""

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import resource
import sys
import time
import types
from pathlib import Path

import h5py
import numpy as np
import torch

SHIMMED = ("transformers", "spacy", "fairscale", "torchvision", "huggingface_hub", "cached_path")


class _Absent:
    """Stands for a class of a shimmed package; building one means the `Elmo` path needed the package after all."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__qualname__}: its package is shimmed by {Path(__file__).name}; install it")


class _ShimModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (_Absent,), {"__qualname__": f"{self.__name__}.{name}"})
        setattr(self, name, value)
        return value


def _local_file(url_or_filename, **_options) -> str:
    """`cached_path.cached_path` for local files only: the benchmark never downloads."""
    if not Path(url_or_filename).is_file():
        raise FileNotFoundError(f"{url_or_filename}: not a local file (the cached_path shim reads local files only)")
    return str(url_or_filename)


class _ShimFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, packages: set[str]):
        self.packages = packages

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] not in self.packages:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _ShimModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []
        if module.__name__ == "cached_path":
            module.cached_path = _local_file


def install_shims() -> list[str]:
    """Shims for the packages of `SHIMMED` that are not installed; returns their names."""
    missing = [name for name in SHIMMED if importlib.util.find_spec(name) is None]
    sys.meta_path.append(_ShimFinder(set(missing)))
    return missing


def load_elmo(options: str, weights: str, threads: int | None = None):
    """AllenNLP's `Elmo` in eval mode, one output representation, no dropout; `batch_to_ids`."""
    install_shims()
    from allennlp.modules.elmo import Elmo, batch_to_ids

    if threads:
        torch.set_num_threads(threads)
    return Elmo(options, weights, num_output_representations=1, dropout=0.0).eval(), batch_to_ids


def layers_alone(elmo, batch_to_ids, sentences: list[list[str]]) -> list[list[np.ndarray]]:
    """Per sentence, run alone from zero states: its three layers, (words, 2 * projection) each, boundaries removed."""
    bilm = elmo._elmo_lstm
    result = []
    with torch.no_grad():
        for sentence in sentences:
            bilm._elmo_lstm.reset_states()
            activations = bilm(batch_to_ids([sentence]))["activations"]
            result.append([layer[0, 1:-1].numpy() for layer in activations])
    bilm._elmo_lstm.reset_states()
    return result


def speed(args) -> dict:
    elmo, batch_to_ids = load_elmo(args.options, args.weights, args.threads)
    sentences = json.loads(Path(args.corpus).read_text(encoding="utf-8"))
    batches = [sentences[start : start + args.batch_size] for start in range(0, len(sentences), args.batch_size)]
    encoded = [batch_to_ids(batch) for batch in batches]
    words = sum(len(sentence) for sentence in sentences)
    seconds = []
    with torch.no_grad():
        for ids in encoded[:2]:
            elmo(ids)
        for _ in range(args.repeats):
            start = time.perf_counter()
            for ids in encoded:
                elmo(ids)
            seconds.append(time.perf_counter() - start)
    median = sorted(seconds)[len(seconds) // 2]
    return dict(
        words=words,
        sentences=len(sentences),
        tokens_per_s=words / median,
        sentences_per_s=len(sentences) / median,
        runs=[round(words / s, 1) for s in seconds],
        peak_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        threads=torch.get_num_threads(),
    )


def fixture(args) -> dict:
    folder = Path(args.folder)
    if not json.loads((folder / "options.json").read_text(encoding="utf-8"))["lstm"].get("use_skip_connections"):
        raise SystemExit(f"error: {folder}: AllenNLP's Elmo runs only checkpoints with skip connections")
    elmo, batch_to_ids = load_elmo(str(folder / "options.json"), str(folder / "lm_weights.hdf5"))
    lists = json.loads((folder / "sentences.json").read_text(encoding="utf-8"))
    expected = []
    for index in range(len(lists)):
        with h5py.File(folder / f"lm_embeddings_{index}.hdf5", "r") as file:
            expected.append([np.concatenate(list(file[str(row)][...]), axis=-1) for row in range(len(lists[index]))])
    largest, close = 0.0, True
    bilm = elmo._elmo_lstm
    with torch.no_grad():
        for row in range(len(lists[0])):
            batch = [sentences[row].split() for sentences in lists]
            top = bilm(batch_to_ids(batch))["activations"][-1]
            for index, sentence in enumerate(batch):
                actual = top[index, 1 : len(sentence) + 1].numpy()
                largest = max(largest, float(np.abs(actual - expected[index][row]).max()))
                close = close and bool(np.allclose(actual, expected[index][row], atol=1e-6, rtol=1e-5))
    return dict(folder=str(folder), max_abs_diff=largest, allclose=close, sentences=sum(map(len, lists)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    timed = commands.add_parser("speed", help="words/s over a corpus")
    timed.add_argument("options")
    timed.add_argument("weights")
    timed.add_argument("corpus", help="JSON list of sentences, each a list of words")
    timed.add_argument("--batch-size", type=int, required=True)
    timed.add_argument("--threads", type=int, required=True)
    timed.add_argument("--repeats", type=int, default=3)
    layers = commands.add_parser("layers", help="the layers of sentences each run alone, into an .npz")
    layers.add_argument("options")
    layers.add_argument("weights")
    layers.add_argument("sentences", help="JSON list of sentences, each a list of words")
    layers.add_argument("output")
    original = commands.add_parser("fixture", help="a fixture folder's checkpoint against its expected outputs")
    original.add_argument("folder")
    args = parser.parse_args()
    if args.command == "speed":
        print(json.dumps(speed(args)))
    elif args.command == "layers":
        elmo, batch_to_ids = load_elmo(args.options, args.weights)
        sentences = json.loads(Path(args.sentences).read_text(encoding="utf-8"))
        arrays = layers_alone(elmo, batch_to_ids, sentences)
        np.savez(args.output, **{f"s{s}l{l}": array for s, layer_list in enumerate(arrays)
                                  for l, array in enumerate(layer_list)})
    else:
        print(json.dumps(fixture(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
