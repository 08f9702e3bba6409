"""Training inputs a transformers user may get wrong, from a hostile sweep of the training surface: the pretraining
collator refuses examples and settings it would otherwise misread (a string of words read as one-letter words) or
fail on deep inside; the token-classification example names the line or split it cannot use."""

import importlib.util
import sys
from pathlib import Path

import pytest

from elmo_hf.corpus.data import DataCollatorForElmoPreTraining, ElmoWordVocabulary

VOCABULARY = ElmoWordVocabulary(["</S>", "<S>", "<UNK>", "the", "cat", "sat"])


def test_the_pretraining_collator_refuses_a_string_of_words_that_it_would_read_letter_by_letter():
    """`{"words": "the cat sat"}` (a column of strings named "words") was 11 one-letter words, every target <UNK>."""
    collator = DataCollatorForElmoPreTraining(VOCABULARY)
    with pytest.raises(TypeError, match=r"'words' of pretraining example 1 must be a list of words, got str.*'text'"):
        collator([{"words": ["the", "cat"]}, {"words": "the cat sat"}])
    assert collator([{"text": "the cat sat"}])["labels"].tolist() == [[3, 4, 5, 0]]


@pytest.mark.parametrize("text", [None, ["the", "cat"], 3])
def test_the_pretraining_collator_refuses_text_that_is_not_a_str(text):
    with pytest.raises(TypeError, match=r"'text' of pretraining example 0 must be a str, got .*'words'"):
        DataCollatorForElmoPreTraining(VOCABULARY)([{"text": text}])


@pytest.mark.parametrize("feature", [{}, {"sentence": "the cat"}, {"labels": [1, 2]}, "the cat", None])
def test_the_pretraining_collator_names_the_columns_it_needs_and_remove_unused_columns(feature):
    """Trainer drops a `datasets` column that the model's forward does not name ("text", "words") unless
    `remove_unused_columns=False`: the collator then met examples without them and raised KeyError('text')."""
    with pytest.raises(ValueError, match=r"example 0 has neither 'words' .* nor 'text'.*remove_unused_columns=False"):
        DataCollatorForElmoPreTraining(VOCABULARY)([feature])


@pytest.mark.parametrize("max_words", [2.5, "3", True, None, 0])
def test_the_pretraining_collator_refuses_a_max_words_that_is_not_a_positive_integer(max_words):
    """A float or a str failed inside `range` or a comparison, and True split every sentence into one-word rows."""
    with pytest.raises(ValueError, match=f"max_words must be a positive integer, got {max_words!r}"):
        DataCollatorForElmoPreTraining(VOCABULARY, max_words=max_words)


def test_the_pretraining_collator_refuses_a_vocabulary_that_is_a_list_of_words():
    """A plain list of words failed at the first batch, deep in the collator ('list' has no attribute 'word_id')."""
    with pytest.raises(TypeError, match=r"vocabulary must be an ElmoWordVocabulary .*ElmoWordVocabulary\(words\)"):
        DataCollatorForElmoPreTraining(["</S>", "<S>", "<UNK>", "the"])


def example_module():
    """examples/train_token_classification.py as a module (the examples are not a package)."""
    path = Path(__file__).resolve().parent.parent / "examples" / "train_token_classification.py"
    spec = importlib.util.spec_from_file_location("train_token_classification", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_names_the_brown_line_with_a_word_without_its_tag(tmp_path):
    """A word without `/tag` was a ValueError traceback from a list comprehension (not enough values to unpack)."""
    (tmp_path / "ca01").write_text("The/at dog/nn ./.\nThe/at dog barked/vbd\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"ca01, line 2: every word must be word/tag, got 'The/at dog barked/vbd'"):
        example_module().read_brown(tmp_path)


def test_the_example_names_the_conll_line_that_is_not_token_tab_tag(tmp_path):
    path = tmp_path / "train.conll"
    path.write_text("w1\tO\nw2\tB-loc\n\nw3 O\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"train.conll, line 4: expected token<TAB>tag, got 'w3 O'"):
        example_module().read_conll(path)


@pytest.mark.parametrize(
    "eval_splits, message",
    [
        (["dev", "test"], "the dev split holds no sentences; give more data, or leave it out: --eval-splits test"),
        (["dev"], "the dev split holds no sentences; give more data$"),
    ],
)
def test_the_example_refuses_an_empty_split_before_it_trains(tmp_path, monkeypatch, eval_splits, message):
    """A Brown folder without files ending in 9 (dev) gave an IndexError from Trainer's length-grouped sampler, after
    the conversion and the training."""
    (tmp_path / "ca01").write_text("The/at dog/nn ./.\n", encoding="utf-8")
    (tmp_path / "ca10").write_text("A/at cat/nn ./.\n", encoding="utf-8")
    arguments = ["brown", str(tmp_path), "--output-dir", str(tmp_path / "out"), "--eval-splits", *eval_splits]
    monkeypatch.setattr(sys, "argv", ["train_token_classification.py", *arguments])
    with pytest.raises(SystemExit, match=message):
        example_module().main()
    assert not (tmp_path / "out").exists()
