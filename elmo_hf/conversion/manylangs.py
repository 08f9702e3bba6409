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
"""Convert an ELMoForManyLangs model folder (HIT-SCIR, 44 languages) to a Hugging Face folder.

    elmo-hf convert-manylangs --model zhs.model --language zh --output elmo-zhs
    python -m elmo_hf.cli convert-manylangs ...   (the same, from a checkout)
    convert_manylangs("zhs.model", "elmo-zhs", language="zh")   (the same, from Python)

Their folder holds `config.json` (the training options, whose `config_path` names the architecture file),
`char.dic` and `word.dic` (`entry\\tid` lines), and `token_embedder.pkl` / `encoder.pkl` (`torch.save(state_dict)`).
Their biLM is AllenNLP's; their token layer adds a word embedding before the character CNN's output, and their
character ids come from `char.dic`, one per Unicode code point. Everything is read as their `Embedder` reads it, quirks
included (see `read_lexicon` and `dictionary_vocab`), the weights with `torch.load(weights_only=True)` only. Every
tensor is checked against the architecture before anything is written, the converted model is checked in float64
against an independent NumPy implementation of their computation, and the folder appears only when all of that
succeeded. Their names and layouts live in this file only.
"""

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from transformers.utils import logging

from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer
from elmo_hf.tokenization_elmo import UNKNOWN_ENTRY, VOCAB_FILES_NAMES

from .checkpoint import ConversionError, check_max_characters
from .convert import check_output, staged_folder
from .hub import PLACEHOLDER_REPO_ID, architecture_name
from .reference import _sigmoid

logger = logging.get_logger(__name__)

# The architecture of every released model: their package's configs/cnn_50_100_512_4096_sample.json (identical to
# cnn_0_100_512_4096_sample.json), used as their Embedder does when the folder lacks the file `config_path` names.
PACKAGED_ARCHITECTURE_FILES = ("cnn_50_100_512_4096_sample.json", "cnn_0_100_512_4096_sample.json")
PACKAGED_ARCHITECTURE = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
}
# Entries their trainer adds to the dictionaries (biLM.py): <bos>/<eos> are the sentence-boundary "words" and
# "characters", <bow>/<eow> frame words, <pad> pads within words.
BEGIN_SENTENCE, END_SENTENCE = "<bos>", "<eos>"
CHARACTER_ENTRIES = (BEGIN_SENTENCE, END_SENTENCE, "<oov>", "<pad>", "<bow>", "<eow>")
WORD_ENTRIES = ("<oov>", "<pad>")
REPOSITORY = "https://github.com/HIT-SCIR/ELMoForManyLangs"
# The whole-number fields of their architecture and the least value of each (None: any; a word_dim of 0 or less
# means no word embedding, as in their code; the character CNN is required).
ARCHITECTURE_SIZES = {
    ("token_embedder", "max_characters_per_token"): 1,
    ("token_embedder", "word_dim"): None,
    ("token_embedder", "char_dim"): 1,
    ("token_embedder", "n_highway"): 0,
    ("encoder", "projection_dim"): 1,
    ("encoder", "dim"): 1,
    ("encoder", "n_layers"): 1,
}
# The self-check runs the converted model in float64: it must agree with the reference to round-off.
CHECK_TOLERANCE = 1e-9


def read_lexicon(path: Path) -> dict[str, int]:
    """A `.dic` file as their `Embedder` reads it: `line.strip().split('\\t')` per line, and an entry whose text is
    whitespace (stripped away, leaving only the id) is filed under U+3000, so the real " " is unknown."""
    if not path.is_file():
        raise ConversionError(f"{path} not found; an ELMoForManyLangs model folder holds char.dic and word.dic.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConversionError(
            f"{path} is not UTF-8 text (byte {error.start}: {error.reason}); their Embedder reads it as UTF-8, so "
            "this file is damaged or not theirs."
        ) from error
    lexicon = {}
    # Their codecs reader splits lines as str.splitlines does (also at U+2028, U+0085, ...).
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        try:
            entry, index = fields
            lexicon[entry] = int(index)
        except ValueError:
            raise ConversionError(
                f"{path} line {number} is not 'entry<TAB>id': {line!r}; their Embedder cannot read this file either."
            )
        if lexicon[entry] < 0:
            raise ConversionError(
                f"{path} line {number} gives {entry!r} the negative id {index}; ids are embedding rows, 0 and up."
            )
    return lexicon


def read_architecture(model_dir: Path) -> dict:
    """Their architecture JSON, found as their `Embedder` finds it: `config_path` from `config.json` (relative to the
    folder), else its file name in the folder, else the architecture their package ships under that name."""
    options_path = model_dir / "config.json"
    if not options_path.is_file():
        raise ConversionError(f"{options_path} not found; is {model_dir} an ELMoForManyLangs model folder?")
    try:
        config_path = json.loads(options_path.read_text(encoding="utf-8"))["config_path"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
        raise ConversionError(f"{options_path} has no readable 'config_path' ({error}).")
    if not isinstance(config_path, str) or not config_path:
        raise ConversionError(
            f"'config_path' in {options_path} is {config_path!r}, not a file name; their Embedder reads the "
            "architecture from the JSON file it names."
        )
    for candidate in (model_dir / config_path, model_dir / Path(config_path).name):
        if candidate.is_file():
            try:
                architecture = json.loads(candidate.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise ConversionError(f"architecture file {candidate} is not valid JSON ({error}).")
            if not isinstance(architecture, dict):
                raise ConversionError(f"architecture file {candidate} is not a JSON object of 'encoder' and "
                                      "'token_embedder'.")
            return architecture
    if Path(config_path).name in PACKAGED_ARCHITECTURE_FILES:
        return PACKAGED_ARCHITECTURE
    raise ConversionError(
        f"the architecture file {config_path!r} named by {options_path} is neither at that path, nor in {model_dir}, "
        f"nor one their package ships ({', '.join(PACKAGED_ARCHITECTURE_FILES)}); copy it into {model_dir}."
    )


def convert_config(architecture: dict, num_chars: int, num_words: int) -> dict:
    """Their architecture -> `ElmoConfig` fields (all but the boundary rows, which come from the tokenizer)."""
    try:
        encoder, embedder = architecture["encoder"], architecture["token_embedder"]
        if str(encoder["name"]).lower() != "elmo" or str(embedder["name"]).lower() != "cnn":
            raise ConversionError(
                f"encoder {encoder['name']!r} with token embedder {embedder['name']!r}: only the 'elmo' encoder with "
                "the 'cnn' token embedder (every released model) is an ELMo biLM elmo-hf can run."
            )
        sizes = {(section, key): value for section, part in (("encoder", encoder), ("token_embedder", embedder))
                 for key, value in part.items()}
        for (section, key), minimum in ARCHITECTURE_SIZES.items():
            value = sizes[section, key]
            if type(value) is not int or (minimum is not None and value < minimum):
                least = "" if minimum is None else f" of at least {minimum}"
                why = " (elmo-hf needs the character CNN)" if key == "char_dim" else ""
                raise ConversionError(f"{section}.{key} is {value!r}; it must be a whole number{least}{why}.")
        check_max_characters(embedder["max_characters_per_token"], "token_embedder.max_characters_per_token")
        filters = embedder["filters"]
        if not isinstance(filters, list) or not filters or not all(
            isinstance(bank, list) and len(bank) == 2 and all(type(value) is int and value > 0 for value in bank)
            for bank in filters
        ):
            raise ConversionError(f"token_embedder.filters is {filters!r}; it must be a list of [width, number] "
                                  "pairs of positive whole numbers.")
        fields = {
            "char_vocab_size": num_chars + 1,
            "max_characters_per_token": embedder["max_characters_per_token"],
            "word_embedding_vocab_size": num_words + 1 if embedder["word_dim"] > 0 else 0,
            "word_embedding_dim": max(embedder["word_dim"], 0),
            "char_embedding_dim": embedder["char_dim"],
            "filters": [list(bank) for bank in filters],
            "activation": embedder["activation"],
            "num_highway_layers": embedder["n_highway"],
            "projection_dim": encoder["projection_dim"],
            "lstm_dim": encoder["dim"],
            "num_layers": encoder["n_layers"],
            # Their cell clips only when the value is truthy; the skip connection is always on above layer 0.
            "cell_clip": encoder["cell_clip"] or None,
            "projection_clip": encoder["proj_clip"] or None,
            "use_skip_connections": True,
        }
    except (KeyError, TypeError) as error:
        raise ConversionError(f"the architecture JSON lacks the field {error} that the model needs.")
    if fields["activation"] not in ("relu", "tanh"):
        raise ConversionError(f"unknown activation {fields['activation']!r}; their token embedder knows relu, tanh.")
    return fields


def expected_shapes(fields: dict) -> dict[str, dict[str, tuple[int, ...]]]:
    """Every tensor of `token_embedder.pkl` and `encoder.pkl` for the architecture, with its shape."""
    filters, projection, cells = sum(num for _, num in fields["filters"]), fields["projection_dim"], fields["lstm_dim"]
    token = {"char_emb_layer.embedding.weight": (fields["char_vocab_size"] - 1, fields["char_embedding_dim"])}
    if fields["word_embedding_dim"]:
        words = (fields["word_embedding_vocab_size"] - 1, fields["word_embedding_dim"])
        token["word_emb_layer.embedding.weight"] = words
    for index, (width, num) in enumerate(fields["filters"]):
        token[f"convolutions.{index}.weight"] = (num, fields["char_embedding_dim"], width)
        token[f"convolutions.{index}.bias"] = (num,)
    for index in range(fields["num_highway_layers"]):
        token[f"highways._layers.{index}.weight"] = (2 * filters, filters)
        token[f"highways._layers.{index}.bias"] = (2 * filters,)
    token["projection.weight"] = (projection, fields["word_embedding_dim"] + filters)
    token["projection.bias"] = (projection,)
    encoder = {}
    for layer in range(fields["num_layers"]):
        for direction in ("forward", "backward"):
            cell = f"{direction}_layer_{layer}"
            encoder[f"{cell}.input_linearity.weight"] = (4 * cells, projection)
            encoder[f"{cell}.state_linearity.weight"] = (4 * cells, projection)
            encoder[f"{cell}.state_linearity.bias"] = (4 * cells,)
            encoder[f"{cell}.state_projection.weight"] = (projection, cells)
    return {"token_embedder.pkl": token, "encoder.pkl": encoder}


def read_weights(model_dir: Path, fields: dict) -> dict[str, np.ndarray]:
    """Both state dicts (keys prefixed with the file's stem), every tensor's presence and shape checked first."""
    problems, arrays = [], {}
    for file, shapes in expected_shapes(fields).items():
        path = model_dir / file
        if not path.is_file():
            raise ConversionError(f"{path} not found; an ELMoForManyLangs model folder holds {file}.")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
            raise ConversionError(
                f"{path} cannot be read as a plain state dict (torch.load with weights_only=True: {error}); "
                "elmo-hf does not unpickle arbitrary objects."
            )
        if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
            raise ConversionError(f"{path} is not a state dict of tensors.")
        for name in sorted(set(state) - set(shapes)):
            problems.append(f"{file}: unexpected tensor {name!r} {tuple(state[name].shape)}")
        for name, shape in shapes.items():
            if name not in state:
                problems.append(f"{file}: missing tensor {name!r} (expected shape {shape})")
            elif tuple(state[name].shape) != shape:
                problems.append(f"{file}: {name!r} has shape {tuple(state[name].shape)}, the architecture and "
                                f"dictionaries imply {shape}")
            else:
                arrays[f"{Path(file).stem}.{name}"] = state[name].double().numpy()
    if problems:
        raise ConversionError(
            f"the weights in {model_dir} do not match its architecture and dictionaries (their Embedder refuses a "
            "size mismatch too):\n  - " + "\n  - ".join(problems)
        )
    return arrays


def dictionary_vocab(chars: dict[str, int], words: dict[str, int] | None) -> dict:
    """Their lexicons -> elmo-hf's `vocab.json`: ids + 1 (0 pads whole words), entries named by role.

    Their frontend begins every word with the `<eow>` entry and ends it with `<bow>` (in training too), so our `<bow>`
    is their `<eow>` and the other way round; their in-word `<pad>` is our `<char_pad>`. A word.dic without `<bos>` /
    `<eos>` gives those boundary words the `<oov>` id, as their `word2id.get(word, oov)` does.
    """
    missing = [entry for entry in CHARACTER_ENTRIES if entry not in chars]
    missing += [f"word.dic:{entry}" for entry in WORD_ENTRIES if words is not None and entry not in words]
    if missing:
        raise ConversionError(f"the dictionaries lack the entries their frontend needs: {missing}.")
    characters = {entry: index + 1 for entry, index in chars.items()}
    characters["<bow>"], characters["<eow>"] = chars["<eow>"] + 1, chars["<bow>"] + 1
    characters["<char_pad>"] = characters.pop("<pad>")
    vocab = {"characters": characters}
    if words is not None:
        vocab["words"] = {entry: index + 1 for entry, index in words.items()}
        for entry in (BEGIN_SENTENCE, END_SENTENCE):
            vocab["words"].setdefault(entry, words[UNKNOWN_ENTRY] + 1)
    return vocab


def _shift(array: np.ndarray) -> np.ndarray:
    """Embedding rows of their ids -> rows of ours (+1); row 0 pads whole words and embeds to zeros."""
    return np.concatenate([np.zeros_like(array[:1]), array])


def _identity(array: np.ndarray) -> np.ndarray:
    return array


def _highway_transform(array: np.ndarray) -> np.ndarray:
    """First half of their `Linear(F, 2F)`: the transform."""
    return array[: array.shape[0] // 2]


def _highway_gate(array: np.ndarray) -> np.ndarray:
    """Second half, negated: their gate g multiplies the input (`g*x + (1-g)*relu(Ax)`); ours, sigmoid(-z) = 1 - g,
    multiplies the transformed branch."""
    return -array[array.shape[0] // 2 :]


def weight_table(config: ElmoConfig) -> list[tuple[str, str, Callable[[np.ndarray], np.ndarray]]]:
    """(our parameter, their tensor, transform): one rename per line. Their LSTM gate order i, f, g, o is ours, and no
    forget bias is added at run time, so the LSTM weights are copied as they are."""
    ours = "token_encoder"
    table = [(f"{ours}.char_embeddings.weight", "token_embedder.char_emb_layer.embedding.weight", _shift)]
    if config.word_embedding_dim:
        table.append((f"{ours}.word_embeddings.weight", "token_embedder.word_emb_layer.embedding.weight", _shift))
    for index in range(len(config.filters)):
        for kind in ("weight", "bias"):
            theirs = f"token_embedder.convolutions.{index}.{kind}"
            table.append((f"{ours}.char_cnn.convolutions.{index}.{kind}", theirs, _identity))
    for index in range(config.num_highway_layers):
        for kind in ("weight", "bias"):
            theirs = f"token_embedder.highways._layers.{index}.{kind}"
            table.append((f"{ours}.highway.layers.{index}.transform.{kind}", theirs, _highway_transform))
            table.append((f"{ours}.highway.layers.{index}.gate.{kind}", theirs, _highway_gate))
    table.append((f"{ours}.projection.weight", "token_embedder.projection.weight", _identity))
    table.append((f"{ours}.projection.bias", "token_embedder.projection.bias", _identity))
    for layer in range(config.num_layers):
        for direction in ("forward", "backward"):
            cell, theirs = f"bilm.layers.{layer}.{direction}_cell", f"encoder.{direction}_layer_{layer}"
            table.append((f"{cell}.input_to_gates.weight", f"{theirs}.input_linearity.weight", _identity))
            table.append((f"{cell}.hidden_to_gates.weight", f"{theirs}.state_linearity.weight", _identity))
            table.append((f"{cell}.hidden_to_gates.bias", f"{theirs}.state_linearity.bias", _identity))
            table.append((f"{cell}.projection.weight", f"{theirs}.state_projection.weight", _identity))
    return table


def reference_layers(
    arrays: dict[str, np.ndarray], config: ElmoConfig, chars: dict[str, int], words: dict[str, int] | None,
    sentence: list[str],
) -> list[np.ndarray]:
    """Their computation in float64 NumPy, from their tensors and lexicons, for one sentence (their frontend's ids,
    `ConvTokenEmbedder`, AllenNLP's `ElmobiLm`). Returns the `num_layers + 1` layers, boundaries removed."""
    width = config.max_characters_per_token
    tokens = [BEGIN_SENTENCE, *(word[: width - 2] for word in sentence), END_SENTENCE]
    char_ids = np.full((len(tokens), width), chars["<pad>"])
    for row, token in enumerate(tokens):
        boundary = token in (BEGIN_SENTENCE, END_SENTENCE)
        ids = [chars[token]] if boundary else [chars.get(char, chars["<oov>"]) for char in token]
        char_ids[row, : len(ids) + 2] = [chars["<eow>"], *ids, chars["<bow>"]]
    embedded = arrays["token_embedder.char_emb_layer.embedding.weight"][char_ids]  # (tokens, width, E)
    pooled = []
    for index, (kernel_width, _) in enumerate(config.filters):
        kernel = arrays[f"token_embedder.convolutions.{index}.weight"]  # (n, E, kernel_width)
        windows = np.stack([embedded[:, k : width - kernel_width + 1 + k] for k in range(kernel_width)], axis=-1)
        convolved = np.einsum("tpek,nek->tpn", windows, kernel) + arrays[f"token_embedder.convolutions.{index}.bias"]
        pooled.append(convolved.max(axis=1))
    x = np.concatenate(pooled, axis=-1)
    x = np.maximum(x, 0) if config.activation == "relu" else np.tanh(x)
    for index in range(config.num_highway_layers):
        projected = x @ arrays[f"token_embedder.highways._layers.{index}.weight"].T
        projected += arrays[f"token_embedder.highways._layers.{index}.bias"]
        nonlinear, gate = np.maximum(projected[:, : x.shape[1]], 0), _sigmoid(projected[:, x.shape[1] :])
        x = gate * x + (1 - gate) * nonlinear
    if words is not None:
        word_ids = [words.get(token, words["<oov>"]) for token in tokens]
        x = np.concatenate([arrays["token_embedder.word_emb_layer.embedding.weight"][word_ids], x], axis=-1)
    token_layer = x @ arrays["token_embedder.projection.weight"].T + arrays["token_embedder.projection.bias"]

    layers = [np.concatenate([token_layer, token_layer], axis=-1)]
    inputs = [token_layer, token_layer[::-1]]
    for layer in range(config.num_layers):
        outputs = []
        for direction, name in enumerate(("forward", "backward")):
            theirs = f"encoder.{name}_layer_{layer}"
            hidden, cell = np.zeros(config.projection_dim), np.zeros(config.lstm_dim)
            steps = []
            for x_t in inputs[direction]:
                gates = x_t @ arrays[f"{theirs}.input_linearity.weight"].T + arrays[f"{theirs}.state_linearity.bias"]
                gates += hidden @ arrays[f"{theirs}.state_linearity.weight"].T
                i, f, g, o = np.split(gates, 4)
                cell = _sigmoid(i) * np.tanh(g) + _sigmoid(f) * cell
                if config.cell_clip:
                    cell = np.clip(cell, -config.cell_clip, config.cell_clip)
                hidden = (_sigmoid(o) * np.tanh(cell)) @ arrays[f"{theirs}.state_projection.weight"].T
                if config.projection_clip:
                    hidden = np.clip(hidden, -config.projection_clip, config.projection_clip)
                steps.append(hidden)
            output = np.stack(steps)
            outputs.append(output + inputs[direction] if layer > 0 else output)
        inputs = outputs
        layers.append(np.concatenate([outputs[0], outputs[1][::-1]], axis=-1))
    return [layer[1:-1] for layer in layers]


def validation_sentence(chars: dict[str, int], words: dict[str, int] | None, max_characters: int) -> list[str]:
    """Words that exercise every path: every character of the dictionary (in words of `max_characters - 2`), known
    words, an unknown character, a cut word."""
    known_chars = [entry for entry in chars if len(entry) == 1]
    known_words = [entry for entry in words or {} if entry not in (*CHARACTER_ENTRIES, *WORD_ENTRIES)][:5]
    unknown_char = next(chr(code) for code in range(0xE000, 0xF900) if chr(code) not in chars)
    step = max_characters - 2
    every_char = ["".join(known_chars[start : start + step]) for start in range(0, len(known_chars), step)]
    return [*known_words, *every_char, known_chars[0] + unknown_char, known_chars[0] * max_characters]


def validate(
    model: ElmoModel, tokenizer: ElmoTokenizer, arrays: dict[str, np.ndarray], chars: dict[str, int],
    words: dict[str, int] | None,
) -> list[float]:
    """Max abs difference per layer between the converted model, run in float64, and `reference_layers`; raises if a
    layer differs by more than `CHECK_TOLERANCE` times the layer's largest value (or is not finite)."""
    sentence = validation_sentence(chars, words, model.config.max_characters_per_token)
    expected = reference_layers(arrays, model.config, chars, words, sentence)
    inputs = tokenizer([sentence], is_split_into_words=True, return_tensors="pt")
    model.double()
    try:
        with torch.no_grad():
            actual = model(**inputs, output_hidden_states=True).hidden_states
    finally:
        model.float()
    differences = []
    for index, (ours, reference) in enumerate(zip(actual, expected)):
        differences.append(float(np.abs(ours[0].numpy() - reference).max()))
        if not differences[-1] <= CHECK_TOLERANCE * max(1.0, float(np.abs(reference).max())):
            raise ConversionError(
                f"converted model differs from the float64 reference of their computation in layer {index} (max abs "
                f"diff {differences[-1]:.3g}); the checkpoint layout is not the one this converter knows."
            )
    return differences


def model_card(config: ElmoConfig, language: str, source: str, repo_id: str) -> str:
    """README.md of a converted folder: language, source, and that the models' licence is not stated."""
    words = (
        f"a {config.word_embedding_dim}-wide word embedding ({config.word_embedding_vocab_size - 1} words) and "
        if config.word_embedding_dim
        else ""
    )
    return f"""---
library_name: transformers
pipeline_tag: feature-extraction
language: {language}
license: other
license_name: not-stated
tags:
- elmo
- elmoformanylangs
- custom_code
- character-level
---

# ELMoForManyLangs biLM, language `{language}` ({architecture_name(config)})

An ELMo bidirectional language model (Peters et al., 2018) released by HIT-SCIR as part of
[ELMoForManyLangs]({REPOSITORY}), converted with elmo-hf from their model folder `{source}`. Its token layer
combines {words}a character CNN over {config.char_vocab_size - 1} dictionary characters. Per-word outputs are
{config.hidden_size} wide (`[forward; backward]`), with {config.num_layers + 1} layers in `hidden_states`; their
`sents2elmo(output_layer=-1)` is the plain mean of the three.

**Licence**: the authors state no licence for their models (their code is MIT-licensed). Check the terms of the
source you downloaded the model from before you redistribute it or this conversion.

Words must be segmented as in the model's training data (for the CoNLL 2018 shared task models, the Universal
Dependencies tokenization): raw text is split at whitespace and punctuation only, so pass segmented words
(`is_split_into_words=True`) for Chinese, Japanese and Vietnamese. Outputs are stateless and deterministic; their
`Embedder` carries LSTM states from one batch to the next, which elmo-hf reproduces when asked (`lstm_state`).

```python
from transformers import AutoModel, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{repo_id}", trust_remote_code=True)
model = AutoModel.from_pretrained("{repo_id}", trust_remote_code=True)
inputs = tokenizer([["潮水", "退", "了"]], is_split_into_words=True, return_tensors="pt")
outputs = model(**inputs, output_hidden_states=True)
```
"""


def convert_manylangs(model_dir: str | os.PathLike, output: str | os.PathLike, *, language: str,
                      overwrite: bool = False, repo_id: str | None = None,
                      report: Callable[[str], None] = logger.info) -> Path:
    """Converts, checks and saves an ELMoForManyLangs folder; returns the output folder (absolute).

    `language` is the model card's language code; the card shows how to load `repo_id` (default: a placeholder).
    `output` and `overwrite` are as in `convert_checkpoint`. `report` receives what a user should read: the
    self-check's result per layer and any leftovers of interrupted conversions that were cleaned. Raises
    `ConversionError` (an `ElmoInputError`) for a folder or an `output` that cannot be used and `ElmoRunError` if
    writing fails; in both cases nothing was written.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ConversionError(f"{model_dir} is not a folder; pass the unpacked ELMoForManyLangs model folder.")
    if not isinstance(language, str) or not language or any(character.isspace() for character in language):
        raise ConversionError(f"--language {language!r} is not a language code such as 'zh'; give the model's code.")
    output = check_output(output, [model_dir])
    architecture = read_architecture(model_dir)
    chars = read_lexicon(model_dir / "char.dic")
    has_words = isinstance(architecture.get("token_embedder"), dict) and architecture["token_embedder"].get(
        "word_dim", 0
    ) > 0
    words = read_lexicon(model_dir / "word.dic") if has_words else None
    fields = convert_config(architecture, len(chars), len(words or {}))
    arrays = read_weights(model_dir, fields)
    for name, lexicon, rows in (("char.dic", chars, fields["char_vocab_size"] - 1),
                                ("word.dic", words or {}, fields["word_embedding_vocab_size"] - 1)):
        if lexicon and max(lexicon.values()) >= rows:
            raise ConversionError(f"{name} has ids up to {max(lexicon.values())}, beyond the {rows} embedding rows.")
    with staged_folder(output, overwrite, report) as staging:
        vocab_file = staging / VOCAB_FILES_NAMES["vocab_file"]
        vocab_file.write_text(json.dumps(dictionary_vocab(chars, words), ensure_ascii=False), encoding="utf-8")
        tokenizer = ElmoTokenizer(
            str(vocab_file), bos_token=BEGIN_SENTENCE, eos_token=END_SENTENCE,
            max_characters_per_token=fields["max_characters_per_token"],
        )
        boundaries = [tokenizer.word_to_ids(word) for word in tokenizer.boundary_words]
        try:
            config = ElmoConfig(
                **fields, boundary_input_ids=boundaries, bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        except Exception as error:  # the strict config names the bad field
            raise ConversionError(f"the architecture is invalid: {error}")
        model = ElmoModel(config)
        state = {ours: torch.from_numpy(np.ascontiguousarray(transform(arrays[theirs]), dtype=np.float32))
                 for ours, theirs, transform in weight_table(config)}
        model.load_state_dict(state, strict=True)
        differences = validate(model.eval(), tokenizer, arrays, chars, words)
        layers = ", ".join(f"{index}: {difference:.2e}" for index, difference in enumerate(differences))
        report(f"checked in float64 against the float64 reference of their computation: max abs difference per "
               f"layer {layers}")
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        readme = model_card(config, language, model_dir.name, repo_id or PLACEHOLDER_REPO_ID)
        (staging / "README.md").write_text(readme, encoding="utf-8")
    return output


