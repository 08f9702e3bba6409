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
"""ELMo where its users already work: an AllenNLP-compatible embedder (`allennlp`), a sentence-transformers module
(`sentence_transformers`) and a Ray Data actor (`ray`).

Not part of the model core: these modules never travel with a saved folder, and each imports its tool only when it is
itself imported (`import elmo_hf.integrations.ray` needs no Ray; running it under `map_batches` does).
"""
