# The editor-server soak on an idle machine (the GPU machine's CPUs), the
# current tree beside an older memlint in the same session. Before the run:
#   mkdir -p .bench/old && git archive 912cbe8 memlint | tar -x -C .bench/old
#   pip download pygls lsprotocol cattrs attrs typing_extensions (py3.12 wheels) into .whl/
# then run it there with .whl and .bench/old carried; results land in $OUT.
source bench/gpu_session_env.sh
nproc >> $LOG; uptime >> $LOG
step "soak new (this tree)"
python3 bench/server_soak.py --edits 1000 --bursts 8 --json $OUT/soak_new.json 2>&1 | tail -5 | tee -a $LOG
step "soak old (912cbe8)"
PYTHONPATH=/tmp/site:$PWD/.bench/old python3 bench/server_soak.py --edits 1000 --bursts 8 --json $OUT/soak_old.json 2>&1 | tail -5 | tee -a $LOG
step "soak new again"
python3 bench/server_soak.py --edits 1000 --bursts 8 --json $OUT/soak_new2.json 2>&1 | tail -5 | tee -a $LOG
step done
