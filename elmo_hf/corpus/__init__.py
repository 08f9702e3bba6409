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
"""The corpus jobs: the library under the commands `embed` and `merge-shards` (`embed.embed_corpus`,
`embed.merge_shards`), `pretrain` (`pretraining.pretrain`) and `perplexity` (`perplexity.corpus_perplexity`).

The functions are typed and raise `elmo_hf.errors.ElmoInputError` (input or options unusable, nothing written) or
`ElmoRunError` (a failure while running; what was completed is kept); the command line (`elmo_hf/cli`) parses
options and maps these to exit statuses 2 and 1. Never copied into a saved folder."""
