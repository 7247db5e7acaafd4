"""The overhead of `memlint verify` on real programs: interleaved pairs, the
program run plainly, then under `memlint verify` (the command a user types),
each timed from outside as wall seconds of the whole command.

    python bench/verify-overhead/pairs.py --pairs 8 --memlint . --out OUT.jsonl PROGRAM...

PROGRAM is `NAME` of PROGRAMS below (run from its own folder under
`--programs`). `--memlint ROOT` names the memlint tree the verify runs import
(a checkout of an older commit gives the "before" figures). Each verify run
asks for `--format json`; its report (the last one per program) is kept beside
OUT, for the peaks and the breakdown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

#: name -> (folder under --programs, script, its arguments)
PROGRAMS = {
    "dcgan": ("dcgan", "main.py",
              ["--dataset", "fake", "--accel", "--niter", "1", "--manualSeed", "1",
               "--outf", "/tmp/dcgan-out"]),
    "lm": ("word_language_model", "main.py", ["--accel", "--epochs", "1", "--save",
                                              "/tmp/lm-model.pt"]),
    # DCGAN resumed from its own checkpoints (made first by `findings_session.sh`): the two
    # `torch.load` lines MEM007 reports run, so verify's probes on them run too
    "dcgan-resume": ("dcgan", "main.py",
                     ["--dataset", "fake", "--accel", "--niter", "1", "--manualSeed", "1",
                      "--outf", "/tmp/dcgan-out", "--netG", "/tmp/dcgan-ckpt/netG_epoch_0.pth",
                      "--netD", "/tmp/dcgan-ckpt/netD_epoch_0.pth"]),
}


def timed(command: list[str], cwd: str, env: dict, stdout) -> tuple[float, int]:
    start = time.perf_counter()
    status = subprocess.run(command, cwd=cwd, env=env, stdout=stdout,
                            stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - start, status


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("programs", nargs="+", choices=sorted(PROGRAMS))
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--memlint", default=".", help="the memlint tree verify imports")
    parser.add_argument("--programs-root", default=".bench/progs")
    parser.add_argument("--label", default="after")
    parser.add_argument("--out", required=True)
    parser.add_argument("--verify-flag", action="append", default=[],
                        help="a flag for verify (e.g. --no-peak-breakdown)")
    options = parser.parse_args()
    root = os.path.abspath(options.memlint)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p and os.path.abspath(p) != os.path.abspath(".")]])
    summary = {}
    with open(options.out, "a", encoding="utf-8") as out:
        for name in options.programs:
            folder, script, args = PROGRAMS[name]
            cwd = os.path.join(os.path.abspath(options.programs_root), folder)
            plain_cmd = [sys.executable, script, *args]
            verify_cmd = [sys.executable, "-m", "memlint.verify.cli", "--timeout", "300",
                          "--format", "json", *options.verify_flag, script, "--", *args]
            report_path = f"{os.path.splitext(options.out)[0]}.{options.label}.{name}.json"
            plain, verify = [], []
            for pair in range(options.pairs):
                wall, status = timed(plain_cmd, cwd, env, subprocess.DEVNULL)
                plain.append(wall)
                out.write(json.dumps({"label": options.label, "program": name, "pair": pair,
                                      "run": "plain", "wall_s": round(wall, 3),
                                      "status": status}) + "\n")
                with open(report_path, "w", encoding="utf-8") as report:
                    wall, status = timed(verify_cmd, cwd, env, report)
                verify.append(wall)
                out.write(json.dumps({"label": options.label, "program": name, "pair": pair,
                                      "run": "verify", "wall_s": round(wall, 3),
                                      "status": status}) + "\n")
                out.flush()
            ratios = [v / p - 1 for p, v in zip(plain, verify)]
            summary[name] = {"label": options.label, "pairs": options.pairs,
                             "median_plain_s": round(statistics.median(plain), 3),
                             "median_verify_s": round(statistics.median(verify), 3),
                             "median_pair_overhead": round(statistics.median(ratios), 4),
                             "overhead_of_medians": round(statistics.median(verify)
                                                          / statistics.median(plain) - 1, 4),
                             "command": " ".join(verify_cmd), "cwd": folder}
            out.write(json.dumps({"summary": summary[name]}) + "\n")
            print(json.dumps(summary[name]), flush=True)


if __name__ == "__main__":
    main()
