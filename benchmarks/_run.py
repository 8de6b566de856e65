"""What the benchmark scripts share: run one ``hpcdl bench`` job and take the record it appended."""
from __future__ import annotations

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
