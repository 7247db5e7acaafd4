"""Probe machinery test program: the probed statement raises; the error's
line must be the original one."""
import torch

big = torch.zeros(4)


def step(n):
    return big.view(n, 3)  # probe: MEM001


if __name__ == "__main__":
    step(1)
    step(2)
