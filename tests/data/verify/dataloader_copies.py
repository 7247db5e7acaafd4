"""Probe machinery test program: a DataLoader built through an alias, whose
batches the MEM005 meter sees on the way through."""
import torch
from torch.utils.data import DataLoader as DL
from torch.utils.data import TensorDataset

if __name__ == "__main__":
    data = TensorDataset(torch.randn(64, 32), torch.randint(0, 2, (64,)))
    loader = DL(data, batch_size=16)  # probe: MEM005
    seen = 0
    for features, labels in loader:
        seen += len(features)
    print("batches of", type(loader).__name__, "rows", seen)
