"""What more than one file of the MPI tier reads from one launch."""
import pytest

from hpcdl_testing import BENCH_QUICK, spied


@pytest.fixture(scope="session")
def bench_two_ranks(tmp_path_factory):
    """``hpcdl bench allreduce`` over every backend and compression on two ranks, under the
    exchange spy: its result, its record file, and the methods it timed per backend label.
    test_bench checks its table and record; test_train_backends that each training step calls
    what it timed."""
    tmp = tmp_path_factory.mktemp("bench2")
    out = tmp / "bench.jsonl"
    res, calls = spied(2, tmp / "calls.json",
                       ["bench", "allreduce", "-B", "all", "-C", "all", *BENCH_QUICK,
                        "--results", str(out), "--tag", "t"], timeout=240)
    return res, out, calls
