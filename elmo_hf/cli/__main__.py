"""`python -m elmo_hf.cli COMMAND ...`, the same as the installed `elmo-hf COMMAND ...`."""

import sys

from . import main

sys.exit(main())
