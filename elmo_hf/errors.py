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
"""The two kinds of failure of the library under the commands, which the command line maps to its exit status, and
the checks of input that the commands and the library functions under them share.

A saved folder carries this file with the model code (the tokenizer's and the scalar mix's checks import from it),
so it imports nothing of the package and nothing beyond what a saved folder's code already needs.
"""

import math
import numbers
import os

from huggingface_hub.errors import StrictDataclassError

# `--threads` above this many per CPU is refused: more only slows torch down, and far more exhausts memory or
# overflows torch's thread count.
THREADS_PER_CPU = 4


class ElmoInputError(ValueError):
    """Input or options that cannot be used (a missing file, a bad value, an output that would overwrite the user's
    files): the command prints one `error:` line and exits with status 2; nothing was written."""


class ElmoRunError(RuntimeError):
    """A failure while running (a full disk, a diverging loss, a failed upload): the command prints one `error:` line
    and exits with status 1; what was completed is kept, as the message says."""


def is_whole(value: object) -> bool:
    """Whether `value` is an integer (numpy's included), not a bool, a float or a str."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_finite_real(value: object) -> bool:
    """Whether `value` is a finite real number (numpy's included), not a bool, a str, NaN or an infinity."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_positive_integer(name: str, value: object, error: type[ElmoInputError] = ElmoInputError) -> None:
    """Raises `error` naming option `--name` unless `value` is a positive integer (not a bool, a float or None)."""
    if not is_whole(value) or value < 1:
        raise error(f"--{name} must be a positive integer, got {value!r}.")


def check_threads(threads: int | None, error: type[ElmoInputError] = ElmoInputError) -> None:
    """Raises `error` (the caller's `ElmoInputError`) unless `threads`, torch's CPU threads (None: torch's choice), is
    a positive integer of at most `THREADS_PER_CPU` x this machine's CPUs; checked before torch is touched."""
    if threads is None:
        return
    if not is_whole(threads) or threads < 1:
        raise error(f"--threads {threads}: must be a positive integer.")
    cpus = os.cpu_count() or 1
    if threads > THREADS_PER_CPU * cpus:
        raise error(
            f"--threads {threads}: at most {THREADS_PER_CPU * cpus} on this machine ({THREADS_PER_CPU} x its {cpus} "
            "CPUs); give fewer, or leave out --threads for torch's choice."
        )


def config_error_message(error: Exception) -> str:
    """The reason `ElmoConfig` refused its fields, on one line: a check between fields (`validate_architecture`)
    reaches the caller wrapped by the strict dataclass in a two-line error, whose cause is the config's own message."""
    if isinstance(error, StrictDataclassError) and error.__cause__ is not None:
        return str(error.__cause__)
    return str(error)


__all__ = [
    "ElmoInputError",
    "ElmoRunError",
    "check_positive_integer",
    "check_threads",
    "config_error_message",
    "is_whole",
]
