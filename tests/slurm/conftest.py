"""The Slurm tests run on the cluster box of the session (fixture ``slurm_cluster`` in
tests/conftest.py: scripts/cluster-box.sh up 4): munge, slurmctld and four slurmd as nodes n1..n4,
each in its own network namespace and CPU cgroup."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_testing import JOB_EXPORTS, ROOT  # noqa: E402

from hpcdl.launch import jobscript  # noqa: E402


@pytest.fixture(scope="session")
def software(slurm_cluster):
    """This venv, with the settings jobs on the box need."""
    return jobscript.Software.here(workdir=ROOT, exports=JOB_EXPORTS)
