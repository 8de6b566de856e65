"""Put the repository and the test helpers on sys.path for every test."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcdl_testing import ROOT, check, mpirun, read_records  # noqa: E402,F401  (prefer: from hpcdl_testing import ...)


@pytest.fixture
def run_mpi():
    return mpirun
