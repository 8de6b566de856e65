"""The asynchronous parameter server's rules that need no MPI: when a held worker may go on,
the staleness summary, and the options."""
import argparse

import pytest

from hpcdl.train import asyncps, control
from hpcdl.train.args import slow_rank as _slow_rank


def _server(bound, pushes, active, stop=None):
    s = object.__new__(asyncps.Server)
    s.bound, s.stop_reason, s.active = bound, stop, set(active)
    s.log = asyncps.ServerLog(pushes=dict(pushes))
    return s


def test_a_worker_more_than_s_pushes_ahead_of_the_slowest_running_is_held():
    s = _server(2, {0: 7, 1: 5, 2: 4}, active=[0, 1, 2])
    assert sorted(s._releasable({0: 0.0, 1: 0.0})) == [1]       # 7 - 4 > 2, 5 - 4 <= 2


def test_a_worker_that_has_made_its_steps_bounds_no_one():
    s = _server(1, {0: 9, 1: 3}, active=[0])                     # worker 1 is done
    assert s._releasable({0: 0.0}) == [0]
    s = _server(1, {0: 9, 1: 9}, active=[])
    assert s._releasable({0: 0.0, 1: 0.0}) == [0, 1]


def test_every_held_worker_goes_on_when_stopping_or_without_a_bound():
    assert sorted(_server(1, {0: 9, 1: 1}, [0, 1], stop="target reached")._releasable(
        {0: 0.0})) == [0]
    assert _server(None, {0: 90, 1: 1}, [0, 1])._releasable({0: 0.0}) == [0]


def test_staleness_summary_gives_the_histogram_and_its_figures():
    out = asyncps.staleness_summary([0, 1, 1, 2, 5] + [1] * 15)
    assert out["n"] == 20 and out["max"] == 5 and out["p95"] == 2
    assert out["hist"] == {"0": 1, "1": 17, "2": 1, "5": 1}
    assert out["mean"] == pytest.approx(24 / 20)
    assert asyncps.staleness_summary([]) == {"n": 0}


def test_staleness_and_slow_rank_options():
    assert asyncps.staleness_arg("0") == 0 and asyncps.staleness_arg("3") == 3
    assert asyncps.staleness_arg("inf") is None and asyncps.staleness_label(None) == "inf"
    for bad in ("-1", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            asyncps.staleness_arg(bad)
    assert _slow_rank("1:2") == (1, 2.0, None) and _slow_rank("0:1.5") == (0, 1.5, None)
    assert _slow_rank("1:3ms") == (1, None, 0.003)
    for bad in ("1", "a:2", "1:0.5", "-1:2", "1:inf", "1:-2ms", "1:xms"):
        with pytest.raises(argparse.ArgumentTypeError):
            _slow_rank(bad)


def test_workers_are_every_rank_or_every_rank_but_the_dedicated_server():
    assert asyncps.workers_of(3, False) == [0, 1, 2]
    assert asyncps.workers_of(3, True) == [1, 2]
    with pytest.raises(asyncps.UserError):
        asyncps.workers_of(1, True)


def test_poll_returns_the_first_true_value_without_spinning():
    calls = []

    def test():
        calls.append(1)
        return len(calls) == 4 and "done"
    assert control.poll(test, 1e-4, 1e-3) == "done" and len(calls) == 4
