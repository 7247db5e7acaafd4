#!/bin/bash
# Where verify's extra time goes on the LM run (issue 28, item 7): the script
# body's own seconds (plain: timed around runpy, which includes the program's
# `import torch`; verify: the child's run_seconds, torch already imported)
# beside the whole command's wall, with the account's sampler at 20 ms (as
# shipped) and at 1 s (a copy of the tree with that one change); then the
# fixed phases alone.
source bench/gpu_session_env.sh
rm -rf /tmp/slow && mkdir -p /tmp/slow && cp -r memlint /tmp/slow/
sed -i 's/interval: float = 0.02/interval: float = 1.0/' /tmp/slow/memlint/verify/account.py
cd .bench/progs/word_language_model
A="--accel --epochs 1 --save /tmp/lm-model.pt"
W() { local s=$(date +%s%N); "$@"; echo "wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >&2; }
B() { grep -o '"run_seconds": [0-9.]*' "$1"; }
{
for i in 1 2; do
  echo "== plain $i"; W python3 -c "import runpy,sys,time; sys.argv=['main.py']+'$A'.split(); t=time.perf_counter(); runpy.run_path('main.py', run_name='__main__'); print('body', time.perf_counter()-t)" | grep -E "^(body|wall)"
  echo "== verify $i"; W python3 -m memlint.verify.cli --timeout 300 --format json main.py -- $A > /tmp/v.json; B /tmp/v.json
  echo "== verify-slow-sampler $i"; PYTHONPATH=/tmp/slow:$PYTHONPATH W python3 -m memlint.verify.cli --timeout 300 --format json main.py -- $A > /tmp/s.json; B /tmp/s.json
done
for i in 1 2; do
  echo "== import torch + cuda init"; W python3 -c "import torch; torch.cuda.synchronize()"
  echo "== parent imports"; W python3 -c "import memlint.verify.cli, memlint.verify.runner, memlint.verify.report"
  echo "== static check"; W python3 -m memlint check main.py > /dev/null
  echo "== cuda_problem"; W python3 -c "from memlint.verify.runner import cuda_problem; print(cuda_problem('cuda'))"
  echo "== child imports"; W python3 -c "import torch, memlint.verify.child, memlint.verify.instrument, memlint.verify.meters, memlint.verify.account, memlint.verify.judges"
  echo "== child imports (importtime top)"; python3 -X importtime -c "import torch, memlint.verify.child, memlint.verify.instrument, memlint.verify.meters, memlint.verify.account, memlint.verify.judges" 2>&1 | sort -t'|' -k2 -n | tail -12
done
} 2>&1 | tee $OUT/locate_lm.txt
cp /tmp/v.json $OUT/locate_verify.json
