"""MEM010 on a GPU: an evaluation loop that keeps each batch's logits on the
device (7.81 MiB a batch: 1000 x 2048 float32), next to one that keeps host
copies (probed as well: it must not be confirmed). Run by
tests/test_verify_gpu.py; the line numbers are asserted there."""
import sys

import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
batches = int(sys.argv[1]) if len(sys.argv) > 1 else 20
model = nn.Linear(256, 2048).to(device)
loader = [torch.randn(1000, 256) for _ in range(batches)]
kept, on_host = [], []
with torch.no_grad():
    for x in loader:
        logits = model(x.to(device))
        kept.append(logits)  # probe: MEM010
        on_host.append(logits.cpu())  # probe: MEM010
print(torch.cat(kept).shape, torch.cat(on_host).shape)
