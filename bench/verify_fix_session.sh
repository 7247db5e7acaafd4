#!/bin/bash
# `memlint verify --fix --unsafe-fixes` on the GPU machine, from the
# repository root: the fixtures that have a fix for each of MEM001, MEM003,
# MEM004, MEM005 and MEM007, and a public training program, unmodified:
# pytorch/examples' DCGAN (commit 77f55b9, dcgan/main.py) on FakeData,
# resuming from the checkpoints its own first run saved. Carry `.whl` and
# `.review/pytorch+examples` (the exported example). Writes to $OUT:
# session.log, fix_fixtures.json, fix_fixtures.txt, dcgan_first_run.log,
# dcgan_fix.txt, dcgan_fix.json, dcgan_fix.png.
set -u
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
FIXTURES="fixtures/whole_dataset_to_device/tensor_dataset_loader.py
fixtures/tensor_history_kept/classifier_training_loop.py
fixtures/tensor_history_kept/per_step_and_episode_lists.py
fixtures/tensor_history_kept/eval_outputs_kept.py
fixtures/grad_in_inference/eval_helpers.py
fixtures/dataloader_without_pin_memory/image_trainer.py
fixtures/load_without_map_location/resume_training.py"
step "verify --fix fixtures (json)"
python3 -m memlint.verify.cli --fix --unsafe-fixes --format json --timeout 120 $FIXTURES \
    > "$OUT/fix_fixtures.json" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
step "verify --fix fixtures (text)"
python3 -m memlint.verify.cli --fix --unsafe-fixes --timeout 120 $FIXTURES \
    > "$OUT/fix_fixtures.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
DCGAN=.review/pytorch+examples/dcgan/main.py
ARGS="--dataset fake --accel --niter 1 --manualSeed 1"
step "dcgan: a first run saves the checkpoints"
python3 $DCGAN $ARGS --outf /tmp/dcgan-first > "$OUT/dcgan_first_run.log" 2>&1
echo "exit status $?" | tee -a "$LOG"
RESUME="$ARGS --outf /tmp/dcgan-resume --netG /tmp/dcgan-first/netG_epoch_0.pth --netD /tmp/dcgan-first/netD_epoch_0.pth"
step "dcgan: verify --fix --unsafe-fixes, resuming (text, plot)"
python3 -m memlint.verify.cli --fix --unsafe-fixes --timeout 300 --plot "$OUT/dcgan_fix.png" \
    $DCGAN -- $RESUME > "$OUT/dcgan_fix.txt" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
step "dcgan: the same, json"
python3 -m memlint.verify.cli --fix --unsafe-fixes --timeout 300 --format json \
    $DCGAN -- $RESUME > "$OUT/dcgan_fix.json" 2>> "$LOG"
echo "exit status $?" | tee -a "$LOG"
cat "$OUT/fix_fixtures.txt" "$OUT/dcgan_fix.txt"
step end
