"""GPU test program: CUDA work in `__getitem__` under spawn workers (each
worker creates its own context) and under fork (the worker fails)."""
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class OnDevice(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        return torch.full((4,), float(index), device="cuda")  # probe: MEM002


if __name__ == "__main__":
    method = sys.argv[1] if len(sys.argv) > 1 else "spawn"
    torch.zeros(1, device="cuda")
    loader = DataLoader(OnDevice(), batch_size=8, num_workers=2,
                        multiprocessing_context=method, pin_memory=False)
    rows = 0
    for batch in loader:
        rows += batch.shape[0]
        torch.cuda.synchronize()
    print("rows", rows)
