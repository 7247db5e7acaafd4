#!/bin/bash
# MEM009 (hook-keeps-activations) on the GPU machine, from the repository root
# (carry `.whl`): `memlint verify` on the rule's fixture, `verify --fix
# --unsafe-fixes` on it, and the MEM009/MEM010 GPU tests. Writes to $OUT:
# session.log, fixture.txt, fixture.json, fixture_fix.txt, gpu_tests.txt.
set -u
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
FIXTURE=fixtures/hook_keeps_activations/feature_hooks.py
step "verify the fixture (text, json)"
python3 -m memlint.verify.cli --timeout 120 $FIXTURE > "$OUT/fixture.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
python3 -m memlint.verify.cli --format json --timeout 120 $FIXTURE > "$OUT/fixture.json" 2>> "$LOG"
step "verify --fix --unsafe-fixes on the fixture"
python3 -m memlint.verify.cli --fix --unsafe-fixes --timeout 120 $FIXTURE \
    > "$OUT/fixture_fix.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
step "GPU tests of MEM009 and MEM010"
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_verify_gpu.py -k "hooks or predictions" \
    > "$OUT/gpu_tests.txt" 2>&1
echo "exit status $?" | tee -a "$LOG"
step "done"
