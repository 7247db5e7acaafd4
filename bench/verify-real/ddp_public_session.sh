#!/bin/bash
# The multi-GPU verify issue on a two-GPU machine, from the repository root
# (carry `.whl`): a public DDP script (pytorch/examples ddp-tutorial-series,
# unmodified) run with `memlint verify --nproc-per-node 2`, its per-rank and
# per-GPU account set beside nvidia-smi sampled during the same run, and the
# MEM008 fixture's per-GPU picture. Everything lands in $OUT/all.tgz.
set -u
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
nvidia-smi --query-gpu=index,uuid --format=csv > "$OUT/gpu_uuids.csv"
V="python3 -m memlint.verify.cli --timeout 300 --nproc-per-node 2"
SCRIPT_ARGS="-- 300 100"  # 300 epochs of 32-sample batches, a snapshot every 100
REPO=$PWD
for format in text json; do
  step "public DDP script, --format $format, nvidia-smi sampled every 100 ms"
  rm -rf /tmp/ddp-$format && cp -r bench/verify-real/ddp-tutorial-series /tmp/ddp-$format
  cd /tmp/ddp-$format
  nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv -lms 100 \
      > "$OUT/ddp_public_smi_$format.csv" 2>&1 & SMI=$!
  if [ $format = text ]; then
    echo "command: memlint verify --nproc-per-node 2 --plot ddp_public.png multigpu_torchrun.py $SCRIPT_ARGS" > "$OUT/ddp_public.txt"
    $V --plot "$OUT/ddp_public.png" multigpu_torchrun.py $SCRIPT_ARGS >> "$OUT/ddp_public.txt" 2>> "$LOG"
  else
    $V --format json multigpu_torchrun.py $SCRIPT_ARGS > "$OUT/ddp_public.json" 2>> "$LOG"
  fi
  echo "exit status $?" | tee -a "$LOG"
  kill $SMI
  cd "$REPO"
  python3 bench/verify-real/compare_smi.py "$OUT/ddp_public.json" "$OUT/ddp_public_smi_json.csv" \
      "$OUT/gpu_uuids.csv" > "$OUT/ddp_public_compare.md" 2>&1 || true
done
step "MEM008 fixture, per-GPU plot"
$V --plot "$OUT/rank_never_used.png" fixtures/implicit_default_gpu/rank_never_used.py \
    > "$OUT/rank_never_used.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
step "GPU tests"
timeout ${REST_S:-240} python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_verify_gpu.py \
    -k "rank or launch" > "$OUT/gpu_tests.txt" 2>&1
echo "exit status $?" | tee -a "$LOG"
step "done"
tar -C "$OUT" -czf /tmp/all.tgz --exclude all.tgz . && mv /tmp/all.tgz "$OUT/all.tgz"
