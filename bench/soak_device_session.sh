# The editor-server soak on an idle machine (the GPU machine's CPUs): this
# tree twice, and an older memlint between them where .bench/old holds one
# (`mkdir -p .bench/old && git archive REV memlint | tar -x -C .bench/old`;
# a REV from 779a138 on: the soak file holds the MEM002 hang fixture, which
# memlint before it spends 60 s on). Each run also times `memlint check` of
# the same file. Before the run: pip download pygls lsprotocol cattrs attrs
# typing_extensions (py3.12 wheels) into .whl/; run it there with .whl (and
# .bench/old) carried; results land in $OUT.
source bench/gpu_session_env.sh
nproc >> $LOG; uptime >> $LOG
step "soak new (this tree)"
python3 bench/server_soak.py --edits 1000 --bursts 8 --json $OUT/soak_new.json 2>&1 | tail -5 | tee -a $LOG
if [ -d .bench/old/memlint ]; then
  step "soak old (.bench/old)"
  PYTHONPATH=/tmp/site:$PWD/.bench/old python3 bench/server_soak.py --edits 1000 --bursts 8 --json $OUT/soak_old.json 2>&1 | tail -5 | tee -a $LOG
fi
step "phases: the server's path (1, 2, 3 kept workers) and the check alone, no editor"
for shares in 1 2 3; do python3 bench/soak_phases.py --shares $shares 2>&1 | tee -a $LOG; done
step "each rule's share of the walk"
python3 bench/walk_costs.py 2>&1 | tee -a $LOG
step "soak new again"
python3 bench/server_soak.py --edits 1000 --bursts 8 --json $OUT/soak_new2.json 2>&1 | tail -5 | tee -a $LOG
step done
