"""Print ELMo's per-word vectors for sentences given as arguments, or piped in one per line.

    python examples/embed.py elmo-en-mini "The cat sat on the mat ."
    echo "Another sentence ." | python examples/embed.py MODEL_FOLDER

Standard input is read only when it is not a terminal (a pipe or a file), so a command pasted with others after it
never swallows them. For a whole corpus into a file, use `elmo-hf embed`.
"""

import argparse
import sys

import torch

import elmo_hf  # registers ELMo with the Auto classes
from transformers import AutoModel, AutoTokenizer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "model",
        help="a packaged model's name (elmo-en-mini), a converted ELMo folder (conversion/convert.py) or Hub id",
    )
    parser.add_argument("sentences", nargs="*", help="sentences to embed; if none, lines piped to standard input")
    parser.add_argument("--layer", type=int, default=-1, help="which layer to print: 0 = token layer, -1 = top")
    args = parser.parse_args()
    if not args.sentences and sys.stdin.isatty():
        parser.error(
            "give sentences as arguments, or pipe them in (standard input is read only when it is not a terminal): "
            f'python examples/embed.py {args.model} "A sentence ."'
        )
    model_path = elmo_hf.resolve_model_name(args.model)  # the Auto classes take folders and Hub ids, not our names
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path).eval()
    sentences = args.sentences or (line.strip() for line in sys.stdin)
    for sentence in sentences:
        inputs = tokenizer(sentence, return_tensors="pt", return_offsets_mapping=True)
        offsets = inputs.pop("offset_mapping")[0].tolist()
        with torch.inference_mode():
            layer = model(**inputs, output_hidden_states=True).hidden_states[args.layer][0]
        print(f"{sentence!r}: {len(offsets)} words x {layer.shape[-1]} dims (layer {args.layer})")
        for (start, end), vector in zip(offsets, layer):
            values = " ".join(f"{value:+.3f}" for value in vector[:8].tolist())
            print(f"  {sentence[start:end]:>15}  [{values} ...]  norm {vector.norm():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
