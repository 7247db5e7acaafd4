"""GPU test program: a small training loop whose eval outputs are kept with
their graphs (MEM003: growth per step), an eval forward with autograd on
(MEM004), and a loader of pageable batches (MEM005). Also the program the
probe overhead is measured on."""
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    device = "cuda"
    data = TensorDataset(torch.randn(steps * 64, 3, 64, 64), torch.randint(0, 10, (steps * 64,)))
    loader = DataLoader(data, batch_size=64, shuffle=True)  # probe: MEM005
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 2048), nn.ReLU(),
                          nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        probe_out = model(images)
        kept.append(probe_out)  # probe: MEM003
    model.eval()
    scores = model(images)  # probe: MEM004
    print("steps", len(kept), "score", scores.mean().item())
