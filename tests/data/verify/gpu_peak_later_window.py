"""GPU test program: a whole array put on the device (kept), then the reserve
stays quiet long enough for verify's peak recorder to close its first window,
then a larger scratch tensor makes the peak in a second window. The quiet
spells run Python, as a program's steps do (in `time.sleep` the recorder's
snapshot waited for the main thread: seen on an H100, torch 2.11)."""
import time

import numpy as np
import torch


def busy(seconds: float) -> int:
    """Python work on the host, no allocation on the device."""
    end, done = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        done += sum(range(1000))
    return done


if __name__ == "__main__":
    features = np.random.rand(16384, 1024).astype(np.float32)  # 64 MiB
    X_train = torch.tensor(features).to("cuda")  # probe: MEM001
    busy(2.5)  # quiet: the recorder's first window closes
    scratch = torch.empty(64 * 2**20, device="cuda")  # 256 MiB: the peak, a second window
    busy(2.5)
    print(X_train.sum().item(), scratch.numel())
