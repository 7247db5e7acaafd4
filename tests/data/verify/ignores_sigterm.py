"""Probe machinery test program: measured lines run, then the program takes
SIGTERM over (as training frameworks do, to checkpoint) and hangs: verify's
SIGTERM cannot make it write its results, so what it measured must come from
the snapshots, and the report must say where it hung."""
import signal
import time

import torch

kept = []
for step in range(5):
    kept.append(torch.ones(1024, 256))  # probe: MEM001
    time.sleep(0.05)
signal.signal(signal.SIGTERM, signal.SIG_IGN)


def wait_for_data():
    while True:
        time.sleep(0.1)


wait_for_data()
