#!/bin/bash
# MEM008 (implicit-default-gpu) and the multi-GPU verify issue on a two-GPU
# machine, from the repository root (carry `.whl`). Writes to $OUT:
# session.log, context_probe.txt, <fixture>.txt/.json per MEM008 fixture,
# ddp_resume.txt/.json (MEM007 in a DDP job), ddp_public.txt/.json and
# ddp_public_smi.csv (a public DDP script, and nvidia-smi's per-process
# account sampled during it), gpu_tests.txt.
set -u
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
V="python3 -m memlint.verify.cli --timeout 180 --nproc-per-node 2"
step "which torch.cuda calls create a context"
python3 bench/verify-mem008/context_probe.py > "$OUT/context_probe.txt" 2>&1
for fixture in rank_never_used set_device_too_late near_misses; do
  step "verify --nproc-per-node 2 $fixture"
  $V fixtures/implicit_default_gpu/$fixture.py > "$OUT/$fixture.txt" 2>> "$LOG"
  echo "exit status $?" | tee -a "$LOG"
  $V --format json fixtures/implicit_default_gpu/$fixture.py > "$OUT/$fixture.json" 2>> "$LOG"
done
step "near misses run plainly under torchrun, nvidia-smi sampled"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv -lms 200 \
    > "$OUT/near_misses_smi.csv" 2>&1 & SMI=$!
python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
    fixtures/implicit_default_gpu/near_misses.py > "$OUT/near_misses_run.txt" 2>&1
kill $SMI
step "MEM007 in a DDP job"
$V --plot "$OUT/ddp_resume.png" bench/verify-real/ddp_resume.py > "$OUT/ddp_resume.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
$V --format json bench/verify-real/ddp_resume.py > "$OUT/ddp_resume.json" 2>> "$LOG"
step "a public DDP script (pytorch/examples ddp-tutorial-series), nvidia-smi sampled"
cp -r bench/verify-real/ddp-tutorial-series /tmp/ddp && cd /tmp/ddp
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv -lms 100 \
    > "$OUT/ddp_public_smi.csv" 2>&1 & SMI=$!
$V --plot "$OUT/ddp_public.png" multigpu_torchrun.py -- 20 10 > "$OUT/ddp_public.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
kill $SMI
$V --format json multigpu_torchrun.py -- 20 10 > "$OUT/ddp_public.json" 2>> "$LOG"
cd - > /dev/null
nvidia-smi --query-gpu=index,uuid --format=csv > "$OUT/gpu_uuids.csv"
step "GPU tests"
timeout ${REST_S:-200} python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_verify_gpu.py \
    -k "rank" > "$OUT/gpu_tests.txt" 2>&1
echo "exit status $?" | tee -a "$LOG"
tar -C "$OUT" -czf /tmp/all.tgz --exclude all.tgz . && mv /tmp/all.tgz "$OUT/all.tgz"
step "done"
