"""Probe machinery test program: runs on a CPU in well under a second.

Lines marked `# probe: CODE` are the ones the tests treat as findings.
"""
import os
import sys
import tempfile

import torch
from torch import load as torch_load
from torch import nn

model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def evaluate(batch):
    model.eval()
    return model(batch)  # probe: MEM004


def evaluate_without_grad(batch):
    with torch.no_grad():
        return model(batch)  # probe: MEM004


def train(steps):
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 256)
        loss = model(x).pow(2).mean()
        losses.append(loss)  # probe: MEM003
    return losses


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    evaluate(torch.randn(64, 256))
    evaluate_without_grad(torch.randn(64, 256))
    train(steps)
    torch.no_grad()  # probe: MEM006
    path = os.path.join(tempfile.mkdtemp(), "weights.pt")
    torch.save(model.state_dict(), path)
    state = torch_load(path)  # probe: MEM007
    if steps < 0:
        print("never")  # probe: MEM001
    print("done", len(state))
