#!/bin/bash
# Issue "verify II", real programs: three public training programs from
# pytorch/examples (commit 77f55b9), unmodified, run by `memlint verify` on
# the GPU machine, and the overhead of verify on one of them. Carry `.whl` and
# `.review/pytorch+examples` (dcgan/, word_language_model/ with a synthetic
# corpus in its data/wikitext-2/, imagenet/). Writes to $OUT.
set -u
source bench/gpu_session_env.sh  # $OUT, $LOG, the wheels, PYTHONPATH, step
EX=.review/pytorch+examples
V="python3 -m memlint.verify.cli"
# 1. a language model: word_language_model, one epoch of a synthetic corpus
(cd $EX/word_language_model && $V --timeout 300 --plot "$OUT/lm.png" main.py -- --accel --epochs 1 \
    > "$OUT/lm.txt" 2>&1; echo "exit $?" >> "$OUT/lm.txt")
# 2. an image classifier: imagenet/main.py --dummy (FakeData), stopped by --timeout mid-epoch
$V --timeout 60 $EX/imagenet/main.py -- --dummy -a resnet18 -b 128 -j 4 > "$OUT/imagenet.txt" 2>&1
echo "exit $?" >> "$OUT/imagenet.txt"
# 3. a GAN (DCGAN, FakeData): the overhead of verify, 3 runs each way, 4 workers
ARGS="--dataset fake --accel --niter 1 --manualSeed 1 --workers 4 --outf /tmp/dcgan-o"
for i in 1 2 3; do
  python3 bench/timed_run.py plain -- python3 $EX/dcgan/main.py $ARGS
  python3 bench/timed_run.py verify -- $V --timeout 300 $EX/dcgan/main.py -- $ARGS
done > "$OUT/dcgan_overhead.jsonl"
$V --timeout 300 $EX/dcgan/main.py -- $ARGS > "$OUT/dcgan.txt" 2>&1
cat "$OUT/lm.txt" "$OUT/imagenet.txt" "$OUT/dcgan.txt" "$OUT/dcgan_overhead.jsonl"
