#!/bin/bash
# One batch of GPU work for `memlint verify`, run on the device machine from
# the repository root: bench/verify_gpu_session.sh smoke|full. Everything it
# measures goes to $OUT (at most 8 files come back).
set -u
MODE=${1:-smoke}
OUT=${OUT:-/tmp/memlint-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
  nvidia-smi
  python3 -c "import sys, torch, multiprocessing as mp; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('start method', mp.get_start_method())"
  python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)"
  python3 -c "import pynvml; pynvml.nvmlInit(); print('nvml ok', pynvml.nvmlSystemGetDriverVersion())"
} > "$OUT/env.txt" 2>&1
echo "== probe programs"; date
python3 bench/verify_probe_programs.py > "$OUT/programs.json" 2>&1

echo "== memlint verify fixtures/"; date
python3 -m memlint.verify.cli fixtures/ --format json --timeout 60 > "$OUT/fixtures.json" 2>&1
echo "exit status $?"
if [ "$MODE" = full ]; then
  echo "== GPU tests"; date
  python3 -m pytest -q -p no:cacheprovider -m gpu tests/ > "$OUT/gpu_tests.txt" 2>&1
  tail -n 3 "$OUT/gpu_tests.txt"
  echo "== probe overhead"; date
  python3 bench/probe_overhead.py tests/data/verify/gpu_training.py 200 --repeats 3 > "$OUT/overhead.json" 2>&1
  cat "$OUT/overhead.json"
  echo "== snapshot and plot"; date
  python3 -m memlint.verify.cli tests/data/verify/gpu_training.py --snapshot "$OUT/training_snapshot.pickle" \
      --plot "$OUT/training.png" -- 60 > "$OUT/training_verify.txt" 2>&1
  cat "$OUT/training_verify.txt"; ls -la "$OUT"
fi
date
