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
"""Pipelines for ELMo: token classification (ELMo's `input_ids` hold one row of character ids per word) and feature
extraction that keeps pre-split words together.

Imports only transformers, so that it ships as remote code in every saved ELMo folder (`config.custom_pipelines`).
"""

import types
from typing import Any

from transformers.pipelines.base import Dataset
from transformers.pipelines.feature_extraction import FeatureExtractionPipeline
from transformers.pipelines.token_classification import AggregationStrategy, TokenClassificationPipeline

from .reference_elmo import word_mask


def _check_inputs(inputs: Any, pipeline_name: str) -> Any:
    """`inputs` as the base `Pipeline` reads them: a tuple becomes a list (the base class would take a tuple of texts
    for one input). Raise a `TypeError` for what is neither a str, a list or tuple, a generator nor a dataset (None,
    numbers, bytes, dicts, arrays), instead of a misleading error from inside."""
    if isinstance(inputs, tuple):
        return list(inputs)
    if isinstance(inputs, (str, list, types.GeneratorType)) or (Dataset is not None and isinstance(inputs, Dataset)):
        return inputs
    hint = " Decode bytes to str first." if isinstance(inputs, (bytes, bytearray, memoryview)) else ""
    raise TypeError(
        f"{pipeline_name} expects a str, a list of str, or with is_split_into_words=True a list of words (or a list "
        f"of those), also as a generator or dataset; got {type(inputs).__name__}.{hint}"
    )


def _check_text(text: Any) -> None:
    """Raise unless `text` is one text (a str), naming `is_split_into_words=True` for a list of words."""
    if isinstance(text, str):
        return
    hint = "; for a sentence given as a list of words, pass is_split_into_words=True"
    raise ValueError(f"Each input must be a str, got {type(text).__name__}{hint if isinstance(text, list) else ''}.")


def _check_words(sentence: Any) -> None:
    """Raise unless `sentence` is one sentence's words, a list (or tuple) of str, as `is_split_into_words=True` takes
    it; the tokenizer would read a list of lists as a batch of sentences instead."""
    if isinstance(sentence, (list, tuple)):
        kinds = sorted({type(word).__name__ for word in sentence if not isinstance(word, str)})
        if not kinds:
            return
        got = f"a {type(sentence).__name__} holding {', '.join(kinds)}"
    else:
        got = type(sentence).__name__
    raise ValueError(
        f"With is_split_into_words=True, each input must be a list of words (str), got {got}; for several sentences "
        "pass a list of such lists."
    )


def _check_ignore_labels(ignore_labels: Any) -> None:
    """Raise unless `ignore_labels` is None or a list (tuple, set) of str: the stock pipeline tests each label with
    `in`, so a str would ignore the labels that are substrings of it; other values fail deep inside."""
    if ignore_labels is None:
        return
    if isinstance(ignore_labels, (list, tuple, set, frozenset)):
        kinds = sorted({type(label).__name__ for label in ignore_labels if not isinstance(label, str)})
        if not kinds:
            return
        got = f"a {type(ignore_labels).__name__} holding {', '.join(kinds)}"
    elif isinstance(ignore_labels, str):
        got = f"the str {ignore_labels!r}"
    else:
        got = type(ignore_labels).__name__
    raise TypeError(f"ignore_labels must be a list of labels, got {got}; pass a list of str, e.g. ['O'].")


def _check_label_names(id2label: dict, num_labels: int) -> None:
    """Raise unless `id2label` names each of the classifier's `num_labels` outputs (int keys 0 to num_labels - 1)
    with a str; the stock postprocess fails on a missing key (`KeyError` deep inside) or on a name that is no str."""
    unnamed = [index for index in range(num_labels) if not isinstance(id2label.get(index), str)]
    if unnamed:
        raise ValueError(
            f"model.config.id2label names no label (a str under an int key) for the classifier's output(s) {unnamed} "
            f"of 0..{num_labels - 1}: id2label={id2label}. Set model.config.id2label to a dict of all "
            f"{num_labels} names, e.g. {{0: 'O', 1: 'B-PER', ...}}."
        )


class ElmoTokenClassificationPipeline(TokenClassificationPipeline):
    """
    [`TokenClassificationPipeline`] for ELMo. The stock pipeline reads one integer id per token, but ELMo's
    `input_ids` are `(batch_size, sequence_length, max_characters_per_token)`: one row per word. Every token is a whole
    word, so all aggregation strategies apply and agree with `"simple"`; `word`, `start` and `end` come from the
    tokenizer's word offsets, and `word` is always `text[start:end]`. Text without words (`""`) gives no entities.

    Saved ELMo folders name this class in `config.custom_pipelines`, so
    `pipeline("token-classification", model=folder, trust_remote_code=True)` builds it; for a model object pass
    `pipeline_class=ElmoTokenClassificationPipeline`, or construct it directly with `model=` and `tokenizer=`.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if getattr(self.tokenizer, "max_characters_per_token", None) is None:
            raise ValueError(
                f"ElmoTokenClassificationPipeline needs an ElmoTokenizer, got {type(self.tokenizer).__name__}; use "
                "the stock TokenClassificationPipeline for other models."
            )
        id2label = self.model.config.id2label
        if all(id2label.get(index) == f"LABEL_{index}" for index in range(len(id2label))):
            raise ValueError(
                f"The model's config has no label names (id2label={id2label}, the placeholders of a config without "
                "labels), so its classifier was not fine-tuned with labels, e.g. it is a base biLM checkpoint. "
                "Fine-tune ElmoForTokenClassification with config.id2label / label2id set to your tag names, or set "
                "model.config.id2label before building the pipeline."
            )

    def _sanitize_parameters(
        self,
        ignore_labels: list[str] | None = None,
        aggregation_strategy: AggregationStrategy | str | None = None,
        offset_mapping: list[tuple[int, int]] | None = None,
        is_split_into_words: bool = False,
        stride: int | None = None,
        delimiter: str | None = None,
    ):
        if stride is not None:
            raise ValueError("`stride` is not supported: ELMo reads whole sentences, so no text is split into chunks.")
        if offset_mapping is not None:
            raise ValueError("`offset_mapping` is not needed: the ELMo tokenizer returns the words' offsets itself.")
        _check_ignore_labels(ignore_labels)
        if delimiter is not None and not isinstance(delimiter, str):
            raise TypeError(f"delimiter must be a str (what joins the words), got {type(delimiter).__name__}.")
        preprocess_params, forward_params, postprocess_params = super()._sanitize_parameters(
            ignore_labels, None, None, is_split_into_words, None, delimiter
        )
        if delimiter is not None:  # the stock pipeline keeps it only together with is_split_into_words=True
            preprocess_params["delimiter"] = delimiter
        # The stock check rejects "first"/"average"/"max" for slow tokenizers because of sub-words; ELMo has none.
        if aggregation_strategy is not None:
            names = [strategy.value for strategy in AggregationStrategy]
            if isinstance(aggregation_strategy, str):
                if aggregation_strategy.lower() not in names:
                    raise ValueError(f"aggregation_strategy must be one of {names}, got {aggregation_strategy!r}.")
                aggregation_strategy = AggregationStrategy(aggregation_strategy.lower())
            elif not isinstance(aggregation_strategy, AggregationStrategy):
                raise TypeError(
                    f"aggregation_strategy must be one of {names} (a str or AggregationStrategy), got "
                    f"{type(aggregation_strategy).__name__}."
                )
            postprocess_params["aggregation_strategy"] = aggregation_strategy
        return preprocess_params, forward_params, postprocess_params

    def __call__(self, inputs: Any, **kwargs: Any):
        """Tag one text, a list (or tuple) of texts, or with `is_split_into_words=True` one or several lists of words;
        a generator or dataset of those gives its results as they come.

        `is_split_into_words` and `delimiter` hold whether given here or when the pipeline was built (the stock
        `__call__` resets both to their defaults), and a generator of word lists is tagged whole (the stock one uses it
        up looking for lists, and tags nothing)."""
        inputs = _check_inputs(inputs, type(self).__name__)
        built = self._preprocess_params
        split = bool(kwargs.get("is_split_into_words", built.get("is_split_into_words")))
        delimiter = built.get("delimiter") if kwargs.get("delimiter") is None else kwargs["delimiter"]
        kwargs = {**kwargs, "is_split_into_words": split, "delimiter": delimiter}
        if split and isinstance(inputs, list) and not (inputs and all(isinstance(item, list) for item in inputs)):
            inputs = [inputs]  # one sentence's words (or none): a list of one result, as from the stock pipeline
        elif isinstance(inputs, list) and not inputs:
            raise ValueError("At least one input is required: a str, a list of str, or a list of word lists.")
        # The checks and conversions of the stock `__call__` are done; the base `Pipeline.__call__` runs the rest.
        return super(TokenClassificationPipeline, self).__call__(inputs, **kwargs)

    def preprocess(self, sentence: str | list[str], **preprocess_params):
        if preprocess_params["is_split_into_words"]:
            _check_words(sentence)
            delimiter = preprocess_params["delimiter"]
            inputs = self.tokenizer(
                sentence,
                is_split_into_words=True,
                return_tensors="pt",
                return_special_tokens_mask=True,
                return_offsets_mapping=True,
            )
            # The tokenizer's offsets are in " ".join(words); move them into delimiter.join(words).
            shift = [(index or 0) * (len(delimiter) - 1) for index in inputs.word_ids()]
            inputs["offset_mapping"] += inputs["offset_mapping"].new_tensor(shift)[None, :, None]
            sentence = delimiter.join(sentence)
        else:
            _check_text(sentence)
            inputs = self.tokenizer(
                sentence, return_tensors="pt", return_special_tokens_mask=True, return_offsets_mapping=True
            )
        yield {**inputs, "sentence": sentence, "is_last": True}

    def gather_pre_entities(
        self,
        sentence: str,
        input_ids,
        scores,
        offset_mapping,
        special_tokens_mask,
        aggregation_strategy: AggregationStrategy,
        word_ids: list[int | None] | None = None,
        word_to_chars_map: list[tuple[int, int]] | None = None,
    ) -> list[dict]:
        """One pre-entity per word row (padding and `<S>`/`</S>` rows skipped), its word cut from `sentence`."""
        pre_entities = []
        for index, token_scores in enumerate(scores):
            if special_tokens_mask[index]:
                continue
            start, end = (int(value) for value in offset_mapping[index])
            pre_entities.append(
                {
                    "word": sentence[start:end],
                    "scores": token_scores,
                    "start": start,
                    "end": end,
                    "index": index,
                    "is_subword": False,
                }
            )
        return pre_entities

    def postprocess(
        self,
        all_outputs: list[dict],
        aggregation_strategy: AggregationStrategy = AggregationStrategy.NONE,
        ignore_labels: list[str] | None = None,
    ) -> list[dict]:
        """The stock entities, after checking the label names (read now: they may change after the pipeline is
        built), with each `word` cut from the text."""
        _check_label_names(self.model.config.id2label, all_outputs[0]["logits"].shape[-1])
        entities = super().postprocess(all_outputs, aggregation_strategy, ignore_labels)
        # Grouped words are joined by the tokenizer with spaces; the text itself is exact.
        sentence = all_outputs[0]["sentence"]
        for entity in entities:
            entity["word"] = sentence[entity["start"] : entity["end"]]
        return entities


class ElmoFeatureExtractionPipeline(FeatureExtractionPipeline):
    """
    [`FeatureExtractionPipeline`] that takes pre-split words. The stock pipeline ignores `is_split_into_words`: a
    list of words becomes a batch of one-word sentences, each embedded without its context. Here, with
    `is_split_into_words=True`, a list of words is one sentence (one result, as for a str) and a list of such lists
    several; without it each input must be a str, and a list of words is refused with the flag to pass. Each sentence
    gets the rows of its words only, also when `batch_size > 1` pads it to a longer one (the stock pipeline keeps those
    padding rows).

    Build it with `pipeline("feature-extraction", model=..., pipeline_class=ElmoFeatureExtractionPipeline)` or
    directly with `model=` and `tokenizer=`.
    """

    def _sanitize_parameters(
        self,
        truncation: bool | None = None,
        tokenize_kwargs: dict | None = None,
        return_tensors: bool | None = None,
        is_split_into_words: bool | None = None,
        **kwargs,
    ):
        preprocess_params, forward_params, postprocess_params = super()._sanitize_parameters(
            truncation, tokenize_kwargs, return_tensors, **kwargs
        )
        if is_split_into_words is not None:
            preprocess_params = {**preprocess_params, "is_split_into_words": is_split_into_words}
        return preprocess_params, forward_params, postprocess_params

    def __call__(self, inputs: Any, **kwargs: Any):
        """Embed one text, a list (or tuple) of texts, or with `is_split_into_words=True` one list of words or a list
        of those: `[1][words][hidden_size]` per sentence."""
        inputs = _check_inputs(inputs, type(self).__name__)
        split = {**self._preprocess_params, **self._sanitize_parameters(**kwargs)[0]}.get("is_split_into_words")
        if split and isinstance(inputs, list) and all(isinstance(word, str) for word in inputs):
            return super().__call__([inputs], **kwargs)[0]  # one sentence's words
        if isinstance(inputs, list) and not inputs:
            raise ValueError("At least one input is required: a str, a list of str, or a list of word lists.")
        return super().__call__(inputs, **kwargs)

    def preprocess(self, inputs: str | list[str], **tokenize_kwargs):
        if tokenize_kwargs.get("is_split_into_words"):
            _check_words(inputs)
        else:
            _check_text(inputs)
        return super().preprocess(inputs, **tokenize_kwargs)

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        """The model's first output (`last_hidden_state`) and its word rows (`word_mask`: the attention mask, or the
        rows with a character where the tokenizer was asked for no mask), for `postprocess`."""
        words = word_mask(model_inputs["input_ids"], model_inputs.get("attention_mask"))
        return {"features": super()._forward(model_inputs)[0], "words": words}

    def postprocess(self, model_outputs: dict[str, Any], return_tensors: bool = False):
        """One sentence's rows without the padding rows of its batch (`batch_size > 1`), so that a sentence gets the
        same `[1][words][hidden_size]` whatever it is batched with."""
        features = model_outputs["features"][:, model_outputs["words"][0]]
        return features if return_tensors else features.tolist()


__all__ = ["ElmoFeatureExtractionPipeline", "ElmoTokenClassificationPipeline"]
