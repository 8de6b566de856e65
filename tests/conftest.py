"""Put the repository and the test helpers on sys.path for every test."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcdl_testing import mpirun  # noqa: E402


@pytest.fixture
def run_mpi():
    return mpirun
