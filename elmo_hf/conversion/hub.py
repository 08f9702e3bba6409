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
"""Model cards of converted folders and their push to the Hugging Face Hub.

The cards of the four released checkpoints are package data (`model_cards/{name}.md`), so an installed elmo-hf
writes them too. Every Hub call runs with a timeout and is retried on what `huggingface_hub` itself retries
(timeouts, network errors, 408/429/5xx answers), so a push ends, successfully or with an error, in bounded time.
"""

import numbers
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from string import Template
from typing import TypeVar

import httpx2
from huggingface_hub import CommitInfo, HfApi, get_session, get_token
from huggingface_hub.constants import DEFAULT_REVISION
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id
from huggingface_hub.utils._http import _DEFAULT_RETRY_ON_EXCEPTIONS, _DEFAULT_RETRY_ON_STATUS_CODES

from elmo_hf import ElmoConfig
from elmo_hf.errors import is_whole

from .checkpoint import ConversionError

MODEL_CARDS_DIR = Path(__file__).resolve().parent / "model_cards"
# The released checkpoints with a card in model_cards/{name}.md, and the architecture each was released with.
MODEL_CARDS = {
    "small": "2x1024_128_2048cnn_1xhighway",
    "medium": "2x2048_256_2048cnn_1xhighway",
    "original": "2x4096_512_2048cnn_2xhighway",
    "original-5.5B": "2x4096_512_2048cnn_2xhighway",
}
# The model id in a card's usage code when the folder is not pushed (its local path would mean nothing elsewhere).
PLACEHOLDER_REPO_ID = "path/to/elmo"
# Seconds a Hub call may wait to connect or for the next bytes of an answer, and how often a failed call is retried
# (huggingface_hub's own default), waiting 1, 2, 4, 8, 8 s between tries.
HUB_TIMEOUT = 60.0
HUB_RETRIES = 5
# The longest timeout taken: far longer ones (1e10 s) overflow the clock arithmetic under the client, and a NaN or
# infinite one cannot be set at all.
MAX_HUB_TIMEOUT = 86400.0
MAX_RETRY_WAIT = 8.0
# What a failed push raises: an HTTP error status, a transport error, an answer that is not the expected JSON.
PUSH_ERRORS = (HfHubHTTPError, httpx2.HTTPError, ValueError, OSError)

Result = TypeVar("Result")


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


def model_card(config: ElmoConfig, name: str | None, repo_id: str | None, source: str) -> str:
    """The README.md text: card `name` from `model_cards/`, or the generic card if `name` is None.

    Its usage code loads `repo_id`, or `PLACEHOLDER_REPO_ID` when the folder is not pushed.
    """
    repo_id = repo_id or PLACEHOLDER_REPO_ID
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


def _retried(call: Callable[[], Result], retries: int) -> Result:
    """`call()`, tried again up to `retries` times (waiting 1, 2, 4, ... s) on what huggingface_hub retries."""
    for attempt in range(retries):
        try:
            return call()
        except _DEFAULT_RETRY_ON_EXCEPTIONS:
            pass
        except HfHubHTTPError as error:
            if error.response is None or error.response.status_code not in _DEFAULT_RETRY_ON_STATUS_CODES:
                raise
        time.sleep(min(2.0**attempt, MAX_RETRY_WAIT))
    return call()


def push_to_hub(folder: str | Path, repo_id: str, token: str | None = None, private: bool | None = None,
                revision: str | None = None, create_pr: bool = False, timeout: float = HUB_TIMEOUT,
                retries: int = HUB_RETRIES) -> CommitInfo:
    """Uploads a converted folder in one commit, creating the repository (and branch `revision`) if needed.

    Each Hub call waits at most `timeout` seconds to connect and for each part of the answer, and is retried
    `retries` times on timeouts, network errors and 408/429/5xx answers. Raises one of `PUSH_ERRORS` on failure.
    A commit retried after the Hub received it uploads nothing new (unchanged files are skipped), but with
    `create_pr` it can open a second pull request. Arguments that `check_push_arguments` refuses and a `folder` that
    is not one raise `ConversionError` (a `ValueError`) before any Hub call, so no empty repository is created.
    """
    if problem := check_push_arguments(repo_id, token, private, revision, create_pr, timeout, retries):
        raise ConversionError(problem)
    if not Path(folder).is_dir():
        raise ConversionError(f"{folder} is not a folder; push the folder that `convert_checkpoint` wrote.")
    api = HfApi(token=token)
    session = get_session()  # huggingface_hub's shared client: its calls take no timeout of their own
    previous_timeout, session.timeout = session.timeout, httpx2.Timeout(timeout)
    try:
        repo_id = _retried(lambda: api.create_repo(repo_id, private=private, exist_ok=True).repo_id, retries)
        if revision is not None and revision != DEFAULT_REVISION:
            _retried(lambda: api.create_branch(repo_id, branch=revision, exist_ok=True), retries)
        return _retried(lambda: api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            revision=revision,
            create_pr=create_pr,
            commit_message=f"Add ELMo converted with elmo-hf from {Path(os.path.abspath(folder)).name}",
        ), retries)
    finally:
        session.timeout = previous_timeout


def upload_command(folder: Path, repo_id: str, private: bool | None = None, revision: str | None = None,
                   create_pr: bool = False) -> str:
    """The `hf upload` command that pushes a kept folder as the failed `push_to_hub` meant to."""
    words = ["hf", "upload", repo_id, str(folder)]
    words += ["--private"] if private else []
    words += ["--revision", revision] if revision else []
    words += ["--create-pr"] if create_pr else []
    return shlex.join(words)


def describe_push_error(error: Exception) -> str:
    """A failed push in one line: the exception's kind (unless an HTTP error, whose status says it) and message."""
    message = " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or "no message"
    return message if isinstance(error, HfHubHTTPError) else f"{type(error).__name__}: {message}"


def check_push_arguments(repo_id: str | None, token: str | None = None, private: bool | None = None,
                         revision: str | None = None, create_pr: bool = False, timeout: float = HUB_TIMEOUT,
                         retries: int = HUB_RETRIES) -> str | None:
    """The reason the requested push (the arguments of `push_to_hub`, `repo_id` None for none) cannot work, checked
    before anything is converted, in the words of the `convert` command's options; None if it can."""
    if repo_id is None:
        given = [option for option, value in (("private", private), ("revision", revision), ("create-pr", create_pr),
                                              ("token", token)) if value]
        return f"--{given[0]} needs --push-to-hub." if given else None
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        return f"--push-to-hub {repo_id!r} is not a valid repository id: {error}"
    if "/" not in repo_id:
        return f"--push-to-hub {repo_id!r} needs its namespace, as in 'your-name/{repo_id}'."
    if create_pr and revision not in (None, DEFAULT_REVISION):
        return (
            f"--create-pr opens a pull request against {DEFAULT_REVISION!r}; it cannot go with --revision "
            f"{revision!r}. Push to the branch without --create-pr, or open the pull request without --revision."
        )
    timeout_usable = isinstance(timeout, numbers.Real) and 0 < timeout <= MAX_HUB_TIMEOUT  # False for NaN
    if not timeout_usable or not is_whole(retries) or retries < 0:
        return (f"--hub-timeout {timeout!r} and --hub-retries {retries!r}: the timeout must be a number of seconds "
                f"above 0 and at most {MAX_HUB_TIMEOUT:g} (a day), the retries a whole number, at least 0.")
    if token is None and get_token() is None:
        return "pushing needs a Hub token with write access: run `hf auth login`, set HF_TOKEN or pass --token."
    return None
