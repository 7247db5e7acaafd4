#!/bin/bash
# Where verify's fixed cost goes, timed alone on the GPU machine: a fresh
# process that makes a CUDA context (what the context probe costs), the probe
# itself, and the static check of each program. Arg: the memlint tree (default .).
ROOT=${1:-.}
TIMEFORMAT="%R s"
T() { echo -n "$* : "; { time "$@" >/dev/null 2>&1; } 2>&1; }
for i in 1 2; do
  T python3 -c "import torch; torch.cuda.synchronize()"
  T env PYTHONPATH=$ROOT:$PYTHONPATH python3 -c "from memlint.verify.context_probe import context_bytes; print(context_bytes('cuda:0', 'python3'))"
  T env PYTHONPATH=$ROOT:$PYTHONPATH python3 -m memlint check .bench/progs/dcgan/main.py
  T env PYTHONPATH=$ROOT:$PYTHONPATH python3 -m memlint check .bench/progs/word_language_model/main.py
done
