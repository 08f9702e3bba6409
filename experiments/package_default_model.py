"""Ship a pretrained biLM with the package: `python experiments/package_default_model.py RUN_DIR [--name elmo-en-mini]`.

Writes the biLM of the pretraining folder RUN_DIR (without its word softmax, which only pretraining and perplexity
need) and the default tokenizer into `elmo_hf/models/NAME`, the folder `ElmoModel.from_pretrained(NAME)` loads, and
records the model's outputs for a fixed sentence in `tests/fixtures/NAME-outputs.npy`, which the tests compare
against. The package's own code is not copied into the folder: it is loaded from the installed package.
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

from elmo_hf import ElmoForPreTraining, ElmoModel, ElmoTokenizer  # noqa: E402
from elmo_hf.packaged_elmo import PACKAGED_MODELS_DIR  # noqa: E402

# The sentence whose outputs the tests pin (cased text, punctuation, a rare word, a number).
FIXED_SENTENCE = "The whale , Ishmael said , surfaced near Nantucket in 1851 ."
MAX_SAFETENSORS_BYTES = 20 * 1024 * 1024


def fixed_sentence_outputs(model: ElmoModel, tokenizer: ElmoTokenizer) -> np.ndarray:
    """All layers of the biLM for FIXED_SENTENCE, `(num_layers + 1, words, 2 * projection_dim)`, float32."""
    batch = tokenizer(FIXED_SENTENCE, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch, output_hidden_states=True)
    return torch.stack(output.hidden_states)[:, 0].numpy()


def package(run_dir: Path, name: str) -> Path:
    """Write the packaged folder atomically (a temporary folder renamed into place) and the recorded outputs."""
    model = ElmoForPreTraining.from_pretrained(run_dir).elmo.eval()
    tokenizer = ElmoTokenizer()
    target = PACKAGED_MODELS_DIR / name
    PACKAGED_MODELS_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=PACKAGED_MODELS_DIR) as scratch:
        folder = Path(scratch) / name
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        for code_file in folder.glob("*.py"):
            code_file.unlink()
        for data_file in folder.iterdir():
            data_file.chmod(0o644)
        size = (folder / "model.safetensors").stat().st_size
        if size > MAX_SAFETENSORS_BYTES:
            raise SystemExit(f"model.safetensors is {size / 2**20:.1f} MiB, over the 20 MiB the package allows")
        if (target / "README.md").exists():  # the model card is written by hand and kept
            shutil.copy(target / "README.md", folder / "README.md")
        if target.exists():
            shutil.rmtree(target)
        folder.rename(target)
    outputs = fixed_sentence_outputs(ElmoModel.from_pretrained(name).eval(), ElmoTokenizer.from_pretrained(name))
    np.save(ROOT / "tests" / "fixtures" / f"{name}-outputs.npy", outputs)
    print(f"{run_dir} -> {target} ({size / 2**20:.1f} MiB); outputs {tuple(outputs.shape)} recorded")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a pretraining folder (elmo-hf pretrain --output)")
    parser.add_argument("--name", default="elmo-en-mini", help="the packaged model's name")
    args = parser.parse_args()
    package(args.run_dir, args.name)


if __name__ == "__main__":
    main()
