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
"""The models shipped inside the package, loaded offline by name wherever a model is named; and the check of a folder
every `save_pretrained` (config, tokenizer, model) writes."""

import errno
import os
from pathlib import Path
from typing import Any

# Models shipped inside the package, one folder each under `models/`: every Elmo*.from_pretrained loads them offline
# by folder name. Where these files run as Hub remote code the folder does not exist and names pass through.
PACKAGED_MODELS_DIR = Path(__file__).resolve().parent / "models"
DEFAULT_MODEL = "elmo-en-mini"


def packaged_models() -> list[str]:
    """Names of the models shipped with the package."""
    return sorted(folder.parent.name for folder in PACKAGED_MODELS_DIR.glob("*/config.json"))


def packaged_model_path(name: str = DEFAULT_MODEL) -> str:
    """The folder of the packaged model `name`, for loaders that take only paths or Hub ids (the Auto classes)."""
    if name not in packaged_models():
        raise ValueError(f"no model named {name!r} ships with elmo-hf; the packaged models are {packaged_models()}")
    return str(PACKAGED_MODELS_DIR / name)


def resolve_model_name(name_or_path: Any) -> Any:
    """A packaged model's folder for its name (a `str` or a path-like such as `Path("elmo-en-mini")`, as the commands'
    functions take it), unless a local folder of that name exists, which transformers would load instead (a file of
    that name, which it would not, hides nothing); anything else unchanged."""
    name = os.fspath(name_or_path) if isinstance(name_or_path, os.PathLike) else name_or_path
    if isinstance(name, str) and not os.path.isdir(name) and name in packaged_models():
        return packaged_model_path(name)
    return name_or_path


def check_save_directory(save_directory: str | os.PathLike) -> None:
    """Raises `NotADirectoryError` where `save_directory` is a file: transformers logs an error and saves nothing
    for a model or tokenizer (the caller goes on as if saved), and raises a bare `AssertionError` for a config."""
    if os.path.isfile(save_directory):
        raise NotADirectoryError(
            errno.ENOTDIR,
            "save_pretrained writes a folder, but this is a file: choose another path or remove the file",
            os.fspath(save_directory),
        )


__all__ = [
    "DEFAULT_MODEL",
    "PACKAGED_MODELS_DIR",
    "check_save_directory",
    "packaged_model_path",
    "packaged_models",
    "resolve_model_name",
]
