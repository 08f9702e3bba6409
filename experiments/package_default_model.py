"""Ship a pretrained biLM with the package:
`python experiments/package_default_model.py RUN_DIR [--name elmo-en-mini]`.

Writes the pretraining folder RUN_DIR's model (the biLM and its word softmax, so that `elmo-hf perplexity` reproduces
the card's numbers), its `vocab.txt` and the default tokenizer into `elmo_hf/models/NAME`, the folder
`ElmoModel.from_pretrained(NAME)` loads, and records the biLM's outputs for a fixed sentence in
`tests/fixtures/NAME-outputs.npy`, which the tests compare against. The package's own code is not copied into the
folder: it is loaded from the installed package.

The weights are stored as bfloat16 (`--storage float32` keeps them as trained) and load as float32: the configuration
says float32, and loading casts them. Packaging stops unless the float32 outputs of the stored weights are within
1e-2 (relative to each layer's largest value) of the trained weights', and the file is at most 20 MiB.
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from safetensors.torch import load_file, save_file  # noqa: E402

from elmo_hf import ElmoForPreTraining, ElmoModel, ElmoTokenizer  # noqa: E402
from elmo_hf.corpus.data import VOCABULARY_FILE  # noqa: E402
from elmo_hf.packaged_elmo import PACKAGED_MODELS_DIR  # noqa: E402

# The sentence whose outputs the tests pin (cased text, punctuation, a rare word, a number).
FIXED_SENTENCE = "The whale , Ishmael said , surfaced near Nantucket in 1851 ."
MAX_SAFETENSORS_BYTES = 20 * 1024 * 1024
# Largest difference of a layer's float32 outputs from the stored weights to the trained ones, over its largest value.
MAX_STORAGE_DIFFERENCE = 1e-2
STORAGE_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def fixed_sentence_outputs(model: ElmoModel, tokenizer: ElmoTokenizer) -> np.ndarray:
    """All layers of the biLM for FIXED_SENTENCE, `(num_layers + 1, words, 2 * projection_dim)`, float32."""
    batch = tokenizer(FIXED_SENTENCE, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch, output_hidden_states=True)
    return torch.stack(output.hidden_states)[:, 0].numpy()


def store_weights(folder: Path, dtype: torch.dtype) -> None:
    """Rewrite `folder`'s safetensors weights in `dtype`; `config.json` keeps float32, so they load as float32."""
    weights_file = folder / "model.safetensors"
    weights = load_file(weights_file)
    save_file({key: value.to(dtype) for key, value in weights.items()}, weights_file, metadata={"format": "pt"})


def storage_difference(stored: np.ndarray, trained: np.ndarray) -> float:
    """The largest relative difference of a layer: max |stored - trained| / max |trained|, over the layers."""
    return max(float(np.abs(s - t).max() / np.abs(t).max()) for s, t in zip(stored, trained))


def package(run_dir: Path, name: str, storage: str = "bfloat16") -> Path:
    """Write the packaged folder atomically (a temporary folder renamed into place) and the recorded outputs."""
    model = ElmoForPreTraining.from_pretrained(run_dir).eval()
    tokenizer = ElmoTokenizer()
    trained = fixed_sentence_outputs(model.elmo, tokenizer)
    target = PACKAGED_MODELS_DIR / name
    PACKAGED_MODELS_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=PACKAGED_MODELS_DIR) as scratch:
        folder = Path(scratch) / name
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        shutil.copy(run_dir / VOCABULARY_FILE, folder / VOCABULARY_FILE)
        store_weights(folder, STORAGE_DTYPES[storage])
        for code_file in folder.glob("*.py"):
            code_file.unlink()
        for data_file in folder.iterdir():
            data_file.chmod(0o644)
        size = (folder / "model.safetensors").stat().st_size
        if size > MAX_SAFETENSORS_BYTES:
            raise SystemExit(f"model.safetensors is {size / 2**20:.1f} MiB, over the 20 MiB the package allows")
        stored = fixed_sentence_outputs(ElmoModel.from_pretrained(folder).eval(), tokenizer)
        difference = storage_difference(stored, trained)
        if difference > MAX_STORAGE_DIFFERENCE:
            raise SystemExit(f"{storage} weights change the outputs by {difference:.2e} (relative), over 1e-2")
        if (target / "README.md").exists():  # the model card is written by hand and kept
            shutil.copy(target / "README.md", folder / "README.md")
        if target.exists():
            shutil.rmtree(target)
        folder.rename(target)
    outputs = fixed_sentence_outputs(ElmoModel.from_pretrained(name).eval(), ElmoTokenizer.from_pretrained(name))
    np.save(ROOT / "tests" / "fixtures" / f"{name}-outputs.npy", outputs)
    print(
        f"{run_dir} -> {target} ({size / 2**20:.1f} MiB, {storage}; outputs within {difference:.1e} of the trained "
        f"weights'); outputs {tuple(outputs.shape)} recorded"
    )
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a pretraining folder (elmo-hf pretrain --output)")
    parser.add_argument("--name", default="elmo-en-mini", help="the packaged model's name")
    parser.add_argument(
        "--storage", default="bfloat16", choices=sorted(STORAGE_DTYPES), help="dtype of the stored weights"
    )
    args = parser.parse_args()
    package(args.run_dir, args.name, args.storage)


if __name__ == "__main__":
    main()
