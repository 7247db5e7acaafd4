#!/bin/bash
# The memory account of `memlint verify` on the GPU machine, checked against
# nvidia-smi sampled every 0.1 s during the same runs. Carry `.whl` and
# `.review/pytorch+examples`. Writes to $OUT: account_*.txt / .json / .png,
# smi_samples.csv, account_vs_smi.txt.
set -u
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
(while true; do nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
    >> "$OUT/smi_samples.csv"; sleep 0.1; done) &
SMI=$!
DCGAN=.review/pytorch+examples/dcgan/main.py
ARGS="--dataset fake --accel --niter 1 --manualSeed 1 --outf /tmp/dcgan-account"
python3 -m memlint.verify.cli --timeout 300 --plot "$OUT/account_dcgan.png" $DCGAN -- $ARGS \
    > "$OUT/account_dcgan.txt" 2>&1
python3 -m memlint.verify.cli --timeout 300 --format json $DCGAN -- $ARGS \
    > "$OUT/account_dcgan.json" 2>/dev/null
python3 -m memlint.verify.cli --timeout 120 --plot "$OUT/account_training.png" \
    tests/data/verify/gpu_training.py -- 60 > "$OUT/account_training.txt" 2>&1
python3 -m memlint.verify.cli --timeout 120 --format json tests/data/verify/gpu_training.py -- 60 \
    > "$OUT/account_training.json" 2>/dev/null
python3 -m memlint.verify.cli --timeout 120 --format json tests/data/verify/gpu_worker_cuda.py -- spawn \
    > "$OUT/account_workers.json" 2>/dev/null
python3 -m memlint.verify.cli --timeout 120 tests/data/verify/gpu_worker_cuda.py -- spawn \
    > "$OUT/account_workers.txt" 2>&1
kill $SMI
for run in dcgan training workers; do
  python3 bench/account_vs_smi.py "$OUT/account_$run.json" "$OUT/smi_samples.csv"
done > "$OUT/account_vs_smi.txt"
cat "$OUT/account_dcgan.txt" "$OUT/account_training.txt" "$OUT/account_workers.txt" "$OUT/account_vs_smi.txt"
