#!/usr/bin/env python
"""How a 3-rank Horovod process ends, over many runs: the check of ``tests/mpi/test_comm.py``
(three Horovod backends, one per compression, each averaging on every rank) run again and again
with core dumps on, counting exit statuses, signals, core files and hangs.

By default each run ends as the test's check and hpcdl's commands do (``cli._leave``: atexit
handlers, MPI finalised, no module teardown); ``--teardown`` ends it with ``sys.exit`` and
Python's whole teardown, as the check did before. Run it with a stack's own interpreter to
measure that stack (``.venv-tf2.15/bin/python -m benchmarks.exit_repeat``).

    python -m benchmarks.exit_repeat --runs 100 [--teardown]

Core files go where the kernel's core_pattern says; set it to a folder first to keep them
(``echo '/tmp/cores/core.%e.%p' > /proc/sys/kernel/core_pattern``) and name it with --cores.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from hpcdl.launch import local

TEST = ROOT / "tests" / "mpi" / "test_comm.py"


def check_script(teardown: bool) -> str:
    """The test's check, as it is in the test file, ending with ``sys.exit`` if ``teardown``."""
    text = TEST.read_text()
    body = re.search(r"CHECK = textwrap\.dedent\(r'''(.*?)'''\)", text, re.S).group(1)
    import textwrap
    body = textwrap.dedent(body)
    end = "cli._leave(code)"
    if end not in body:
        raise SystemExit(f"{TEST}: its check no longer ends with {end!r}")
    return body.replace(end, "pass") if teardown else body      # then its sys.exit(code)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--teardown", action="store_true",
                    help="end with sys.exit and Python's whole teardown")
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--cores", default=None, help="the folder core_pattern writes to")
    opts = ap.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    cores = Path(opts.cores) if opts.cores else None
    before = set(cores.iterdir()) if cores else set()
    ends = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "check_comm.py"
        script.write_text(check_script(opts.teardown))
        env = dict(os.environ, PYTHONPATH=str(ROOT), HPCDL_RING_PIECE_BYTES="4096")
        argv_ = local.mpirun_command(opts.ranks, [sys.executable, str(script), "horovod"])
        t0 = time.monotonic()
        for k in range(1, opts.runs + 1):
            res = local.run(argv_, timeout=opts.timeout, env=env)
            ok = f"on {opts.ranks} rank(s): 0 failure(s)" in res.stdout
            end = ("hung (timeout)" if res.timed_out else
                   f"exit {res.returncode}" + ("" if ok else ", check not passed"))
            if "signal 11" in res.stderr or "Segmentation fault" in res.stderr:
                end += ", a rank got signal 11"
            ends[end] += 1
            if end != "exit 0":
                print(f"run {k}: {end}\n{res.stderr[-1500:]}", file=sys.stderr)
            print(f"\r{k}/{opts.runs} runs, {time.monotonic() - t0:.0f} s", end="",
                  file=sys.stderr, flush=True)
    print(file=sys.stderr)
    new = sorted(set(cores.iterdir()) - before) if cores else []
    print(f"# {opts.runs} runs of the {opts.ranks}-rank Horovod check, ending with "
          f"{'sys.exit (whole teardown)' if opts.teardown else 'cli._leave'}, {sys.executable}")
    for end, n in ends.most_common():
        print(f"  {end}: {n}")
    print(f"  core files: {len(new) if cores else 'not looked for (no --cores)'}"
          + "".join(f"\n    {p}" for p in new))
    return 0 if set(ends) == {"exit 0"} and not new else 1


if __name__ == "__main__":
    sys.exit(main())
