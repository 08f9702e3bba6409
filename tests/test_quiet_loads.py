"""A new user's loads are quiet: no progress bar per `from_pretrained`, one line for a head's new layers, and
`import elmo_hf` does not import transformers' pipelines."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_loading_a_base_checkpoint_and_a_head_prints_at_most_one_line(converted):
    code = textwrap.dedent(
        f"""
        import sys
        import elmo_hf
        from transformers import AutoModel, AutoModelForTokenClassification

        assert "transformers.pipelines" not in sys.modules, "import elmo_hf imported transformers.pipelines"
        print("<loads>", file=sys.stderr, flush=True)
        AutoModel.from_pretrained({str(converted["allennlp"])!r})
        AutoModelForTokenClassification.from_pretrained({str(converted["allennlp"])!r}, num_labels=3)
        print("</loads>", file=sys.stderr, flush=True)
        from elmo_hf import ElmoTokenClassificationPipeline  # still importable, on first use
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    printed = result.stderr.split("<loads>\n", 1)[1].split("</loads>", 1)[0] + result.stdout
    lines = [line for line in printed.replace("\r", "\n").splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "ElmoForTokenClassification: new task layers (classifier, scalar_mix)" in lines[0]


def test_importing_the_package_and_the_command_line_prints_nothing():
    """With every test extra installed (torchao among them), `import elmo_hf` and `elmo-hf --version` print nothing
    but the version: optional dependencies' import-time notes are silenced, and the loggers' levels restored."""
    code = textwrap.dedent(
        """
        import logging
        import elmo_hf
        from elmo_hf.cli import main

        assert logging.getLogger("torchao").level == logging.NOTSET
        main(["--version"])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == (f"elmo-hf {__import__('elmo_hf').__version__}\n", "")
