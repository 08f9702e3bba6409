"""Print ELMo's per-word vectors for sentences given as arguments, or typed one per line on standard input.

    python examples/embed.py MODEL_FOLDER "The cat sat on the mat ."
    echo "Another sentence ." | python examples/embed.py MODEL_FOLDER
"""

import argparse
import sys

import torch

import elmo_hf  # noqa: F401  (registers ELMo with the Auto classes)
from transformers import AutoModel, AutoTokenizer
from transformers.utils.logging import disable_progress_bar


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a converted ELMo folder (conversion/convert.py) or Hub id")
    parser.add_argument("sentences", nargs="*", help="sentences to embed; read from standard input if none")
    parser.add_argument("--layer", type=int, default=-1, help="which layer to print: 0 = token layer, -1 = top")
    args = parser.parse_args()
    disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model).eval()
    if not args.sentences and sys.stdin.isatty():
        print("Type a sentence per line (Ctrl-D to end):", file=sys.stderr)
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
