"""Runs `pretrain` with the given `elmo-hf pretrain` options and saves this process's final weights (for the torchrun
test).

    python tests/pretrain_probe.py WEIGHTS_DIR [pretrain options]   ->   WEIGHTS_DIR/rank{RANK}.pt
"""

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elmo_hf.cli import pretrain as command  # noqa: E402
from elmo_hf.corpus import pretraining  # noqa: E402

parser = argparse.ArgumentParser()
command.add_arguments(parser)
trainer, _ = pretraining.pretrain(**command.pretrain_options(parser.parse_args(sys.argv[2:]), parser))
state = trainer.accelerator.unwrap_model(trainer.model).state_dict()
torch.save({name: tensor.detach().clone() for name, tensor in state.items()},
           Path(sys.argv[1]) / f"rank{os.environ.get('RANK', 'single')}.pt")
