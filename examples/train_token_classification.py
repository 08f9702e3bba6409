"""Fine-tune ElmoForTokenClassification with Trainer on Brown part-of-speech tags or WNUT-16 named entities.

    python examples/train_token_classification.py brown /path/to/brown --output-dir elmo-brown-pos
    python examples/train_token_classification.py wnut16 /path/to/wnut16/train.conll --output-dir elmo-wnut16

Splits: Brown files whose name ends in 0 are the test set, in 9 the dev set, the rest train (NLTK layout, one
sentence a line as `word/tag`; tags reduced to their base: `-tl`, `-hl`, `-nc` suffixes and the `fw-` prefix dropped,
the first part of compound tags kept). WNUT-16 (`token<TAB>tag`, blank line between tweets): the last 20% of tweets
are test, the 10% before them dev. The script reports accuracy, and entity precision / recall / F1 (exact spans) for
BIO tags, on dev and on the held-out test split, then saves the tagger for `pipeline("token-classification")`.

`--model` is a converted ELMo folder (conversion/convert.py) or Hub id; without it the tiny test-fixture biLM in
tests/fixtures/allennlp is converted into the output folder, so the script runs offline in minutes, with modest
scores: on 2 CPU cores, `brown` with the defaults (all 47,626 training sentences, 2 epochs) takes about 3.5 minutes
and tags 75.6% of the test words correctly; on WNUT-16 that biLM finds no entities (F1 0). A released ELMo does far
better.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    Trainer,
    TrainingArguments,
)
from transformers.utils.logging import disable_progress_bar

import elmo_hf  # noqa: F401  (registers ELMo with the Auto classes)

REPOSITORY = Path(__file__).resolve().parent.parent
FIXTURE = REPOSITORY / "tests" / "fixtures" / "allennlp"
Sentence = tuple[list[str], list[str]]


def brown_base_tag(tag: str) -> str:
    """`nn-tl` -> `nn`, `fw-in` -> `in`, `ppss+bez` -> `ppss`; `--` (a dash) stays."""
    if tag == "--":
        return tag
    return re.sub(r"(-(tl|hl|nc))+$", "", re.sub(r"^fw-", "", tag)).split("+")[0]


def read_brown(folder: Path) -> dict[str, list[Sentence]]:
    """The Brown files `c[a-r]NN` of `folder`, split by the last digit of the file name."""
    splits = {"train": [], "dev": [], "test": []}
    files = sorted(path for path in folder.iterdir() if re.fullmatch(r"c[a-r]\d\d", path.name))
    if not files:
        raise SystemExit(f"error: no Brown files (ca01 ... cr09) in {folder}")
    for path in files:
        split = {"0": "test", "9": "dev"}.get(path.name[-1], "train")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            pairs = [pair.rsplit("/", 1) for pair in line.split()]
            if any(len(pair) != 2 for pair in pairs):
                raise SystemExit(f"error: {path}, line {number}: every word must be word/tag, got {line.strip()!r}")
            if pairs:
                splits[split].append(([word for word, _ in pairs], [brown_base_tag(tag) for _, tag in pairs]))
    return splits


def read_conll(path: Path) -> dict[str, list[Sentence]]:
    """`token<TAB>tag` lines, blank between sentences; the last 20% are test, the 10% before them dev."""
    sentences, words, tags = [], [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines() + [""], start=1):
        if line.strip():
            fields = line.split("\t")
            if len(fields) != 2:
                raise SystemExit(f"error: {path}, line {number}: expected token<TAB>tag, got {line!r}")
            word, tag = fields
            words.append(word)
            tags.append(tag)
        elif words:
            sentences.append((words, tags))
            words, tags = [], []
    test_start, dev_start = int(0.8 * len(sentences)), int(0.7 * len(sentences))
    return {"train": sentences[:dev_start], "dev": sentences[dev_start:test_start], "test": sentences[test_start:]}


def check_splits(splits: dict[str, list[Sentence]], eval_splits: list[str]) -> None:
    """Refuses a split to train or evaluate on that holds no sentences (a small file, a Brown folder without files
    ending in 9 or 0), which Trainer would fail on deep inside."""
    for split in ["train", *eval_splits]:
        if not splits[split]:
            others = " ".join(name for name in eval_splits if name != split)
            remedy = f"give more data, or leave it out: --eval-splits {others}" if split != "train" and others else ""
            raise SystemExit(f"error: the {split} split holds no sentences; {remedy or 'give more data'}")


def entity_spans(tags: list[str]) -> set[tuple[int, int, str]]:
    """Exact `(start, end, type)` spans of BIO tags; an I- tag after another type opens a span, as conlleval does."""
    spans, start, kind = set(), None, None
    for index, tag in enumerate([*tags, "O"]):
        prefix, tag_kind = tag.split("-", 1) if "-" in tag else ("O", None)
        if kind is not None and (prefix != "I" or tag_kind != kind):
            spans.add((start, index, kind))
            kind = None
        if prefix == "B" or (prefix == "I" and kind is None):
            start, kind = index, tag_kind
    return spans


def scores(predictions: np.ndarray, labels: np.ndarray, id2label: dict[int, str], bio: bool) -> dict[str, float]:
    """Word accuracy and, for BIO tags, entity precision / recall / F1 over `(num_sentences, sequence_length)`."""
    keep = labels != -100
    result = {"accuracy": float((predictions[keep] == labels[keep]).mean())}
    if bio:
        found = gold = correct = 0
        for predicted_row, gold_row, row_keep in zip(predictions, labels, keep):
            predicted = entity_spans([id2label[int(i)] for i in predicted_row[row_keep]])
            expected = entity_spans([id2label[int(i)] for i in gold_row[row_keep]])
            found, gold, correct = found + len(predicted), gold + len(expected), correct + len(predicted & expected)
        precision, recall = correct / max(found, 1), correct / max(gold, 1)
        f1 = 2 * precision * recall / max(precision + recall, 1e-12)
        result.update(entity_precision=precision, entity_recall=recall, entity_f1=f1)
    return result


def encode(tokenizer, sentences: list[Sentence], label2id: dict[str, int]) -> list[dict]:
    return [
        {**tokenizer(words, is_split_into_words=True), "labels": [label2id[tag] for tag in tags]}
        for words, tags in sentences
    ]


def fixture_model(output_dir: Path) -> str:
    """Converts the tiny test-fixture checkpoint with conversion/convert.py; returns the folder."""
    folder = output_dir / "fixture-bilm"
    if not (folder / "config.json").is_file():
        command = [
            sys.executable,
            str(REPOSITORY / "conversion" / "convert.py"),
            "--options",
            str(FIXTURE / "options.json"),
        ]
        command += ["--weights", str(FIXTURE / "lm_weights.hdf5"), "--output", str(folder), "--overwrite"]
        subprocess.run(command, check=True)
    return str(folder)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", choices=["brown", "wnut16"], help="the corpus format and split rule")
    parser.add_argument("path", type=Path, help="the Brown folder, or WNUT-16 train.conll")
    parser.add_argument("--model", help="converted ELMo folder or Hub id (default: the tiny test-fixture biLM)")
    parser.add_argument("--output-dir", type=Path, default=Path("elmo-tagger"))
    parser.add_argument("--max-train-sentences", type=int, help="use only the first N training sentences")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument("--task-lstm-dim", type=int, default=64, help="task biLSTM size per direction (0: none)")
    parser.add_argument("--elmo-dropout", type=float, default=0.1, help="dropout on the mixed ELMo vectors")
    parser.add_argument(
        "--layer-norm", choices=["none", "token", "batch"], default="token", help="normalise the layers before mixing"
    )
    parser.add_argument("--eval-splits", nargs="+", choices=["dev", "test"], default=["dev", "test"])
    parser.add_argument("--fine-tune-bilm", action="store_true", help="train the biLM too (default: frozen)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    disable_progress_bar()
    torch.manual_seed(args.seed)

    splits = read_brown(args.path) if args.dataset == "brown" else read_conll(args.path)
    if args.max_train_sentences is not None:
        splits["train"] = splits["train"][: args.max_train_sentences]
    check_splits(splits, args.eval_splits)
    labels = sorted({tag for sentences in splits.values() for _, tags in sentences for tag in tags})
    id2label, label2id = dict(enumerate(labels)), {tag: index for index, tag in enumerate(labels)}
    bio = all(tag == "O" or tag[:2] in ("B-", "I-") for tag in labels)
    print({split: len(sentences) for split, sentences in splits.items()}, f"{len(labels)} labels")

    model_path = args.model or fixture_model(args.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForTokenClassification.from_pretrained(
        model_path,
        id2label=id2label,
        label2id=label2id,
        task_lstm_dim=args.task_lstm_dim or None,
        elmo_dropout=args.elmo_dropout,
        scalar_mix_layer_norm=None if args.layer_norm == "none" else args.layer_norm,
        freeze_bilm=not args.fine_tune_bilm,
    )
    datasets = {
        split: encode(tokenizer, sentences, label2id)
        for split, sentences in splits.items()
        if split == "train" or split in args.eval_splits
    }

    training_args = TrainingArguments(
        output_dir=str(args.output_dir / "checkpoints"),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=4 * args.batch_size,
        learning_rate=args.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=0.05,
        logging_steps=50,
        save_strategy="no",
        report_to=[],
        seed=args.seed,
        train_sampling_strategy="group_by_length",
        use_cpu=not torch.cuda.is_available(),
        dataloader_pin_memory=torch.cuda.is_available(),
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=datasets["train"],
        data_collator=DataCollatorForTokenClassification(tokenizer),
        processing_class=tokenizer,
        preprocess_logits_for_metrics=lambda logits, _: logits.argmax(-1),
        compute_metrics=lambda prediction: scores(prediction.predictions, prediction.label_ids, id2label, bio),
    )
    trainer.train()
    for split in args.eval_splits:
        metrics = trainer.evaluate(datasets[split], metric_key_prefix=split)
        print(
            split,
            {key: round(value, 4) for key, value in metrics.items() if not key.endswith(("runtime", "per_second"))},
        )
    trainer.save_model(str(args.output_dir / "model"))
    print(
        f'saved to {args.output_dir / "model"}; tag with '
        'pipeline("token-classification", model=..., trust_remote_code=True)'
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
