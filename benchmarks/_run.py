"""What the benchmark scripts share: run one ``hpcdl bench`` job and take the record it appended;
the cluster box's script, its environment for mpirun, and an mpirun over its hosts."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hpcdl import records
from hpcdl.launch import local


def bench_record(argv, results, timeout, env, what):
    """Run ``argv`` (a job that appends one record to ``results``); return (its Result, the record).

    A failed or timed-out job, or one that appended nothing, ends the script (exit status 1)
    after printing the ends of its output and ``what`` failed.
    """
    before = len(records.read(results)) if Path(results).exists() else 0
    res = local.run(argv, timeout=timeout, env=env)
    recs = records.read(results) if Path(results).exists() else []
    if res.returncode != 0 or res.timed_out or len(recs) <= before:
        print(res.stdout[-3000:], res.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{what} failed (exit {res.returncode}, timed out {res.timed_out}, "
                         f"{len(recs) - before} record(s) appended to {results})")
    return res, recs[before]


BOX = Path(__file__).resolve().parents[1] / "scripts" / "cluster-box.sh"


def box_env() -> dict:
    """What mpirun needs to start ranks on the box's hosts (``cluster-box.sh env``)."""
    out = subprocess.run([str(BOX), "env"], check=True, capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def box_mpirun(hosts: str, words):
    """mpirun of ``hpcdl words`` with one rank per host of ``hosts`` (comma-separated), unbound:
    each host's daemon would otherwise pin its rank to core 0."""
    return local.mpirun_command(len(hosts.split(",")), local.hpcdl_command(words),
                                oversubscribe=False, bind="none", extra=["-H", hosts])
