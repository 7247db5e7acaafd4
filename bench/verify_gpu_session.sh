#!/bin/bash
# One batch of GPU work for `memlint verify`, run on the device machine from
# the repository root: bench/verify_gpu_session.sh smoke|full|final (final:
# the smoke steps and the GPU tests). Everything it
# measures goes to $OUT (at most 8 files come back): session.log (environment
# and every step's stderr), programs.json, fixtures.json, and in full mode
# overhead.json, gpu_tests.txt, training_verify.txt, training.png and
# training_snapshot.pickle.
set -u
MODE=${1:-smoke}
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
{
  nvidia-smi
  nproc
  python3 -c "import sys, torch, multiprocessing as mp; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('start method', mp.get_start_method())"
  python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)"
  python3 -c "import pynvml; pynvml.nvmlInit(); print('nvml ok', pynvml.nvmlSystemGetDriverVersion())"
} >> "$LOG" 2>&1
step "probe programs"
python3 bench/verify_probe_programs.py > "$OUT/programs.json" 2>> "$LOG"
step "memlint verify fixtures/"
python3 -m memlint.verify.cli fixtures/ --format json --timeout 60 > "$OUT/fixtures.json" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
if [ "$MODE" != smoke ]; then
  step "GPU tests (the fixtures one is the CLI run above)"
  python3 -m pytest -q -p no:cacheprovider -m gpu -k "not fixtures" tests/test_verify_gpu.py \
      > "$OUT/gpu_tests.txt" 2>&1
  tail -n 5 "$OUT/gpu_tests.txt"
fi
if [ "$MODE" = full ]; then
  step "probe overhead"
  for script in "tests/data/verify/gpu_training.py 200" \
                fixtures/tensor_history_kept/classifier_training_loop.py; do
    python3 bench/probe_overhead.py $script --repeats 3 >> "$OUT/overhead.json" 2>> "$LOG"
  done
  cat "$OUT/overhead.json"
  step "snapshot and plot"
  python3 -m memlint.verify.cli tests/data/verify/gpu_training.py --snapshot "$OUT/training_snapshot.pickle" \
      --plot "$OUT/training.png" -- 60 > "$OUT/training_verify.txt" 2>&1
  echo "exit status $?" >> "$OUT/training_verify.txt"
  cat "$OUT/training_verify.txt"
  ls -la "$OUT"
fi
step end
