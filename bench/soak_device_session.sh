source bench/gpu_session_env.sh
nproc >> $LOG; uptime >> $LOG
step "soak new (c10cc73+)"
python3 bench/server_soak.py --edits 1000 --bursts 8 --json $OUT/soak_new.json 2>&1 | tail -5 | tee -a $LOG
step "soak old (912cbe8)"
PYTHONPATH=/tmp/site:$PWD/.bench/old python3 bench/server_soak.py --edits 1000 --bursts 8 --json $OUT/soak_old.json 2>&1 | tail -5 | tee -a $LOG
step "soak new again"
python3 bench/server_soak.py --edits 1000 --bursts 8 --json $OUT/soak_new2.json 2>&1 | tail -5 | tee -a $LOG
step done
