"""GPU test program: a whole array put on the device at once (kept), a
small constant (not worth confirming), and a big transient copy (freed)."""
import numpy as np
import torch

if __name__ == "__main__":
    features = np.random.rand(16384, 1024).astype(np.float32)  # 64 MiB
    X_train = torch.tensor(features).to("cuda")  # probe: MEM001
    weights = torch.tensor([0.5, 0.5]).cuda()  # probe: MEM001
    total = torch.tensor(features).cuda().sum().item()  # probe: MEM001
    print(X_train.shape, weights.sum().item(), total > 0)
