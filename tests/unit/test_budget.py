"""Where the efficiency goes: stragglers named from the ranks' phases, and a point's loss split
into parts that add up (budget.py), on records whose phases are known exactly."""
import pytest

from hpcdl import analysis, report
from hpcdl.analysis import budget


def _rank(rank, host, compute, inp=0.5e-3, step=None, book=0.5e-3, exchange=None, wait=None):
    return {"rank": rank, "host": host, "input": {"median": inp}, "book": {"median": book},
            "step": {"median": step}, "compute_s": compute, "exchange_s": exchange,
            "wait_s": wait, "ckpt_s": 0.0}


def _rec(ranks, per_step, batch=64, nodes=None):
    size = len(ranks)
    return {"kind": "train", "status": "ok", "study": "b", "declared": {"scaling": "weak"},
            "params": {"batch_size": batch, "global_batch": batch * size, "backend": "horovod",
                       "compression": "none"},
            "layout": {"size": size, "nodes": nodes or size, "ranks_per_node": 1},
            "metrics": {"throughput": {"mean": size * batch / per_step, "std": 0.0, "n": 5},
                        "throughput_per_rank": {"mean": batch / per_step},
                        "step_time": {"median": max(r["step"]["median"] for r in ranks)},
                        "ranks": ranks},
            "point": {"repeat": 0}}


BASE = _rec([_rank(0, "n1", 8e-3, step=9e-3)], per_step=10e-3)
# two ranks: rank 1 computes 2 ms longer; rank 0 waits for it; 2 ms of exchange not hidden
TWO = _rec([_rank(0, "n1", 8.5e-3, step=13.5e-3, exchange=3e-3, wait=2e-3),
            _rank(1, "n2", 10.5e-3, step=13.5e-3, exchange=3e-3, wait=0.0)], per_step=14.5e-3)


def test_the_parts_add_up_to_the_measured_loss_when_the_phases_explain_the_step():
    b = budget.point_budget(budget.Point.of([TWO]), budget.Point.of([BASE]))
    assert b["loss"] == pytest.approx(4.5 / 14.5)
    secs = b["seconds"]
    assert secs["compute"] == pytest.approx(0.5e-3)        # the typical (faster) rank: 8.5 vs 8
    assert secs["stragglers"] == pytest.approx(2e-3)       # slowest 11 ms busy vs typical 9 ms
    assert secs["input"] == pytest.approx(0) and secs["fixed"] == pytest.approx(0)
    assert secs["exchange"] == pytest.approx(2e-3)
    assert secs["unexplained"] == pytest.approx(0, abs=1e-12)


def test_an_exposed_exchange_beyond_the_exchange_timed_alone_is_left_unexplained():
    late = _rec([_rank(0, "n1", 8.5e-3, step=15.5e-3, exchange=3e-3),
                 _rank(1, "n2", 10.5e-3, step=15.5e-3, exchange=3e-3)], per_step=16.5e-3)
    b = budget.point_budget(budget.Point.of([late]), budget.Point.of([BASE]))
    assert b["seconds"]["exchange"] == pytest.approx(3e-3)      # bounded by the exchange alone
    assert b["seconds"]["unexplained"] == pytest.approx(1e-3)
    assert b["exposed_s"] == pytest.approx(4e-3)


def test_the_slow_rank_is_named_with_its_host_and_phase_and_a_quiet_run_names_none():
    (s,) = budget.stragglers(TWO)
    assert (s["rank"], s["host"], s["phase"]) == (1, "n2", "compute")
    assert s["ratio"] == pytest.approx(10.5 / 8.5) and s["lost_s"] == pytest.approx(2e-3)
    assert "rank 1 on n2: compute 1.24× the other ranks' median" in budget.describe(s)
    slow_input = _rec([_rank(0, "n1", 8e-3, step=12e-3), _rank(1, "n2", 8e-3, inp=3e-3,
                                                              step=10e-3)], per_step=13e-3)
    assert [(s["rank"], s["phase"]) for s in budget.stragglers(slow_input)] == [(1, "input")]
    quiet = _rec([_rank(0, "n1", 8e-3, step=11e-3), _rank(1, "n2", 8.6e-3, step=11e-3)],
                 per_step=12e-3)
    assert budget.stragglers(quiet) == []                  # 1.075x: within the noise allowed
    small = _rec([_rank(0, "n1", 1e-3, step=50e-3), _rank(1, "n2", 2e-3, step=50e-3)],
                 per_step=51e-3)
    assert budget.stragglers(small) == []                  # 2x, but 1 ms of a 51 ms step
    unlucky = _rec([_rank(0, "n1", 8e-3, step=12e-3),
                    {**_rank(1, "n2", 10e-3, step=12e-3), "compute_min_s": 7.9e-3}],
                   per_step=13e-3)
    assert budget.stragglers(unlucky) == []                # its fastest probe beat the others'
    steady = _rec([_rank(0, "n1", 8e-3, step=12e-3),
                   {**_rank(1, "n2", 10e-3, step=12e-3), "compute_min_s": 9.5e-3}],
                  per_step=13e-3)
    assert [s["rank"] for s in budget.stragglers(steady)] == [1]


def test_the_report_shows_the_budget_and_names_the_straggler(tmp_path):
    import json
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in (BASE, TWO)))
    res = analysis.analyse([BASE, TWO], "b")
    (two,) = [b for b in res.budget if b["ranks"] == 2]
    assert two["budget"]["loss"] == pytest.approx(1 - res.rows[1].efficiency)
    assert [(s["rank"], s["host"], s["phase"]) for s in two["stragglers"]] == [(1, "n2", "compute")]
    out = report.write_report(runs, plots=True)
    text = out["report"].read_text()
    assert "## Where the efficiency goes" in text and "rank 1 on n2: compute" in text
    assert (tmp_path / "efficiency-budget.csv").is_file()
    assert (tmp_path / "efficiency-budget.png").stat().st_size > 0


def test_an_in_memory_workload_has_no_input_pipeline_and_a_script_has_one():
    slow_in = [_rank(0, "n1", 8.5e-3, inp=2.5e-3, step=13.5e-3, exchange=3e-3, wait=2e-3),
               _rank(1, "n2", 10.5e-3, inp=2.5e-3, step=13.5e-3, exchange=3e-3, wait=0.0)]
    mine = budget.point_budget(budget.Point.of([_rec(slow_in, per_step=14.5e-3)]),
                               budget.Point.of([BASE]))
    # hpcdl's own workload slices arrays in memory: the 2 ms more taking the next batch is
    # counted as fixed overhead, and the budget says why
    assert mine["seconds"]["input"] == 0
    assert mine["seconds"]["fixed"] == pytest.approx(2e-3)
    assert "held in memory (no input pipeline)" in mine["note"]
    script = _rec(slow_in, per_step=14.5e-3)
    script["params"]["command"] = ["python", "train.py"]
    theirs = budget.point_budget(budget.Point.of([script]), budget.Point.of([BASE]))
    assert theirs["seconds"]["input"] == pytest.approx(2e-3) and "note" not in theirs
