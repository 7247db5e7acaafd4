"""Probe machinery test program: measured lines run, then the program keeps
computing until the timeout stops it: the report must say it was running, not stuck."""
import torch

kept = []
for step in range(5):
    kept.append(torch.ones(1024, 256))  # probe: MEM001


def train_forever():
    weights = torch.randn(256, 256)
    while True:
        weights = torch.tanh(weights @ weights)
        weights = weights / weights.norm()


train_forever()
