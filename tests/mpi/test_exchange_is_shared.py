"""The allreduce benchmark times the exchange function a training step calls, for every backend."""
import json
import os
import sys

import pytest

from hpcdl_testing import ROOT, check
from hpcdl.launch import local

SPY = ROOT / "tests" / "mpi" / "exchange_spy.py"
# every backend class, in the step's graph and on a flat buffer, with and without a codec
CASES = [("horovod", "none"), ("horovod", "int8"), ("mpi", "int8"), ("ring", "fp16"), ("ps", "none")]


def _spied(tmp_path, name, args, timeout=240):
    out = tmp_path / f"{name}.json"
    argv = local.mpirun_command(2, [sys.executable, str(SPY), str(out), *args])
    res = local.run(argv, timeout=timeout, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert not res.timed_out, f"timed out\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    check(res)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def bench_calls(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    return _spied(tmp, "bench", ["bench", "allreduce", "-B", "all", "-C", "all", "-b", "4K",
                                 "-e", "4K", "-n", "2", "-w", "1", "--results", "-"])


@pytest.mark.parametrize("backend,compression", CASES)
def test_bench_and_training_call_the_same_exchange_function(tmp_path, bench_calls, backend,
                                                            compression):
    label = backend if compression == "none" else f"{backend}+{compression}"
    train = _spied(tmp_path, "train", ["train", "--workload", "expmlp", "--steps", "12",
                                       "--warmup", "2", "--probes", "0", "--backend", backend,
                                       "--compression", compression, "--results", "-"])
    assert train[label], train                      # the step ran the backend's exchange
    assert train[label] == bench_calls[label]       # and the bench timed exactly that
    want = "HorovodBackend.average" if (backend, compression) == ("horovod", "none") else None
    if want:
        assert train[label] == [want]               # in the step's graph, as the tape does
