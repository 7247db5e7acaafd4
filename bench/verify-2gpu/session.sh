#!/bin/bash
# Issue "Multi-GPU verify on two GPUs": run on nvidia-h200-x2 from the
# repository root, carrying `.whl`. Writes to $OUT.
set -u
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
D=bench/verify-2gpu
nvidia-smi --query-gpu=index,uuid --format=csv,noheader > "$OUT/gpus.csv"
(while true; do nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory \
    --format=csv,noheader,nounits >> "$OUT/smi.csv"; sleep 0.1; done) &
SMI=$!
python3 -m memlint.verify.cli --nproc-per-node 2 --timeout 240 --format json \
    $D/ddp_gpu0_by_accident.py > "$OUT/verify.json" 2> "$OUT/verify_json.log"
python3 -m memlint.verify.cli --nproc-per-node 2 --timeout 240 \
    $D/ddp_gpu0_by_accident.py > "$OUT/verify.txt" 2>&1
kill $SMI
python3 $D/compare_per_gpu.py "$OUT/verify.json" "$OUT/smi.csv" "$OUT/gpus.csv" > "$OUT/compare.txt"
cat "$OUT/verify.txt" "$OUT/compare.txt"; tail -5 "$OUT/verify_json.log"
