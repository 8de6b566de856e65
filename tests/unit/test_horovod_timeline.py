"""benchmarks/horovod_timeline.py reads Horovod's timeline format into the phases it prints."""
import importlib.util
import json

import pytest

from hpcdl_testing import ROOT

_spec = importlib.util.spec_from_file_location("horovod_timeline",
                                               ROOT / "benchmarks" / "horovod_timeline.py")
tl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tl)


def _op(t, ready, start, mpi, end, shape):
    """The events Horovod 0.28 writes for one allreduce on 2 ranks (one timeline 'process' per
    tensor: negotiation with an instant per rank's request, then the work with MPI inside)."""
    return [{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": t, "pid": 1},
            *({"ph": "X", "name": str(r), "ts": ts, "pid": 1, "dur": 0} for r, ts in enumerate(ready)),
            {"ph": "E", "ts": max(ready), "pid": 1},
            {"ph": "B", "name": "ALLREDUCE", "ts": start, "pid": 1},
            {"ph": "B", "name": "MPI_ALLREDUCE", "ts": mpi[0], "pid": 1},
            {"ph": "E", "ts": mpi[1], "pid": 1},
            {"ph": "E", "ts": end, "pid": 1, "args": {"dtype": "float32", "shape": shape}}]


def test_phases_of_each_size_after_its_barrier(tmp_path):
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "x"}}]
    t = 0
    for k in range(3):                      # barrier, then a [1024] op: 3 times, first is warm-up
        events += _op(t, [t, t + 2], t + 5, (t + 6, t + 10), t + 12, "[]")
        b_end = t + 12
        extra = 1000 if k == 0 else 0       # the warm-up is slow and must not count
        first, last = b_end + 200 + extra, b_end + 300 + extra + 10 * k
        events += _op(first, [last, first], last + 9, (last + 10, last + 30), last + 40, "[1024]")
        t = last + 100
    path = tmp_path / "timeline.json"
    # as a killed run leaves it: no closing bracket, a trailing comma
    path.write_text(json.dumps(events)[:-1] + ",\n")
    ops = tl.allreduce_ops(tl.read_timeline(path))
    assert [o["shape"] for o in ops] == ["[]", "[1024]"] * 3
    rows = tl.phases(ops, skip=1)
    assert set(rows) == {"[1024]"}
    r = rows["[1024]"]
    assert r["n"] == 2
    assert r["first"] == 200 and r["last"] == pytest.approx(315)     # median of 310 and 320
    assert r["skew"] == pytest.approx(115) and r["start"] == 9
    assert r["mpi"] == 20 and r["op"] == 31
