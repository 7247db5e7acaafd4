#!/bin/bash
# Issue 24's done-when on the GPU: unmodified pytorch/examples DCGAN (commit
# 77f55b9), whose CUDA is behind --accel. `memlint check` must report its
# loader (MEM005) and both torch.load lines (MEM007); `memlint verify ... --
# --accel` must measure them. The loads run only when --netG/--netD name
# checkpoints, so a plain first epoch writes them. Carry `.whl` and
# `.bench/progs/dcgan` (copied from /work/.mirror/pytorch+examples).
set -u
source bench/gpu_session_env.sh
D=.bench/progs/dcgan
ARGS="--dataset fake --accel --niter 1 --manualSeed 1 --workers 4"
step check
python3 -m memlint check --no-cache $D/main.py > "$OUT/check.txt" 2>&1
step "plain epoch: writes the checkpoints the loads read"
python3 $D/main.py $ARGS --outf /tmp/dcgan-first > "$OUT/first.txt" 2>&1
ls -la /tmp/dcgan-first/*.pth >> "$OUT/first.txt"
step verify
python3 -m memlint.verify.cli --timeout 240 $D/main.py -- $ARGS --outf /tmp/dcgan-second \
    --netG /tmp/dcgan-first/netG_epoch_0.pth --netD /tmp/dcgan-first/netD_epoch_0.pth \
    > "$OUT/verify.txt" 2>&1
echo "exit $?" >> "$OUT/verify.txt"
step done
cat "$OUT/check.txt" "$OUT/verify.txt"
