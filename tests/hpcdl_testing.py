"""Test helpers: run hpcdl under real mpirun, always under a timeout (import as hpcdl_testing)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl.launch import local  # noqa: E402


def mpirun(np, args, timeout=180, env=None, cwd=None):
    """Run ``python -m hpcdl ARGS`` on ``np`` real MPI ranks; fail the test on a timeout."""
    argv = local.mpirun_command(np, local.hpcdl_command(args))
    full_env = dict(os.environ, PYTHONPATH=str(ROOT))
    full_env.update(env or {})
    res = local.run(argv, timeout=timeout, env=full_env, cwd=cwd)
    if res.timed_out:
        pytest.fail(f"mpirun -np {np} timed out after {timeout} s (hang?)\n"
                    f"stdout:\n{res.stdout[-3000:]}\nstderr:\n{res.stderr[-3000:]}")
    return res


def check(res):
    assert res.returncode == 0, (f"exit {res.returncode}\nstdout:\n{res.stdout[-4000:]}\n"
                                 f"stderr:\n{res.stderr[-4000:]}")
    return res


def read_records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]

