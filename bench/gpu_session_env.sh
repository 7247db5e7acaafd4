# Sourced by every GPU session script (`source bench/gpu_session_env.sh`), from
# the repository root with `.whl` carried: sets $OUT (default /tmp/memlint-out)
# and $LOG ($OUT/session.log), installs libcst and PyYAML from the carried
# wheels (the GPU machine has neither), puts memlint on PYTHONPATH, writes the
# machine (GPUs, driver, Python, torch) at the top of $LOG, and defines
# `step NAME`, which marks a step with the time in $LOG and on the terminal.
OUT=${OUT:-/tmp/memlint-out}
mkdir -p "$OUT"
LOG="$OUT/session.log"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  python3 -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
} > "$LOG" 2>&1
step() { echo "== $1 $(date +%T)" | tee -a "$LOG"; }
