"""Probe machinery test program: measured lines run, then the process is
killed outright (as the kernel's out-of-memory killer would): nothing can
write a result at the end, the snapshots must keep what was measured."""
import os
import signal
import time

import torch

for step in range(5):
    block = torch.ones(1024, 256)  # probe: MEM001
    time.sleep(0.05)
time.sleep(0.6)  # a snapshot is written within 0.25 s of the last probe
os.kill(os.getpid(), signal.SIGKILL)
