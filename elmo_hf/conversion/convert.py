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
    convert_checkpoint("options.json", "weights.hdf5", "elmo-small", model_card="small")   (from Python)

The folder holds `config.json`, `model.safetensors` (float32), the tokenizer files and the model code, so that it
loads with `AutoModel.from_pretrained(folder)` after `import elmo_hf`, or with `trust_remote_code=True` without it.
Every dataset is checked (presence, shape, dtype, finite values that fit float32) before anything is converted, the
converted model is checked against the float64 reference (`reference.py`) on a sentence that uses every character
id, and the folder appears only when all of that succeeded: it is written into a staging folder beside `--output`,
`.NAME.elmo-hf-partial-PID-*`, then moved into place. A later conversion into the same parent folder removes the
staging folders of processes that no longer run. With `--push-to-hub` the finished folder is uploaded in one commit
(`hub.py`).
"""

import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np
import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError
from transformers import PreTrainedModel
from transformers.utils import logging

from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer
from elmo_hf.errors import ElmoInputError, ElmoRunError, config_error_message
from elmo_hf.packaged_elmo import packaged_model_path, packaged_models, resolve_model_name

from . import hub
from .checkpoint import ConversionError, convert_config, read_options, read_weights, to_state_dict
from .reference import every_character_sentence, reference_layers

logger = logging.get_logger(__name__)

# The self-check: the converted float32 model against the float64 reference, `numpy.allclose` per layer.
CHECK_ATOL, CHECK_RTOL = 1e-5, 1e-4
# Folders of a conversion in progress beside its output: the new folder being written ("partial") and, during an
# --overwrite, the previous output moved aside ("old"); PID is the converting process.
STAGING_NAME = re.compile(r"\.(?P<output>.+)\.elmo-hf-(?P<kind>partial|old)-(?P<pid>\d+)-[0-9a-f]+")
# What loading an unusable model folder raises: a config.json that is not JSON or holds a value the config refuses
# (a bad value or one of the wrong type), weights that safetensors cannot read.
UNREADABLE_FOLDER_ERRORS = (OSError, ValueError, StrictDataclassError, SafetensorError)


def model_from_checkpoint(arrays: dict[str, np.ndarray], config: ElmoConfig) -> ElmoModel:
    """An `ElmoModel` in eval mode holding the original datasets (`read_weights`) as float32 parameters."""
    model = ElmoModel(config)
    state = {key: torch.from_numpy(value.astype(np.float32)) for key, value in to_state_dict(arrays, config).items()}
    model.load_state_dict(state, strict=True)
    return model.eval()


def check_against_reference(model: ElmoModel, arrays: dict[str, np.ndarray]) -> list[float]:
    """Max abs difference per layer between `model` and the float64 reference on a sentence using every character id.

    Raises `ConversionError` if any layer of either is not finite, or if a layer is not within `CHECK_ATOL` +
    `CHECK_RTOL` of the reference.
    """
    char_ids = every_character_sentence(model.config)
    expected = reference_layers(arrays, model.config, char_ids)
    with torch.no_grad():
        actual = model(input_ids=torch.from_numpy(char_ids)[None], output_hidden_states=True).hidden_states
    differences = []
    for index, (ours, reference) in enumerate(zip(actual, expected)):
        ours = ours[0].double().numpy()
        if not (np.isfinite(ours).all() and np.isfinite(reference).all()):
            raise ConversionError(
                f"layer {index} is not finite (NaN or inf) on a sentence that uses every character id, although "
                "every weight is: the weights are too large for float32 arithmetic, so this checkpoint cannot be "
                "used as it is."
            )
        differences.append(float(np.abs(ours - reference).max()))
        if not np.allclose(ours, reference, atol=CHECK_ATOL, rtol=CHECK_RTOL):
            raise ConversionError(
                f"converted model differs from the reference computation in layer {index} (max abs diff "
                f"{differences[-1]:.3g}); the checkpoint layout is not the one this converter knows."
            )
    return differences


def check_output(output: str | os.PathLike, inputs: list[str | os.PathLike]) -> Path:
    """The absolute folder to write for `--output`; refuses one whose replacement could delete an input or the cwd.

    A symbolic link is followed (the folder is written where it points; a dangling link is refused). `--output` may
    not be an input, hold one (at any depth, symbolic links resolved) or hold the current directory; a new folder
    beside or inside the checkpoint's folder is fine.
    """
    output = Path(output)
    if output.is_symlink():
        if not output.exists():
            raise ConversionError(
                f"--output {output} is a symbolic link to {os.readlink(output)}, which does not exist; create that "
                "folder, remove the link, or give another path."
            )
        output = output.resolve()
    output = Path(os.path.abspath(output))
    real = output.resolve()
    for path in inputs:
        real_input = Path(path).resolve()
        if real == real_input or real in real_input.parents:
            raise ConversionError(
                f"--output {output} is or holds the input {path}: writing there would replace the checkpoint. Give a "
                "folder that does not hold the checkpoint's files (a new folder beside them or inside theirs is fine)."
            )
    cwd = Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise ConversionError(
            f"--output {output} is or holds the current directory, which cannot be replaced; give a new folder."
        )
    check_folder_path(output, ConversionError)
    return output


def check_output_file(
    output: Path, inputs: Iterable[str | os.PathLike], error: type[ElmoInputError], name: str = "OUTPUT"
) -> None:
    """Refuses (`error`) an output file whose writing would replace what is not a file of results: an existing path
    that is not a regular file (a device such as /dev/null, a FIFO, a folder: the finished file is renamed over it),
    one of `inputs` (by any name: a symbolic or hard link), or an existing file inside an input folder (a model
    folder's own files)."""
    exists = output.exists()
    if exists and not output.is_file():
        kind = "a folder" if output.is_dir() else "not a regular file (a device, a pipe or a socket)"
        raise error(f"{name} {output} is {kind}, which writing would replace; give the path of a file.")
    real = output.resolve()
    for path in map(Path, inputs):
        real_input = path.resolve()
        if real == real_input or exists and path.exists() and os.path.samefile(output, path):  # hard links
            raise error(f"{name} {output} is the input file {path}; give another path.")
        if exists and real_input.is_dir() and real_input in real.parents:
            raise error(f"{name} {output} is a file of {path}, which writing would replace; give another path.")


def check_folder_path(folder: Path, error: type[ElmoInputError]) -> None:
    """Raises `error` if `folder` or the nearest of its parents that exists is a file, not a folder."""
    existing = next(path for path in (folder, *folder.parents) if path.exists() or path.is_symlink())
    if not existing.is_dir():
        where = "is a file" if existing == folder else f"is inside {existing}, which is a file"
        raise error(f"--output {folder} {where}; give a folder path.")


def model_folder(model: str | os.PathLike, error: type[ElmoInputError]) -> Path:
    """The folder of `--model`: a folder holding a `config.json`, or the name of a model packaged with elmo-hf
    (resolved offline); raises `error` for anything else, saying so where a local folder hides a packaged name."""
    name = os.fspath(model)
    folder = Path(resolve_model_name(name))
    if (folder / "config.json").is_file():
        return folder
    if name in packaged_models():  # a local folder of that name, which transformers would load too
        raise error(
            f"--model {model} is the folder {folder.resolve()} here, which holds no config.json and hides the model "
            f"packaged with elmo-hf under that name; rename that folder, or give {packaged_model_path(name)}."
        )
    raise error(
        f"--model {model} is neither a folder holding a config.json nor the name of a model packaged with elmo-hf "
        f"({', '.join(packaged_models())}); give a folder written by `elmo-hf convert` or save_pretrained."
    )


def check_config_file(folder: Path, error: type[ElmoInputError]) -> None:
    """Raises `error` where `folder` holds a `config.json` that is not a JSON object (transformers would fail on it
    with an AttributeError or TypeError deep in its loading)."""
    path = folder / "config.json"
    if not path.is_file():
        return
    try:
        config = json.loads(path.read_bytes())
    except (OSError, ValueError) as failure:
        raise error(f"{path} cannot be read as JSON ({failure}); restore the model's config.json.") from None
    if not isinstance(config, dict):
        raise error(f"{path} holds a JSON {type(config).__name__}, not an object; restore the model's config.json.")


def read_config(folder: Path, error: type[ElmoInputError], **kwargs) -> ElmoConfig:
    """The `ElmoConfig` of `folder` (`kwargs` override its fields), refused (`error`) where its config.json is not a
    JSON object, cannot be read, or describes no valid architecture."""
    check_config_file(folder, error)
    try:
        return ElmoConfig.from_pretrained(folder, **kwargs)
    except UNREADABLE_FOLDER_ERRORS as failure:
        raise error(f"--model {folder} cannot be loaded ({unreadable_reason(failure)}).") from None


def unreadable_reason(failure: Exception) -> str:
    """One of `UNREADABLE_FOLDER_ERRORS`, said on one line."""
    return " ".join(config_error_message(failure).split())


def load_model_weights(
    model_class: type[PreTrainedModel],
    path: str | os.PathLike,
    error: type[ElmoInputError],
    hint: str,
    new_layers: tuple[str, ...] = (),
    **kwargs,
) -> PreTrainedModel:
    """`model_class.from_pretrained(path, **kwargs)`, refused (`error`, ending with `hint`) unless the folder's weights
    are the ones its config describes: transformers starts a parameter the weights file lacks, or holds in another
    shape, at random (a head's task layers too, `new_task_layers`), and drops a tensor of the model's own modules that
    the config has no place for (a config.json that does not match the weights), with a warning a command's user may
    never see. Tensors outside the model's modules (a head's, loaded into its biLM) are left out as transformers
    leaves them, and parameters under `new_layers` (name prefixes: a softmax made anew for another vocabulary) may
    start at random. A folder whose files cannot be read is refused too."""
    folder = Path(path)
    check_config_file(folder, error)
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # the refusals below say what transformers' load report would
    try:
        model, loading = model_class.from_pretrained(
            path, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
        )
    except UNREADABLE_FOLDER_ERRORS as failure:
        raise error(f"--model {path} cannot be loaded ({unreadable_reason(failure)}); {hint}.") from None
    finally:
        logging.set_verbosity(verbosity)
    modules = {name.split(".")[0] for name in model.state_dict()}
    prefix = f"{model.base_model_prefix}."
    foreign = sorted(
        key for key in loading["unexpected_keys"] if key.removeprefix(prefix).split(".")[0] in modules
    )
    new_task_layers = [f"{layer}.*" for layer in getattr(model, "new_task_layers", [])]  # a head's, left random
    missing = sorted(key for key in loading["missing_keys"] if not key.startswith(new_layers)) + new_task_layers
    mismatched = sorted(key for key, *_ in loading["mismatched_keys"] if not key.startswith(new_layers))
    problems = {
        "lack {}": missing,
        "hold {} in another shape than its config.json says": mismatched,
        "hold {}, which its config.json has no place for": foreign,
    }
    for template, keys in problems.items():
        if keys:
            shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
            raise error(f"--model {path}: its weights {template.format(shown)}; {hint}.")
    return model


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (this one included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def clean_leftovers(parent: Path, report: Callable[[str], None]) -> None:
    """Finishes what conversions into `parent` that were killed left: staging folders go, a moved-aside output returns.

    Only folders named by `STAGING_NAME` whose process no longer runs are touched.
    """
    if not parent.is_dir():
        return
    for path in sorted(parent.iterdir()):
        match = STAGING_NAME.fullmatch(path.name)
        if match is None or not path.is_dir() or path.is_symlink() or _running(int(match["pid"])):
            continue
        output = parent / match["output"]
        try:
            if match["kind"] == "old" and not (output.exists() or output.is_symlink()):
                os.replace(path, output)
                report(f"restored {output} from {path}, where an interrupted --overwrite (process {match['pid']}) "
                       "had moved it")
            else:
                shutil.rmtree(path)
                what = "unfinished folder" if match["kind"] == "partial" else "replaced previous output"
                report(f"removed {path}, the {what} of an interrupted conversion (process {match['pid']})")
        except OSError as error:
            report(f"warning: could not clean up {path}, left by an interrupted conversion ({error}); remove it by "
                   "hand.")


def file_mode() -> int:
    """The permissions a new file gets under the process's umask, `0o666 & ~umask` (mkstemp and safetensors give
    0600 whatever the umask)."""
    umask = os.umask(0o077)
    os.umask(umask)
    return 0o666 & ~umask


def respect_umask(folder: Path) -> None:
    """Gives the files of `folder` the umask's permissions (safetensors writes its file 0600 whatever the umask)."""
    mode = file_mode()
    for path in folder.iterdir():
        if path.is_file() and not path.is_symlink():
            path.chmod(mode)


def _staging_path(output: Path, kind: str) -> Path:
    return output.parent / f".{output.name}.elmo-hf-{kind}-{os.getpid()}-{secrets.token_hex(4)}"


@contextmanager
def staged_folder(output: Path, overwrite: bool, report: Callable[[str], None]) -> Iterator[Path]:
    """Yields an empty staging folder beside `output` that replaces `output` if the block succeeds.

    On any exception the staging folder and the parent folders created for it are removed and `output` is left as
    it was; an `OSError` (a read-only folder, a full disk) becomes an `ElmoRunError` saying so. The folder and its
    files get the umask's permissions, as `save_pretrained` gives them. `output` must be absolute (`check_output`).
    """
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise ConversionError(f"--output {output} is not empty; pass --overwrite to replace it.")
    staging = _staging_path(output, "partial")
    try:
        with created_folder(output.parent):
            clean_leftovers(output.parent, report)
            try:
                staging.mkdir()
                yield staging
                respect_umask(staging)
                _replace(staging, output, report)
            finally:
                shutil.rmtree(staging, ignore_errors=True)  # already gone if it became `output`
    except OSError as error:
        raise write_error(output, error) from error


def _replace(staging: Path, output: Path, report: Callable[[str], None]) -> None:
    """Moves the complete folder `staging` to `output`, replacing a previous `output` only once the move succeeded."""
    if not output.exists():
        os.replace(staging, output)
        return
    old = _staging_path(output, "old")
    os.replace(output, old)
    try:
        os.replace(staging, output)
    except BaseException:
        os.replace(old, output)
        raise
    try:
        shutil.rmtree(old)
    except OSError as error:
        report(f"warning: the previous {output} is now at {old} and could not be removed ({error}); remove it by "
               "hand.")


@contextmanager
def created_folder(folder: Path) -> Iterator[None]:
    """Creates `folder` and its missing parents; if the block raises, removes the folders it created (when empty)."""
    missing = [folder, *folder.parents]
    missing = missing[: next(index for index, path in enumerate(missing) if path.exists())]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        yield
    except BaseException:
        for path in missing:  # the deepest first
            with suppress(OSError):
                path.rmdir()
        raise


def write_error(output: Path, error: OSError, option: str = "--output ") -> ElmoRunError:
    """The error of a write to `output` (given as `option`) that failed (a read-only folder, a full disk) and left
    nothing behind."""
    where = f" ({error.filename})" if error.filename else ""
    return ElmoRunError(f"writing {option}{output} failed: {error.strerror or error}{where}. Nothing was written and "
                        f"{output} is as it was.")


def convert_checkpoint(options: str | os.PathLike, weights: str | os.PathLike, output: str | os.PathLike, *,
                       overwrite: bool = False, model_card: str | None = None, repo_id: str | None = None,
                       report: Callable[[str], None] = logger.info) -> Path:
    """Converts, checks and saves an original checkpoint (`options.json` + weights `.hdf5`); returns the output folder
    (absolute).

    Args:
        options, weights: the checkpoint's files.
        output: the folder to write; it must be empty or absent unless `overwrite`.
        overwrite: replace a non-empty `output` (only once the new folder is complete).
        model_card: the README.md is this released checkpoint's card (see `hub.MODEL_CARDS`); default a generic one.
        repo_id: the Hub id the card's example loads (default: a placeholder); `hub.push_to_hub` uploads the folder.
        report: receives what a user should read: the self-check's result per layer and any leftovers of
            interrupted conversions that were cleaned.

    Raises `ConversionError` (an `ElmoInputError`) for a checkpoint or an `output` that cannot be used and
    `ElmoRunError` if writing fails; in both cases nothing was written.
    """
    output = check_output(output, [options, weights])
    config = convert_config(read_options(options))
    readme = hub.model_card(config, model_card, repo_id, Path(weights).name)
    with staged_folder(output, overwrite, report) as staging:
        arrays = read_weights(weights, config)
        model = model_from_checkpoint(arrays, config)
        differences = check_against_reference(model, arrays)
        layers = ", ".join(f"{index}: {difference:.2e}" for index, difference in enumerate(differences))
        report(f"checked against the float64 reference on a sentence using every character id: max abs difference "
               f"per layer {layers} (allowed: {CHECK_ATOL:g} + {CHECK_RTOL:g} x |reference|)")
        model.save_pretrained(staging)
        ElmoTokenizer(max_characters_per_token=config.max_characters_per_token).save_pretrained(staging)
        (staging / "README.md").write_text(readme, encoding="utf-8")
    return output
