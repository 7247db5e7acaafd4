#!/bin/bash
# Issue 28 on two real programs that have findings: DCGAN resumed from its own
# checkpoints (MEM007's two loads in the default set; its loader's MEM005 with
# --preview) and the word-language model (three MEM001 lines, in preview).
# Run from the repository root on the GPU machine with `.whl` and `.bench/progs`
# carried: `bash bench/verify-overhead/findings_session.sh explain` then
# `... pairs-dcgan` and `... pairs-lm` (one call each: a call may last 10 min).
source bench/gpu_session_env.sh
ARGS_DCGAN="--dataset fake --accel --niter 1 --manualSeed 1 --outf /tmp/dcgan-out"
RESUME="--netG /tmp/dcgan-ckpt/netG_epoch_0.pth --netD /tmp/dcgan-ckpt/netD_epoch_0.pth"
ARGS_LM="--accel --epochs 1 --save /tmp/lm-model.pt"
VERIFY="python3 -m memlint.verify.cli --timeout 300"
checkpoints() {
  [ -f /tmp/dcgan-ckpt/netD_epoch_0.pth ] && return
  step checkpoints
  (cd .bench/progs/dcgan && python3 main.py $ARGS_DCGAN --outf /tmp/dcgan-ckpt \
     > "$OUT/dcgan_checkpoints.log" 2>&1)
  ls -l /tmp/dcgan-ckpt >> "$LOG"
}
step warm
python3 -c "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
checkpoints
case "$1" in
  explain)
    for format in text json; do
      step "dcgan explain $format"
      (cd .bench/progs/dcgan && $VERIFY --preview --explain-peak --format $format \
         --plot "$OUT/dcgan_resume_explain.png" main.py -- $ARGS_DCGAN $RESUME \
         > "$OUT/dcgan_resume_explain.$format" 2> "$OUT/dcgan_resume_explain.$format.err")
      step "lm explain $format"
      (cd .bench/progs/word_language_model && $VERIFY --preview --explain-peak \
         --format $format --plot "$OUT/lm_explain.png" main.py -- $ARGS_LM \
         > "$OUT/lm_explain.$format" 2> "$OUT/lm_explain.$format.err")
    done ;;
  pairs-dcgan)
    step "pairs dcgan-resume"
    python3 bench/verify-overhead/pairs.py dcgan-resume --pairs 8 --label findings \
      --out "$OUT/pairs_findings_dcgan.jsonl" ;;
  pairs-lm)
    step "pairs lm --preview"
    python3 bench/verify-overhead/pairs.py lm --pairs 8 --label findings \
      --verify-flag=--preview --out "$OUT/pairs_findings_lm.jsonl" ;;
esac
step done
cp "$LOG" "$OUT/session_$1.log"
