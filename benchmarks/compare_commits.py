"""Words/s of the shipped inference path at two commits, measured interleaved, for before/after tables.

    python benchmarks/compare_commits.py --before b9bdd72                 # against this checkout
    python benchmarks/compare_commits.py --before b9bdd72 --models original --batch-sizes 1 8 --rounds 5

On a shared machine the speed drifts by tens of percent over minutes, so two benchmark runs made one after the other
do not compare. This runs the worker of `bench_inference.py` (one configuration in a fresh process, its words/s) of
each commit in turn, in the order before, after, after, before, ... (so a steady drift weighs on both alike), for
`--rounds` rounds per configuration, and prints the median of each side and their ratio. The other commit is checked
out into a temporary git worktree, removed afterwards; "after" is this checkout, uncommitted changes included.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_inference import cpu_description

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path("benchmarks") / "bench_inference.py"


def words_per_second(checkout: Path, model: str, batch: int, args: argparse.Namespace) -> float:
    """One configuration of the shipped path, run by `checkout`'s own benchmark worker."""
    script = checkout / SCRIPT
    command = [sys.executable, str(script), "--worker", model, str(batch), "float32"]
    command += ["auto"] if '"IMPL"' in script.read_text() else []  # older workers always ran the shipped path
    command += ["--sentences", str(args.sentences), "--repeats", str(args.repeats), "--threads", str(args.threads)]
    result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=checkout)
    if result.returncode:
        raise SystemExit(f"error: the benchmark worker of {checkout} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["tokens_per_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the commit to compare this checkout with")
    parser.add_argument("--models", nargs="+", default=["small", "original"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side per configuration")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1, help="passes over the sentences within one run")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", "--short", f"{args.before}^{{commit}}"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )
    if commit.returncode:
        parser.error(f"--before {args.before!r} is not a commit of {ROOT}")
    print(f"{cpu_description()}\ntorch, {args.threads} threads, float32, load average {os.getloadavg()[0]:.2f}")
    print(f"| model | batch | before ({commit.stdout.strip()}) words/s | after words/s | after / before |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        before = Path(folder) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(before), args.before], cwd=ROOT, check=True)
        try:
            for model in args.models:
                for batch in args.batch_sizes:
                    runs: dict[Path, list[float]] = {before: [], ROOT: []}
                    for round_ in range(args.rounds):
                        for checkout in (before, ROOT) if round_ % 2 == 0 else (ROOT, before):
                            runs[checkout].append(words_per_second(checkout, model, batch, args))
                    old, new = (statistics.median(runs[checkout]) for checkout in (before, ROOT))
                    print(
                        f"| {model} | {batch} | {old:.0f} ({', '.join(f'{r:.0f}' for r in runs[before])}) | "
                        f"{new:.0f} ({', '.join(f'{r:.0f}' for r in runs[ROOT])}) | {new / old:.2f} |",
                        flush=True,
                    )
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
