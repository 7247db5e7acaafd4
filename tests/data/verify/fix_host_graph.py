"""verify --fix test program: a running sum of losses after backward() keeps
only its graph's nodes, on the host (+ a few per step); the fix keeps none."""
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
total_loss = 0
for step in range(30):
    optimizer.zero_grad()
    loss = model(torch.randn(4, 8, device=device)).pow(2).mean()
    loss.backward()
    optimizer.step()
    total_loss += loss
print("done", float(total_loss))
