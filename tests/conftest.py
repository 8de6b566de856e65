"""Put the repository and the test helpers (tests/hpcdl_testing.py) on sys.path for every test,
and mark every test with its tier, the folder it lives in: unit (no MPI), mpi (real mpirun
ranks), slurm (a real Slurm cluster), box (emulated nodes). ``pytest -m "not mpi and not slurm"``
therefore starts no mpirun and no Slurm."""
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "mpi", "slurm", "box")

sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS.parent))


def pytest_collection_modifyitems(config, items):
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(TESTS)
        tier = rel.parts[0] if len(rel.parts) > 1 else None
        if tier not in TIERS:
            raise pytest.UsageError(f"{rel}: a test lives in one of tests/{{{','.join(TIERS)}}}/")
        item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(autouse=True)
def _no_cluster_box_in_unit_tests(request, monkeypatch):
    """A unit test sees no cluster box, whatever this machine has up (its settings file would
    change what a study submits and what a job exports)."""
    if request.node.get_closest_marker("unit"):
        monkeypatch.setenv("HPCDL_BOX", str(TESTS / "no-such-box.json"))
