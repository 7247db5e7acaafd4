"""GPU test program: a loader of 64 MiB pageable batches, each copied to the
GPU while the previous one is still held (MEM005). Under verify the program's
peaks must stay what they are without probes (the meter's own copies once
doubled them). Run by tests/test_verify_gpu.py."""
import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    data = TensorDataset(torch.randn(8 * 64, 256, 1024))  # 1 MiB a sample
    loader = DataLoader(data, batch_size=64)  # probe: MEM005
    total = 0.0
    for (batch,) in loader:
        batch = batch.to("cuda")
        total += batch.sum().item()
    print("total", total)
