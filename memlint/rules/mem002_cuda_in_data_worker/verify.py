"""How `memlint verify` measures MEM002: the worker processes that created a CUDA context, or the
fork error."""

from __future__ import annotations

from memlint.verify.judges import (CONFIRMED, NOT_CONFIRMED, NOT_REACHED, Judgement, Record,
                                   RunFacts, size_range, times)

#: the class in memlint/verify/meters.py that probes the flagged line
METER = "WorkerHitsMeter"
#: judged from the worker processes even when the line never ran in the main one
JUDGED_WITHOUT_HITS = True


_FORK_ERROR = "Cannot re-initialize CUDA in forked subprocess"


def judge(record: Record, facts: RunFacts) -> Judgement:
    contexts = facts.contexts or {}
    workers = {pid: used for pid, used in contexts.get("worker_context_bytes", {}).items()
               if used > 0}
    error = facts.outcome.get("error", {}).get("message", "")
    fork_errors = [e for e in facts.worker_errors if _FORK_ERROR in e]
    numbers = {"worker_errors": len(facts.worker_errors), "worker_contexts": len(workers),
               "worker_context_bytes": workers,
               "main_process_bytes": contexts.get("main_process_bytes", 0),
               "hits_in_main": record["hits"], "hits_in_workers": facts.worker_hits,
               "source": contexts.get("source")}
    if workers:
        each = size_range(workers.values())
        return Judgement(CONFIRMED, f"{len(workers)} worker process"
                         f"{'es' if len(workers) > 1 else ''} each created a CUDA context, "
                         f"{each} each", numbers)
    if fork_errors:
        return Judgement(CONFIRMED, f"raised '{_FORK_ERROR}' {times(len(fork_errors))} in "
                         "DataLoader workers (under spawn/forkserver, the default from "
                         "Python 3.14, each worker holds its own CUDA context instead)", numbers)
    if _FORK_ERROR in error:
        return Judgement(CONFIRMED, f"a DataLoader worker failed with '{_FORK_ERROR}' (under "
                         "spawn/forkserver, the default from Python 3.14, each worker holds "
                         "its own CUDA context instead)", numbers)
    if record["hits"] == 0 and facts.worker_hits == 0:
        return Judgement(NOT_REACHED, "the line never ran in this process or a forked worker "
                         "(spawned workers run the file unprobed)", numbers)
    if facts.worker_hits == 0:
        return Judgement(NOT_CONFIRMED, f"ran {times(record['hits'])} in the main process "
                         "(no worker processes): no extra CUDA context measured", numbers)
    return Judgement(NOT_CONFIRMED, f"ran {times(facts.worker_hits)} in worker processes, "
                     "but no worker was seen holding a CUDA context", numbers)


#: its fix changes no number `verify --fix` compares
QUANTITIES = ()
