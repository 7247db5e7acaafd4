#!/bin/bash
# MEM007's size model on the GPU machine, from the repository root (carry
# `.whl`): `memlint check --preview` of bench/verify-sizes/reload_best.py,
# whose ResNet-101 reload the check reports with its size (a warning) and
# whose small network's reload it keeps a note, then `memlint verify
# --preview` measuring what each load puts on the GPU. Writes to $OUT:
# session.log, sizes_check.txt, sizes_verify.txt, sizes_verify.json.
set -u
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
SCRIPT=bench/verify-sizes/reload_best.py
step "sizes: memlint check --preview"
python3 -m memlint check --preview --no-cache --format json $SCRIPT > "$OUT/sizes_check.json" 2>> "$LOG"
python3 -m memlint check --preview --no-cache $SCRIPT > "$OUT/sizes_check.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
step "sizes: memlint verify --preview (text)"
python3 -m memlint.verify.cli --preview --timeout 300 $SCRIPT > "$OUT/sizes_verify.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
step "sizes: memlint verify --preview (json)"
python3 -m memlint.verify.cli --preview --timeout 300 --output-format json $SCRIPT \
    > "$OUT/sizes_verify.json" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
cat "$OUT/sizes_check.txt" "$OUT/sizes_verify.txt"
step end
