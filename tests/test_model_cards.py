"""elmo_hf/conversion/model_cards/: every released checkpoint's card, its Hub metadata, its facts, how elmo-hf convert
writes it, and README.md's list of the checkpoints."""

import math
import re
from pathlib import Path

import pytest
from conftest import FIXTURES
from huggingface_hub import ModelCard

from elmo_hf import ElmoConfig, packaged_models
from elmo_hf.conversion.checkpoint import ConversionError, convert_config, original_shapes, read_options
from elmo_hf.cli.convert import main
from elmo_hf.conversion.convert import convert_checkpoint
from elmo_hf.conversion.hub import MODEL_CARDS, MODEL_CARDS_DIR, PLACEHOLDER_REPO_ID, architecture_name, model_card

OPTIONS = FIXTURES / "allennlp" / "options.json"
WEIGHTS = FIXTURES / "allennlp" / "lm_weights.hdf5"


def released_config(name: str) -> ElmoConfig:
    """The config of a released architecture, from its name (all share the character CNN of the defaults)."""
    layers, lstm_dim, projection_dim, highway = re.fullmatch(r"(\d+)x(\d+)_(\d+)_2048cnn_(\d+)xhighway", name).groups()
    return ElmoConfig(num_layers=int(layers), lstm_dim=int(lstm_dim), projection_dim=int(projection_dim),
                      num_highway_layers=int(highway))


def test_one_card_per_released_checkpoint_and_packaged_model():
    assert sorted(path.stem for path in MODEL_CARDS_DIR.glob("*.md")) == sorted([*MODEL_CARDS, *packaged_models()])
    assert sorted(MODEL_CARDS) == ["medium", "original", "original-5.5B", "small"]


@pytest.mark.parametrize("name", sorted(MODEL_CARDS))
def test_card_metadata(name):
    card = ModelCard(model_card(released_config(MODEL_CARDS[name]), name, "me/elmo", "weights.hdf5"))
    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "feature-extraction"
    assert data.license == "apache-2.0" and data.language == ["en"]
    assert data.datasets == (["wikimedia/wikipedia"] if name == "original-5.5B" else ["billion-word-benchmark/lm1b"])
    assert {"elmo", "custom_code", "character-level"} <= set(data.tags)


@pytest.mark.parametrize("name", sorted(MODEL_CARDS))
def test_card_facts_match_the_architecture(name):
    config = released_config(MODEL_CARDS[name])
    text = model_card(config, name, "me/elmo", "weights.hdf5")
    parameters = sum(math.prod(shape) for shape in original_shapes(config).values())
    assert f"({parameters:,})" in text
    assert f"each {config.hidden_size:,} wide" in text
    assert f"(batch_size, words, {config.hidden_size})" in text
    assert f"{config.lstm_dim:,} cells projected to {config.projection_dim}" in text
    assert f"--model-card {name}" in text and f"elmo_{MODEL_CARDS[name]}" in text
    assert 'from_pretrained("me/elmo", trust_remote_code=True)' in text and "$" not in text
    assert "allennlp.org/elmo" in text and "allenai/allennlp#1462" in text
    assert "@inproceedings{Peters:2018," in text


def test_published_numbers():
    """SRL and parsing F1 from the AllenNLP ELMo page; perplexity 39.7 from the paper, for the original model only."""
    f1 = {"small": ("83.62", "93.12"), "medium": ("84.04", "93.60"), "original": ("84.63", "93.85"),
          "original-5.5B": ("84.93", "94.01")}
    for name, (srl, parsing) in f1.items():
        text = (MODEL_CARDS_DIR / f"{name}.md").read_text()
        assert f"semantic role labelling F1 {srl}, constituency parsing F1 {parsing}" in text
        assert bool(re.search(r"perplexities is\s+39\.7 \(paper §3\.4", text)) == (name == "original")
        assert ("We found no published perplexity for this checkpoint" in text) == (name != "original")
    assert "Wikipedia (1.9 B)" in (MODEL_CARDS_DIR / "original-5.5B.md").read_text()


@pytest.mark.parametrize("name", sorted(MODEL_CARDS))
def test_card_feature_extraction_example_runs(name, converted):
    """The card's first Python example, run against a converted folder in place of the Hub repository."""
    text = model_card(released_config(MODEL_CARDS[name]), name, str(converted["allennlp"]), "weights.hdf5")
    example = re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)
    namespace = {}
    exec(example, namespace)  # noqa: S102 (the card's own example is what is tested)
    assert namespace["top_layer"].shape == (2, 7, 32)
    assert len(namespace["layers"]) == 3


class WordTaggingDataset(list):
    """The part of a `datasets.Dataset` with `tokens` / `ner_tags` columns that the card's Trainer example uses."""

    column_names = ("tokens", "ner_tags")

    def map(self, function, remove_columns):
        return [function(example) for example in self]


@pytest.mark.parametrize("name", sorted(MODEL_CARDS))
def test_card_trainer_example_runs(name, converted, tmp_path):
    """The card's token-classification example trains for a step on a converted folder (without pushing)."""
    text = model_card(released_config(MODEL_CARDS[name]), name, str(converted["allennlp"]), "weights.hdf5")
    example = re.findall(r"```python\n(.*?)```", text, re.DOTALL)[1]
    arguments = f'TrainingArguments("{tmp_path}", max_steps=1, report_to=[], use_cpu=True, save_strategy="no")'
    example = example.replace('TrainingArguments("elmo-ner")', arguments).replace("trainer.push_to_hub()\n", "")
    train = WordTaggingDataset([{"tokens": ["Ada", "Lovelace", "wrote", "."], "ner_tags": [1, 2, 0, 0]}] * 2)
    namespace = {"dataset": {"train": train}}
    exec(example, namespace)  # noqa: S102 (the card's own example is what is tested)
    assert namespace["trainer"].state.global_step == 1
    assert namespace["model"].config.id2label[8] == "I-MISC"


def test_generic_card(converted):
    """Without --push-to-hub the usage code loads a neutral placeholder, never the local --output path."""
    text = (converted["allennlp"] / "README.md").read_text()
    data = ModelCard(text).data
    assert data.library_name == "transformers" and data.license == "apache-2.0" and data.language == "en"
    assert "elmo" in data.tags
    assert "# ELMo biLM (2x64_16_124cnn_2xhighway)" in text
    assert f'from_pretrained("{PLACEHOLDER_REPO_ID}", trust_remote_code=True)' in text
    assert str(converted["allennlp"]) not in text and converted["allennlp"].name not in text


def test_named_card_without_push_uses_the_placeholder(tmp_path, monkeypatch):
    monkeypatch.setitem(MODEL_CARDS, "small", architecture_name(convert_config(read_options(OPTIONS))))
    folder = convert_checkpoint(OPTIONS, WEIGHTS, tmp_path / "elmo-small", model_card="small")
    readme = (folder / "README.md").read_text()
    assert f'from_pretrained("{PLACEHOLDER_REPO_ID}", trust_remote_code=True)' in readme
    assert str(tmp_path) not in readme


def test_convert_writes_the_named_card(tmp_path, monkeypatch):
    fixture_architecture = architecture_name(convert_config(read_options(OPTIONS)))
    monkeypatch.setitem(MODEL_CARDS, "small", fixture_architecture)
    folder = convert_checkpoint(OPTIONS, WEIGHTS, tmp_path / "out", model_card="small", repo_id="me/elmo-small")
    readme = (folder / "README.md").read_text()
    assert readme.startswith("---\nlibrary_name: transformers") and "# ELMo small" in readme
    assert 'from_pretrained("me/elmo-small", trust_remote_code=True)' in readme


def test_unknown_card(tmp_path, capsys):
    output = tmp_path / "out"
    assert main(["--options", str(OPTIONS), "--weights", str(WEIGHTS), "--output", str(output),
                 "--model-card", "large"]) == 2
    error = capsys.readouterr().err
    assert "unknown model card 'large'; the cards are: small, medium, original, original-5.5B." in error
    assert not output.exists()


def test_card_for_another_architecture(tmp_path):
    with pytest.raises(ConversionError, match=r"model card 'small' describes a 2x1024_128_2048cnn_1xhighway "
                                              r"checkpoint, but the options describe 2x64_16_124cnn_2xhighway"):
        convert_checkpoint(OPTIONS, WEIGHTS, tmp_path / "out", model_card="small")
    assert not (tmp_path / "out").exists()


README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(MODEL_CARDS))
def test_readme_gives_each_checkpoint_its_addresses_and_command(name):
    """README.md lists the download addresses and the convert command of each card, exactly as the card has them."""
    card = (MODEL_CARDS_DIR / f"{name}.md").read_text()
    options, weights = (re.search(rf"^- {kind}: <(https://\S+)>$", card, re.MULTILINE).group(1)
                        for kind in ("options", "weights"))
    assert options.endswith(f"elmo_{MODEL_CARDS[name]}{'_5.5B' if name == 'original-5.5B' else ''}_options.json")
    assert weights == options.replace("_options.json", "_weights.hdf5")
    commands = re.search(r"```bash\n(curl -LO .*?)```", card, re.DOTALL).group(1)
    assert commands.splitlines()[:2] == [f"curl -LO {options}", f"curl -LO {weights}"]
    assert f"elmo-hf convert --options {options.rsplit('/', 1)[1]} --weights {weights.rsplit('/', 1)[1]}" in commands
    assert f"--output elmo-{name} --model-card {name}\n" in commands
    assert f"# {name}\n{commands}" in README
    assert f"| `{name}` | {MODEL_CARDS[name]} |" in README
