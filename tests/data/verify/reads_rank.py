"""Probe machinery test program: a script written for torchrun that reads RANK
from its environment (a plain `python reads_rank.py` dies with a KeyError)."""
import os

import torch

rank = int(os.environ["RANK"])
block = torch.ones(1024 * (rank + 1), 256)  # probe: MEM001
print("rank", rank, "of", os.environ["WORLD_SIZE"], "done")
