# Copyright 2026 The elmo-hf Authors.
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
"""Convert an original ELMo checkpoint (bilm-tf / AllenNLP `options.json` + weights `.hdf5`) to a Hugging Face folder.

    elmo-hf convert --options options.json --weights weights.hdf5 --output elmo-small
    elmo-hf convert ... --model-card small --push-to-hub NAMESPACE/elmo-small [--private]
        [--revision BRANCH | --create-pr] [--token TOKEN]

The folder holds `config.json`, `model.safetensors` (float32), the tokenizer files and the model code, so that it
loads with `AutoModel.from_pretrained(folder)` after `import elmo_hf`, or with `trust_remote_code=True` without it.
Every dataset is checked against the options before anything is written, the converted model is checked against an
independent NumPy implementation of the original computation, and the folder appears only when all of that succeeded.
Its README.md is the released checkpoint's card from `model_cards/` (`--model-card`) or a generic one. With
`--push-to-hub` the finished folder is then uploaded in one commit. The original checkpoint's dataset names and
layouts live in this file only.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from string import Template

import numpy as np
import torch
from huggingface_hub import CommitInfo, HfApi, get_token
from huggingface_hub.constants import DEFAULT_REVISION
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id
from transformers.utils.logging import disable_progress_bar

from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer
from elmo_hf.cli import run_subcommand
from elmo_hf.tokenization_elmo import BEGIN_SENTENCE_TOKEN, END_SENTENCE_TOKEN, word_to_char_ids

# TensorFlow orders the LSTM gate blocks i, j (candidate), f, o; torch orders them i, f, g (candidate), o.
TF_TO_TORCH_GATES = (0, 2, 1, 3)
# TensorFlow's LSTMCell adds this to the forget gate at run time; it is not stored in the checkpoint.
TF_FORGET_BIAS = 1.0
VALIDATION_SENTENCE = ["The", "biLM", "reads", "characters", ",", "naïvely", "!"]
MODEL_CARDS_DIR = Path(__file__).resolve().parents[2] / "model_cards"
# The released checkpoints with a card in model_cards/{name}.md, and the architecture each was released with.
MODEL_CARDS = {
    "small": "2x1024_128_2048cnn_1xhighway",
    "medium": "2x2048_256_2048cnn_1xhighway",
    "original": "2x4096_512_2048cnn_2xhighway",
    "original-5.5B": "2x4096_512_2048cnn_2xhighway",
}


class ConversionError(ValueError):
    """The checkpoint cannot be converted; the message says what is wrong and what to do."""


def read_options(path: str | os.PathLike) -> dict:
    """Reads an original `options.json`."""
    path = Path(path)
    if not path.is_file():
        raise ConversionError(f"options file not found: {path}")
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConversionError(f"options file {path} is not valid JSON ({error}); pass the checkpoint's options.json.")
    if not isinstance(options, dict) or not isinstance(options.get("lstm"), dict) or not isinstance(
        options.get("char_cnn"), dict
    ):
        raise ConversionError(f"options file {path} has no 'lstm' and 'char_cnn' sections; is it an ELMo options.json?")
    return options


def convert_config(options: dict) -> ElmoConfig:
    """Maps the original options (training-only keys are ignored) to an `ElmoConfig`."""
    lstm, char_cnn = options["lstm"], options["char_cnn"]
    try:
        fields = {
            "char_embedding_dim": char_cnn["embedding"]["dim"],
            "filters": [list(bank) for bank in char_cnn["filters"]],
            "activation": char_cnn["activation"],
            "num_highway_layers": char_cnn.get("n_highway") or 0,
            "max_characters_per_token": char_cnn["max_characters_per_token"],
            "projection_dim": lstm["projection_dim"],
            "lstm_dim": lstm["dim"],
            "num_layers": lstm.get("n_layers", 1),
            # bilm-tf: an absent clip is no clip; AllenNLP: any falsy clip is no clip.
            "cell_clip": lstm.get("cell_clip") or None,
            "projection_clip": lstm.get("proj_clip") or None,
            "use_skip_connections": bool(lstm.get("use_skip_connections", False)),
        }
    except (KeyError, TypeError) as error:
        raise ConversionError(f"options.json lacks the field {error} that the architecture needs.")
    if char_cnn.get("n_characters", 262) not in (261, 262):
        raise ConversionError(
            f"options.json char_cnn.n_characters is {char_cnn['n_characters']}; ELMo checkpoints use 261 or 262."
        )
    if fields["activation"] not in ("relu", "tanh"):
        raise ConversionError(f"unknown activation {fields['activation']!r} in options.json; expected 'relu' or 'tanh'.")
    try:
        return ElmoConfig(**fields)
    except Exception as error:  # the strict config names the bad field
        raise ConversionError(f"options.json describes an invalid architecture: {error}")


def _cell_name(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def original_shapes(config: ElmoConfig) -> dict[str, tuple[int, ...]]:
    """Every dataset an original weights file must hold for `config`, with its shape."""
    embed, filters, projection = config.char_embedding_dim, config.num_filters, config.projection_dim
    gates = 4 * config.lstm_dim
    shapes = {"char_embed": (config.char_vocab_size - 1, embed)}
    for index, (width, num) in enumerate(config.filters):
        shapes[f"CNN/W_cnn_{index}"] = (1, width, embed, num)
        shapes[f"CNN/b_cnn_{index}"] = (num,)
    for index in range(config.num_highway_layers):
        for kind in ("carry", "transform"):
            shapes[f"CNN_high_{index}/W_{kind}"] = (filters, filters)
            shapes[f"CNN_high_{index}/b_{kind}"] = (filters,)
    shapes["CNN_proj/W_proj"] = (filters, projection)
    shapes["CNN_proj/b_proj"] = (projection,)
    for layer in range(config.num_layers):
        for direction in (0, 1):
            cell = _cell_name(direction, layer)
            shapes[f"{cell}/W_0"] = (2 * projection, gates)
            shapes[f"{cell}/B"] = (gates,)
            shapes[f"{cell}/W_P_0"] = (config.lstm_dim, projection)
    return shapes


def _with_padding_row(array: np.ndarray) -> np.ndarray:
    """(261, E) embeddings of raw ids -> (262, E) indexed by shifted ids; id 0 pads a word and embeds to zeros."""
    return np.concatenate([np.zeros_like(array[:1]), array])


def _conv_kernel(array: np.ndarray) -> np.ndarray:
    """TF conv2d kernel (1, width, E, n) -> torch Conv1d weight (n, E, width)."""
    return array[0].transpose(2, 1, 0)


def _linear(array: np.ndarray) -> np.ndarray:
    """TF `x @ W` weights (in, out) -> torch Linear weight (out, in)."""
    return array.T


def _reorder_gates(array: np.ndarray) -> np.ndarray:
    """Gate blocks along the last axis from TF order i, j, f, o to torch order i, f, g, o."""
    blocks = np.split(array, 4, axis=-1)
    return np.concatenate([blocks[index] for index in TF_TO_TORCH_GATES], axis=-1)


def _input_to_gates(array: np.ndarray) -> np.ndarray:
    """`W_0` rows multiplying the layer input -> (4C, P)."""
    return _reorder_gates(array[: array.shape[0] // 2]).T


def _hidden_to_gates(array: np.ndarray) -> np.ndarray:
    """`W_0` rows multiplying the previous projected hidden state -> (4C, P)."""
    return _reorder_gates(array[array.shape[0] // 2 :]).T


def _gates_bias(array: np.ndarray) -> np.ndarray:
    """`B` in torch gate order with TF's run-time forget bias folded in."""
    bias = _reorder_gates(array).copy()
    lstm_dim = bias.shape[0] // 4
    bias[lstm_dim : 2 * lstm_dim] += TF_FORGET_BIAS
    return bias


def _identity(array: np.ndarray) -> np.ndarray:
    return array


def weight_table(config: ElmoConfig) -> list[tuple[str, str, Callable[[np.ndarray], np.ndarray]]]:
    """(our parameter, original dataset, transform): one rename per line."""
    table = [("token_encoder.char_embeddings.weight", "char_embed", _with_padding_row)]
    for index in range(len(config.filters)):
        table.append((f"token_encoder.char_cnn.convolutions.{index}.weight", f"CNN/W_cnn_{index}", _conv_kernel))
        table.append((f"token_encoder.char_cnn.convolutions.{index}.bias", f"CNN/b_cnn_{index}", _identity))
    for index in range(config.num_highway_layers):
        ours = f"token_encoder.highway.layers.{index}"
        table.append((f"{ours}.transform.weight", f"CNN_high_{index}/W_transform", _linear))
        table.append((f"{ours}.transform.bias", f"CNN_high_{index}/b_transform", _identity))
        # bilm-tf's "carry" gate multiplies the transformed branch: it is our gate.
        table.append((f"{ours}.gate.weight", f"CNN_high_{index}/W_carry", _linear))
        table.append((f"{ours}.gate.bias", f"CNN_high_{index}/b_carry", _identity))
    table.append(("token_encoder.projection.weight", "CNN_proj/W_proj", _linear))
    table.append(("token_encoder.projection.bias", "CNN_proj/b_proj", _identity))
    for layer in range(config.num_layers):
        for direction, name in enumerate(("forward", "backward")):
            ours, cell = f"bilm.layers.{layer}.{name}_cell", _cell_name(direction, layer)
            table.append((f"{ours}.input_to_gates.weight", f"{cell}/W_0", _input_to_gates))
            table.append((f"{ours}.hidden_to_gates.weight", f"{cell}/W_0", _hidden_to_gates))
            table.append((f"{ours}.hidden_to_gates.bias", f"{cell}/B", _gates_bias))
            table.append((f"{ours}.projection.weight", f"{cell}/W_P_0", _linear))
    return table


def read_weights(path: str | os.PathLike, config: ElmoConfig) -> dict[str, np.ndarray]:
    """Reads every dataset `config` needs from an original weights file, checking presence and shape of all first."""
    import h5py

    path = Path(path)
    if not path.is_file():
        raise ConversionError(f"weights file not found: {path}")
    if not h5py.is_hdf5(path):
        raise ConversionError(f"weights file {path} is not an HDF5 file; pass the checkpoint's weights .hdf5.")
    problems, arrays = [], {}
    with h5py.File(path, "r") as weights:
        for name, shape in original_shapes(config).items():
            dataset = weights.get(name)
            if not hasattr(dataset, "shape"):
                problems.append(f"missing dataset {name!r} (expected shape {shape})")
            elif tuple(dataset.shape) != shape:
                problems.append(f"dataset {name!r} has shape {tuple(dataset.shape)}, the options imply {shape}")
            else:
                arrays[name] = np.asarray(dataset, dtype=np.float32)
    if problems:
        raise ConversionError(
            f"weights file {path} does not match the options:\n  - " + "\n  - ".join(problems)
            + "\nCheck that --options and --weights belong to the same checkpoint."
        )
    return arrays


def convert_state_dict(
    arrays: dict[str, np.ndarray], table: list[tuple[str, str, Callable[[np.ndarray], np.ndarray]]]
) -> dict[str, torch.Tensor]:
    """Original tensors -> our float32 state dict, following a `weight_table`."""
    return {
        ours: torch.from_numpy(np.ascontiguousarray(transform(arrays[original]), dtype=np.float32))
        for ours, original, transform in table
    }


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def reference_layers(arrays: dict[str, np.ndarray], config: ElmoConfig, words: list[str]) -> list[np.ndarray]:
    """The original computation in float64 NumPy, straight from the original datasets, for one sentence.

    Returns the `num_layers + 1` layers `(len(words), 2 * projection_dim)`, boundaries removed.
    """
    arrays = {name: array.astype(np.float64) for name, array in arrays.items()}
    tokens = [BEGIN_SENTENCE_TOKEN, *words, END_SENTENCE_TOKEN]
    raw_ids = np.array([word_to_char_ids(token, config.max_characters_per_token) for token in tokens]) - 1
    chars = arrays["char_embed"][raw_ids]  # (tokens, characters, E)
    pooled = []
    for index, (width, _) in enumerate(config.filters):
        kernel = arrays[f"CNN/W_cnn_{index}"][0]  # (width, E, n)
        windows = np.stack([chars[:, k : chars.shape[1] - width + 1 + k] for k in range(width)], axis=2)
        pooled.append((np.einsum("tpke,ken->tpn", windows, kernel) + arrays[f"CNN/b_cnn_{index}"]).max(axis=1))
    x = np.concatenate(pooled, axis=-1)
    x = np.maximum(x, 0) if config.activation == "relu" else np.tanh(x)
    for index in range(config.num_highway_layers):
        high = f"CNN_high_{index}"
        gate = _sigmoid(x @ arrays[f"{high}/W_carry"] + arrays[f"{high}/b_carry"])
        x = gate * np.maximum(x @ arrays[f"{high}/W_transform"] + arrays[f"{high}/b_transform"], 0) + (1 - gate) * x
    token_layer = x @ arrays["CNN_proj/W_proj"] + arrays["CNN_proj/b_proj"]

    layers = [np.concatenate([token_layer, token_layer], axis=-1)]
    inputs = [token_layer, token_layer[::-1]]
    for layer in range(config.num_layers):
        outputs = []
        for direction in (0, 1):
            cell_name = _cell_name(direction, layer)
            hidden, cell = np.zeros(config.projection_dim), np.zeros(config.lstm_dim)
            steps = []
            for x_t in inputs[direction]:
                i, j, f, o = np.split(np.concatenate([x_t, hidden]) @ arrays[f"{cell_name}/W_0"] + arrays[f"{cell_name}/B"], 4)
                cell = _sigmoid(f + TF_FORGET_BIAS) * cell + _sigmoid(i) * np.tanh(j)
                if config.cell_clip is not None:
                    cell = np.clip(cell, -config.cell_clip, config.cell_clip)
                hidden = (_sigmoid(o) * np.tanh(cell)) @ arrays[f"{cell_name}/W_P_0"]
                if config.projection_clip is not None:
                    hidden = np.clip(hidden, -config.projection_clip, config.projection_clip)
                steps.append(hidden)
            output = np.stack(steps)
            outputs.append(output + inputs[direction] if config.use_skip_connections and layer > 0 else output)
        inputs = outputs
        layers.append(np.concatenate([outputs[0], outputs[1][::-1]], axis=-1))
    return [layer[1:-1] for layer in layers]


def validate(model: ElmoModel, arrays: dict[str, np.ndarray], tokenizer: ElmoTokenizer):
    """Checks the converted model against `reference_layers` on a short sentence; raises if any layer differs."""
    expected = reference_layers(arrays, model.config, VALIDATION_SENTENCE)
    inputs = tokenizer([VALIDATION_SENTENCE], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        actual = model(**inputs, output_hidden_states=True).hidden_states
    for index, (ours, reference) in enumerate(zip(actual, expected)):
        difference = float(np.abs(ours[0].double().numpy() - reference).max())
        if not np.allclose(ours[0].double().numpy(), reference, atol=1e-5, rtol=1e-4):
            raise ConversionError(
                f"converted model differs from the reference computation in layer {index} (max abs diff "
                f"{difference:.3g}); the checkpoint layout is not the one this converter knows."
            )


def architecture_name(config: ElmoConfig) -> str:
    """The original release's name for an architecture, such as `2x4096_512_2048cnn_2xhighway`."""
    return (
        f"{config.num_layers}x{config.lstm_dim}_{config.projection_dim}_{config.num_filters}cnn_"
        f"{config.num_highway_layers}xhighway"
    )


def generic_model_card(config: ElmoConfig, repo_id: str, source: str) -> str:
    """A model card filled from the config, for checkpoints without a card in `model_cards/`."""
    return f"""---
library_name: transformers
pipeline_tag: feature-extraction
license: apache-2.0
language: en
tags:
- elmo
- custom_code
- character-level
---

# ELMo biLM ({architecture_name(config)})

An ELMo bidirectional language model (Peters et al., 2018) converted from the original checkpoint
`{source}` with elmo-hf. Per-word outputs are {config.hidden_size} wide (`[forward; backward]`),
with {config.num_layers + 1} layers in `hidden_states`. Check that the license above is the one the original
checkpoint was released under.

```python
from transformers import AutoModel, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{repo_id}", trust_remote_code=True)
model = AutoModel.from_pretrained("{repo_id}", trust_remote_code=True)
outputs = model(**tokenizer(["ELMo reads characters ."], return_tensors="pt"), output_hidden_states=True)
```
"""


def model_card(config: ElmoConfig, name: str | None, repo_id: str, source: str) -> str:
    """The README.md text: card `name` from `model_cards/`, or the generic card if `name` is None."""
    if name is None:
        return generic_model_card(config, repo_id, source)
    if name not in MODEL_CARDS:
        raise ConversionError(f"unknown model card {name!r}; the cards are: {', '.join(MODEL_CARDS)}.")
    if MODEL_CARDS[name] != architecture_name(config):
        raise ConversionError(
            f"model card {name!r} describes a {MODEL_CARDS[name]} checkpoint, but the options describe "
            f"{architecture_name(config)}; pick the matching card or leave out --model-card."
        )
    return Template((MODEL_CARDS_DIR / f"{name}.md").read_text(encoding="utf-8")).substitute(repo_id=repo_id)


def save_folder(write: Callable[[Path], None], output: Path, overwrite: bool):
    """Runs `write` into a temporary folder beside `output` and moves it into place only if it succeeds."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise ConversionError(f"--output {output} is a file; give a folder path.")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise ConversionError(f"--output {output} is not empty; pass --overwrite to replace it.")
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        write(staging)
        if output.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{output.name}.old.", dir=output.parent))
            os.replace(output, old / output.name)
            os.replace(staging, output)
            shutil.rmtree(old)
        else:
            os.replace(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def save_converted(model: ElmoModel, tokenizer: ElmoTokenizer, readme: str, output: Path, overwrite: bool) -> Path:
    """Writes the model, its tokenizer and the model card `readme` into `output` atomically (`save_folder`)."""

    def write(folder: Path):
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / "README.md").write_text(readme, encoding="utf-8")

    save_folder(write, output, overwrite)
    return output


def convert(options_path: str | os.PathLike, weights_path: str | os.PathLike, output: str | os.PathLike,
            overwrite: bool = False, model_card_name: str | None = None, repo_id: str | None = None) -> Path:
    """Converts, validates and saves; returns the output folder.

    The README.md is card `model_card_name` (see `MODEL_CARDS`) or a generic one, showing how to load `repo_id`
    (default: the output folder).
    """
    config = convert_config(read_options(options_path))
    readme = model_card(config, model_card_name, repo_id or str(output), Path(weights_path).name)
    arrays = read_weights(weights_path, config)
    model = ElmoModel(config)
    model.load_state_dict(convert_state_dict(arrays, weight_table(config)), strict=True)
    model.eval()
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    validate(model, arrays, tokenizer)
    return save_converted(model, tokenizer, readme, Path(output), overwrite)


def push_to_hub(folder: str | os.PathLike, repo_id: str, token: str | None = None, private: bool | None = None,
                revision: str | None = None, create_pr: bool = False) -> CommitInfo:
    """Uploads a converted folder in one commit, creating the repository (and branch `revision`) if needed."""
    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    if revision is not None and revision != DEFAULT_REVISION:
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    return api.upload_folder(
        repo_id=repo_id,
        folder_path=folder,
        revision=revision,
        create_pr=create_pr,
        commit_message=f"Add ELMo converted with elmo-hf from {Path(folder).name}",
    )


def check_push_arguments(args: argparse.Namespace) -> str | None:
    """The reason the requested push cannot work, checked before anything is converted; None if it can."""
    if args.push_to_hub is None:
        given = [option for option in ("private", "revision", "create_pr", "token") if getattr(args, option)]
        return f"--{given[0].replace('_', '-')} needs --push-to-hub." if given else None
    try:
        validate_repo_id(args.push_to_hub)
    except HFValidationError as error:
        return f"--push-to-hub {args.push_to_hub!r} is not a valid repository id: {error}"
    if "/" not in args.push_to_hub:
        return f"--push-to-hub {args.push_to_hub!r} needs its namespace, as in 'your-name/{args.push_to_hub}'."
    if args.create_pr and args.revision not in (None, DEFAULT_REVISION):
        return (
            f"--create-pr opens a pull request against {DEFAULT_REVISION!r}; it cannot go with --revision "
            f"{args.revision!r}. Push to the branch without --create-pr, or open the pull request without --revision."
        )
    if args.token is None and get_token() is None:
        return "pushing needs a Hub token with write access: run `hf auth login`, set HF_TOKEN or pass --token."
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `elmo-hf convert` options."""
    parser.add_argument("--options", required=True, help="the checkpoint's options.json")
    parser.add_argument("--weights", required=True, help="the checkpoint's weights .hdf5")
    parser.add_argument("--output", required=True, help="folder to write (must be empty or absent)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --output")
    parser.add_argument(
        "--model-card", metavar="NAME", help=f"README.md is this released checkpoint's card: {', '.join(MODEL_CARDS)}"
    )
    parser.add_argument("--push-to-hub", metavar="REPO_ID", help="then upload the folder to this Hub repository")
    parser.add_argument("--private", action="store_true", default=None, help="create the repository private")
    parser.add_argument("--revision", help="push to this branch (created if needed) instead of the default branch")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--token", help="Hugging Face token (default: HF_TOKEN or the `hf auth login` one)")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`elmo-hf convert`: convert, then push if asked; 0 on success, 2 for a bad checkpoint, 1 for a failed push."""
    if problem := check_push_arguments(args):
        parser.error(problem)
    disable_progress_bar()
    try:
        folder = convert(args.options, args.weights, args.output, overwrite=args.overwrite,
                         model_card_name=args.model_card, repo_id=args.push_to_hub)
    except ConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"converted {args.weights} -> {folder}")
    if args.push_to_hub is None:
        return 0
    try:
        commit = push_to_hub(folder, args.push_to_hub, args.token, args.private, args.revision, args.create_pr)
    except HfHubHTTPError as error:
        print(f"error: pushing {folder} to {args.push_to_hub} failed, the folder is kept: {error}", file=sys.stderr)
        return 1
    print(f"pushed {folder} -> {commit.pr_url or commit.commit_url}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_subcommand("convert", argv)


if __name__ == "__main__":
    sys.exit(main())
