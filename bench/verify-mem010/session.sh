#!/bin/bash
# MEM010 (predictions-kept-on-gpu) on the GPU machine, from the repository
# root (carry `.whl`): the rule's fixture and probe program through
# `memlint verify`, `verify --fix --unsafe-fixes` on the probe program (the
# `.cpu()` fix), and every GPU test (tests/ -m gpu). Writes to $OUT:
# session.log, fixture.txt, fixture.json, probe_fix.txt, probe_fix.json,
# gpu_tests.txt.
set -u
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
FIXTURE=fixtures/predictions_kept_on_gpu/evaluation_loops.py
PROBE=tests/data/verify/gpu_predictions_kept.py
step "verify the fixture (text, json)"
python3 -m memlint.verify.cli --timeout 120 $FIXTURE > "$OUT/fixture.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
python3 -m memlint.verify.cli --format json --timeout 120 $FIXTURE > "$OUT/fixture.json" 2>> "$LOG"
step "verify --fix --unsafe-fixes on the probe program (20 batches)"
python3 -m memlint.verify.cli --fix --unsafe-fixes --timeout 120 $PROBE -- 20 \
    > "$OUT/probe_fix.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
python3 -m memlint.verify.cli --fix --unsafe-fixes --format json --timeout 120 $PROBE -- 20 \
    > "$OUT/probe_fix.json" 2>> "$LOG"
step "GPU test of MEM010"
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_verify_gpu.py -k predictions \
    > "$OUT/gpu_tests.txt" 2>&1
echo "exit status $?" | tee -a "$LOG"
step "the other GPU tests, as long as the budget allows"
timeout ${REST_S:-240} python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/test_verify_gpu.py -k "not predictions" >> "$OUT/gpu_tests.txt" 2>&1
echo "exit status $?" | tee -a "$LOG"
step "done"
