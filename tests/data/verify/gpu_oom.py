"""GPU test program: a measured line, then allocations until CUDA runs out
of memory; the verdict measured before must survive the crash."""
import torch

data = torch.ones(16 * 2**20, device="cuda")  # probe: MEM001
blocks = []
while True:
    blocks.append(torch.empty(4 * 2**30, dtype=torch.uint8, device="cuda"))
