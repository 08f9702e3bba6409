"""Checkout entry point, same as the installed `elmo-hf export`: the command is elmo_hf/cli/export.py over
elmo_hf/conversion/export.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elmo_hf.cli.export import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
