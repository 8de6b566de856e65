"""Horovod's timeline summarised: activities per step, fused tensors counted once, a timeline
still being written read up to its last whole event."""
import json

import pytest

from hpcdl.train import timeline


def _events():
    ev = []
    for pid in (1, 2):          # two tensors fused into one allreduce: the same spans on each row
        ev += [{"name": "NEGOTIATE_ALLREDUCE", "ph": "B", "ts": 0 + pid * 100, "pid": pid},
               {"ph": "X", "name": "1", "ts": 0 + pid * 100, "pid": pid, "dur": 0},   # ready
               {"ph": "X", "name": "0", "ts": 390, "pid": pid, "dur": 0},            # last
               {"ph": "E", "ts": 400, "pid": pid},
               {"name": "ALLREDUCE", "ph": "B", "ts": 500, "pid": pid},
               {"name": "MEMCPY_IN_FUSION_BUFFER", "ph": "B", "ts": 500, "pid": pid},
               {"ph": "E", "ts": 600, "pid": pid},
               {"name": "MPI_ALLREDUCE", "ph": "B", "ts": 600, "pid": pid},
               {"ph": "E", "ts": 1600, "pid": pid},
               {"ph": "E", "ts": 1700, "pid": pid}]
    return [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad_0"}}] + ev


def test_each_activity_is_the_union_of_its_spans_over_the_tensors_per_step(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_events()))
    s = timeline.summarize(path, steps=2)
    ms = s["ms_per_step"]
    assert ms["NEGOTIATE_ALLREDUCE"] == pytest.approx(0.300 / 2)   # 100..400 µs, rows overlap
    assert ms["MPI_ALLREDUCE"] == pytest.approx(1.0 / 2)            # one fused allreduce, once
    assert ms["ALLREDUCE"] == pytest.approx(1.2 / 2)
    assert ms["MEMCPY_IN_FUSION_BUFFER"] == pytest.approx(0.1 / 2)
    assert "1" not in ms and "0" not in ms             # the ranks' ready marks are no activity
    neg = s["negotiation"]
    assert neg["count"] == 2 and neg["last_ready"] == {"0": 2}
    assert neg["ready_spread_ms_median"] == pytest.approx(0.290)   # 100..390 and 200..390


def test_a_timeline_still_being_written_is_read_up_to_its_last_whole_event(tmp_path):
    text = json.dumps(_events())
    torn = text[:text.rfind('{"ph": "E", "ts": 1700, "pid": 2}')] + '{"ph": "E", "ts": 17'
    path = tmp_path / "t.json"
    path.write_text(torn)
    ms = timeline.summarize(path, steps=1)["ms_per_step"]
    assert ms["MPI_ALLREDUCE"] == pytest.approx(1.0) and "NEGOTIATE_ALLREDUCE" in ms
    assert timeline.summarize(tmp_path / "missing.json", 1) is None


def test_a_run_says_what_its_timeline_cost_or_why_it_could_not():
    from hpcdl.train.run import timeline_cost_text
    from hpcdl.train.sync import LoopResult, _timeline_cost
    one_rank = lambda values, op="max", name="": list(values)     # noqa: E731  the ranks' max
    before, recorded = [0.010, 0.012, 0.011, 0.030], [0.0121, 0.0119, 0.0125]
    c = _timeline_cost(LoopResult(step_times=before + recorded, timeline_from=4), one_rank)
    assert (c["without_s"], c["without_steps"], c["with_s"], c["steps"]) == (0.0115, 4, 0.0121, 3)
    assert c["cost"] == pytest.approx(0.0121 / 0.0115 - 1)
    assert timeline_cost_text(c).startswith("Timeline cost: +5.2% a step (median 12.100 ms over")
    # a timeline cannot make steps faster: the half before it was slowed by something else
    slowed = _timeline_cost(LoopResult(step_times=[0.02, 0.02] + recorded, timeline_from=2),
                            one_rank)
    assert timeline_cost_text(slowed).startswith("Timeline cost: not measured (the 2 timed steps")
    short = _timeline_cost(LoopResult(step_times=[0.010, 0.011], timeline_from=1), one_rank)
    assert timeline_cost_text(short) == ("Timeline cost: not measured (2 timed step(s): give 4 "
                                         "or more)")
    never = _timeline_cost(LoopResult(step_times=[0.010, 0.011]), one_rank)
    assert never == {"why": "the run ended before the timeline started"}


def _point_with(costs):
    from hpcdl.analysis.budget import Point
    pt = Point()
    for c in costs:
        pt.add({"params": {"batch_size": 8}, "metrics": {
            "timeline": {"ms_per_step": {"ALLREDUCE": 5.0}},
            **({"timeline_cost": {"cost": c}} if c is not None else {})}})
    return pt


def test_the_reports_timeline_table_shows_the_median_cost_of_the_runs_that_measured_it():
    from types import SimpleNamespace
    from hpcdl.analysis import budget
    from hpcdl.report.systems import COST_COLUMN, _timeline_table
    row = SimpleNamespace(axis="horovod/none", nodes=2, ranks=2, efficiency=0.9)
    entries = budget.of_points({("horovod/none", 2, 2): _point_with([0.02, 0.10, 0.07])}, [row])
    assert entries[0]["timeline_cost"] == pytest.approx(0.07)
    table = _timeline_table(SimpleNamespace(budget=entries))
    assert table.columns[-1] == COST_COLUMN
    assert table.markdown().splitlines()[-1].endswith("| +7.0% |")
    # runs from before the cost was recorded: no column, as their reports had
    old = budget.of_points({("horovod/none", 2, 2): _point_with([None, None])}, [row])
    assert "timeline_cost" not in old[0]
    assert COST_COLUMN not in _timeline_table(SimpleNamespace(budget=old)).columns
