"""Print the largest absolute differences between elmo-hf and the original ELMo on the fixture checkpoints.

    python -m elmo_hf.conversion.parity_report [FIXTURES]   (default: tests/fixtures)

For each fixture set: the top layer against the original's stateful outputs (10 batches of 3, `lstm_state` carried),
the first batch run statelessly, the token layer against `elmo_token_embeddings.hdf5` (allennlp set), and every layer
against the float64 reference of the original computation (`reference.reference_layers`), each sentence alone.
"""

import json
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import torch
from transformers.utils.logging import disable_progress_bar

from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.conversion import manylangs
from elmo_hf.conversion.checkpoint import convert_config, read_options, read_weights
from elmo_hf.conversion.convert import convert_checkpoint
from elmo_hf.conversion.reference import reference_layers, words_to_char_ids


def top_layer_expected(folder: Path, row: int, batch: int) -> np.ndarray:
    with h5py.File(folder / f"lm_embeddings_{row}.hdf5", "r") as file:
        forward, backward = file[str(batch)][...]
    return np.concatenate([forward, backward], axis=-1)


def report(folder: Path, model: ElmoModel, tokenizer: ElmoTokenizer) -> list[tuple[str, float, bool]]:
    """(what, max abs diff, numpy.allclose(atol=1e-6, rtol=1e-5)) rows for one fixture set."""
    sentences = [[s.split() for s in group] for group in json.loads((folder / "sentences.json").read_text())]
    rows, state = [], None
    stateful, stateless = [], []
    for batch in range(10):
        words = [sentences[row][batch] for row in range(3)]
        inputs = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            outputs = model(**inputs, lstm_state=state, output_lstm_state=True)
            fresh = model(**inputs).last_hidden_state if batch == 0 else None
        state = outputs.lstm_state
        for row, sentence in enumerate(words):
            expected = top_layer_expected(folder, row, batch)
            stateful.append((outputs.last_hidden_state[row, : len(sentence)].numpy(), expected))
            if fresh is not None:
                stateless.append((fresh[row, : len(sentence)].numpy(), expected))
    rows.append(compare("top layer, stateful, 10 batches", stateful))
    rows.append(compare("top layer, stateless, batch 0", stateless))
    if (folder / "elmo_token_embeddings.hdf5").is_file():
        words = (folder / "vocab_test.txt").read_text(encoding="utf-8").splitlines()
        with h5py.File(folder / "elmo_token_embeddings.hdf5", "r") as file:
            expected = file["embedding"][...]
        ids = tokenizer([[word] for word in words], is_split_into_words=True, return_tensors="pt")["input_ids"][:, 0]
        with torch.no_grad():
            rows.append(compare("token layer (vocab_test.txt)", [(model.token_encoder(ids).numpy(), expected)]))
    config = convert_config(read_options(folder / "options.json"))
    arrays = read_weights(folder / "lm_weights.hdf5", config)
    per_layer = [[] for _ in range(config.num_layers + 1)]
    for sentence in (s for group in sentences for s in group):
        inputs = tokenizer([sentence], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            layers = model(**inputs, output_hidden_states=True).hidden_states
        for index, reference in enumerate(reference_layers(arrays, config, words_to_char_ids(sentence, config))):
            per_layer[index].append((layers[index][0].numpy(), reference))
    for index, pairs in enumerate(per_layer):
        rows.append(compare(f"layer {index} vs float64 reference, stateless", pairs))
    return rows


def manylangs_report(folder: Path, converted: Path) -> list[tuple[str, float, bool]]:
    """Rows for the ELMoForManyLangs fixture: every layer against their Embedder's float64 outputs, in float64 and
    float32, for one batch and for batches carried statefully."""
    ids = json.loads((folder / "ids.json").read_text(encoding="utf-8"))
    expected = np.load(folder / "expected.npz")
    tokenizer, model = ElmoTokenizer.from_pretrained(converted), ElmoModel.from_pretrained(converted).eval()
    rows = []
    for dtype in (torch.float64, torch.float32):
        single, stateful, state = [], [], None
        batches = [("single", ids["sentences"], False)]
        batches += [(f"stateful_{index}", batch, True) for index, batch in enumerate(ids["stateful_batches"])]
        for prefix, sentences, carry in batches:
            inputs = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
            with torch.no_grad():
                outputs = model.to(dtype)(**inputs, output_hidden_states=True, lstm_state=state if carry else None,
                                          output_lstm_state=carry)
            state = outputs.lstm_state if carry else state
            layers = torch.stack(outputs.hidden_states).double().numpy()
            for row, sentence in enumerate(sentences):
                pair = (layers[:, row, : len(sentence)], expected[f"{prefix}_{row}"])
                (stateful if carry else single).append(pair)
        name = str(dtype).removeprefix("torch.")
        rows.append(compare(f"all layers, {name}, one batch of {len(ids['sentences'])}", single))
        rows.append(compare(f"all layers, {name}, stateful, {len(ids['stateful_batches'])} batches", stateful))
    return rows


def compare(what: str, pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[str, float, bool]:
    difference = max(float(np.abs(actual - expected).max()) for actual, expected in pairs)
    close = all(np.allclose(actual, expected, atol=1e-6, rtol=1e-5) for actual, expected in pairs)
    return what, difference, close


def main(fixtures: Path = Path("tests") / "fixtures") -> None:
    """Prints the table for the fixture sets in `fixtures`."""
    disable_progress_bar()
    tokenizer = ElmoTokenizer()
    print("| fixture set | comparison | max abs diff | allclose(atol=1e-6, rtol=1e-5) |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for name in ("allennlp", "bilm-tf"):
            folder = fixtures / name
            output = convert_checkpoint(folder / "options.json", folder / "lm_weights.hdf5", Path(scratch) / name)
            model = ElmoModel.from_pretrained(output).eval()
            for what, difference, close in report(folder, model, tokenizer):
                print(f"| {name} | {what} | {difference:.2e} | {close} |")
        folder = fixtures / "manylangs"
        output = manylangs.convert_manylangs(folder / "model", Path(scratch) / "manylangs", language="zh")
        for what, difference, close in manylangs_report(folder, output):
            print(f"| manylangs (ELMoForManyLangs) | {what} | {difference:.2e} | {close} |")


if __name__ == "__main__":
    main(*map(Path, sys.argv[1:2]))
