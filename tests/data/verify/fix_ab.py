"""`verify --fix` on the CPU: an evaluation forward run with autograd on
(MEM004; its fix, a decorator above the def, is unsafe)."""

import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(device)


def evaluate(batches):
    model.eval()
    total = 0.0
    for x in batches:
        total += model(x).sum().item()
    return total


if __name__ == "__main__":
    batches = [torch.randn(512, 256, device=device) for _ in range(4)]
    print("score", round(evaluate(batches), 3))
