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
"""The two kinds of failure of the library under the commands, which the command line maps to its exit status.

Not part of the model core: these never travel with a saved folder.
"""


class ElmoInputError(ValueError):
    """Input or options that cannot be used (a missing file, a bad value, an output that would overwrite the user's
    files): the command prints one `error:` line and exits with status 2; nothing was written."""


class ElmoRunError(RuntimeError):
    """A failure while running (a full disk, a diverging loss, a failed upload): the command prints one `error:` line
    and exits with status 1; what was completed is kept, as the message says."""


__all__ = ["ElmoInputError", "ElmoRunError"]
