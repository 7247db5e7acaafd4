"""Probe machinery test program: a worker process that would outlive a
plain kill of its parent; verify's timeout must end both."""
import multiprocessing
import os
import sys
import time


def worker_forever(pid_file):
    with open(pid_file, "w") as handle:
        handle.write(str(os.getpid()))
    while True:
        time.sleep(0.1)


if __name__ == "__main__":
    worker = multiprocessing.get_context("fork").Process(target=worker_forever,
                                                         args=(sys.argv[1],))
    worker.start()
    for _ in range(600):
        time.sleep(0.1)  # probe: MEM003
