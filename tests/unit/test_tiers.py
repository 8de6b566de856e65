"""Markers follow folders: selecting away mpi, slurm and box leaves only tests that start none."""
import subprocess
import sys

from hpcdl_testing import ROOT


def _collected(*marker):
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *marker],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return [ln for ln in res.stdout.splitlines() if "::" in ln]


def test_not_mpi_slurm_or_box_selects_only_unit_tests():
    ids = _collected("-m", "not mpi and not slurm and not box")
    assert ids and all(i.startswith("tests/unit/") for i in ids)
    mpi = _collected("-m", "mpi")
    assert mpi and all(i.startswith("tests/mpi/") for i in mpi)
    box = _collected("-m", "box")
    assert box and all(i.startswith("tests/box/") for i in box)
