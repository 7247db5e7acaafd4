#!/bin/bash
# Issue 24's DCGAN check on the GPU machine, from the repository root:
# unmodified pytorch/examples DCGAN (commit 77f55b9, dcgan/main.py) checked
# with the default rule set (no --preview, no --select) and with
# $DCGAN_RULES (default `--preview`: MEM007 runs in preview since sets
# 30-32), and verified with $DCGAN_RULES: a first run with --accel saves its
# checkpoints, then `memlint check` and `memlint verify` of a run resuming
# from them. Carry `.whl` and `.review/pytorch+examples` (the exported
# example). Writes to $OUT: session.log, dcgan_check.txt (default rules),
# dcgan_check_rules.txt, dcgan_first_run.log, dcgan_verify.txt,
# dcgan_verify.json.
set -u
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
unset MEMLINT_PREVIEW
RULES=${DCGAN_RULES---preview}
DCGAN=.review/pytorch+examples/dcgan/main.py
ARGS="--dataset fake --accel --niter 1 --manualSeed 1"
step "dcgan: memlint check, default rules"
python3 -m memlint check --no-cache $DCGAN > "$OUT/dcgan_check.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
step "dcgan: memlint check $RULES"
python3 -m memlint check --no-cache $RULES $DCGAN > "$OUT/dcgan_check_rules.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
step "dcgan: a first run saves the checkpoints"
python3 $DCGAN $ARGS --outf /tmp/dcgan-first > "$OUT/dcgan_first_run.log" 2>&1
echo "exit status $?" | tee -a "$LOG"
RESUME="$ARGS --outf /tmp/dcgan-resume --netG /tmp/dcgan-first/netG_epoch_0.pth --netD /tmp/dcgan-first/netD_epoch_0.pth"
step "dcgan: verify, resuming (text)"
python3 -m memlint.verify.cli --timeout 300 $RULES $DCGAN -- $RESUME > "$OUT/dcgan_verify.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
step "dcgan: verify, resuming (json)"
python3 -m memlint.verify.cli --timeout 300 --output-format json $RULES $DCGAN -- $RESUME \
    > "$OUT/dcgan_verify.json" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
cat "$OUT/dcgan_check.txt" "$OUT/dcgan_check_rules.txt" "$OUT/dcgan_verify.txt"
step end
