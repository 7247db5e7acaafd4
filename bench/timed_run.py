"""Run a command; print its wall seconds and the largest resident memory of
any process it started (getrusage of the children), as one JSON line.

    python bench/timed_run.py LABEL -- COMMAND...
"""
import json
import resource
import subprocess
import sys
import time

label, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
start = time.perf_counter()
status = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
wall = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"label": label, "wall_s": round(wall, 2), "status": status,
                  "max_rss_mib": round(peak_kib / 1024)}))
