"""Probe machinery test program: a loss kept after backward() keeps its
graph's nodes alive on the host (backward freed what they saved); the same
loss kept as a number keeps nothing."""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
losses, values = [], []
for step in range(30):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    losses.append(loss)  # probe: MEM003
    values.append(loss.item())  # probe: MEM003
print("done", len(losses))
