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
"""ELMo for Hugging Face transformers; importing the package registers it with the Auto classes."""

import importlib
import logging
from contextlib import contextmanager

from elmo_hf_cli import __version__  # one version: the console command's module holds it, pyproject reads it there


@contextmanager
def _quiet_dependency_imports():
    """Silences, while the package imports transformers' model classes, what optional dependencies log at their own
    import and cannot act on: torchao's failed loads of native kernels for other Pythons and GPUs, and torch's
    deprecation notes on the pytree registrations torchao makes. The loggers' levels are restored afterwards."""
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


with _quiet_dependency_imports():
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForPreTraining,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    from .configuration_elmo import ElmoConfig
    from .modeling_elmo import (
        ElmoForPreTraining,
        ElmoForPreTrainingOutput,
        ElmoForSequenceClassification,
        ElmoForTokenClassification,
        ElmoModel,
        ElmoModelOutput,
        ElmoPreTrainedModel,
        ElmoScalarMix,
    )
    from .packaged_elmo import DEFAULT_MODEL, packaged_model_path, packaged_models, resolve_model_name
    from .tokenization_elmo import ElmoTokenizer

AUTO_CLASSES = {
    AutoModel: ElmoModel,
    AutoModelForTokenClassification: ElmoForTokenClassification,
    AutoModelForSequenceClassification: ElmoForSequenceClassification,
    AutoModelForPreTraining: ElmoForPreTraining,
}

AutoConfig.register(ElmoConfig.model_type, ElmoConfig, exist_ok=True)
AutoTokenizer.register(ElmoConfig, tokenizer_class=ElmoTokenizer, exist_ok=True)
# Saved folders carry the model files and name them in `auto_map`, so they also load with `trust_remote_code=True`.
ElmoConfig.register_for_auto_class()
ElmoTokenizer.register_for_auto_class()
for auto_class, model_class in AUTO_CLASSES.items():
    auto_class.register(ElmoConfig, model_class, exist_ok=True)
    model_class.register_for_auto_class(auto_class.__name__)


# The library under the commands, imported on first use (Trainer, h5py and the exporters are not needed to run a
# model): name -> its module.
LIBRARY_FUNCTIONS = {
    "embed_corpus": "corpus.embed",
    "merge_shards": "corpus.embed",
    "pretrain": "corpus.pretraining",
    "corpus_perplexity": "corpus.perplexity",
    "convert_checkpoint": "conversion.convert",
    "convert_manylangs": "conversion.manylangs",
    "export_original": "conversion.export",
    "export_onnx": "conversion.onnx",
}


def __getattr__(name: str):
    """The pipelines (`ElmoTokenClassificationPipeline`, `ElmoFeatureExtractionPipeline`) and the library's functions
    (`LIBRARY_FUNCTIONS`) are imported on first use: importing transformers.pipelines, Trainer or the exporters takes
    seconds."""
    if name in ("ElmoTokenClassificationPipeline", "ElmoFeatureExtractionPipeline"):
        return getattr(importlib.import_module(".pipeline_elmo", __name__), name)
    if name in LIBRARY_FUNCTIONS:
        return getattr(importlib.import_module(f".{LIBRARY_FUNCTIONS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_MODEL",
    "ElmoConfig",
    "ElmoFeatureExtractionPipeline",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoScalarMix",
    "ElmoTokenClassificationPipeline",
    "ElmoTokenizer",
    "convert_checkpoint",
    "convert_manylangs",
    "corpus_perplexity",
    "embed_corpus",
    "export_onnx",
    "export_original",
    "merge_shards",
    "packaged_model_path",
    "packaged_models",
    "pretrain",
    "resolve_model_name",
]
