"""Time to accuracy over seeds: MLPerf-style summary, statistical efficiency, speedups, curves."""
import pytest

from hpcdl import analysis
from hpcdl.analysis import convergence


def _rec(ranks, seed, reached_at, thr=1000.0, per_step=0.01, max_steps=100, batch=100):
    """A run of global batch ``batch`` whose accuracy rises 0.1 per 10 steps; it reaches the
    target at step ``reached_at`` (None: not within max_steps)."""
    last = reached_at or max_steps
    evals = [{"step": s, "samples": s * batch, "time_s": s * per_step,
              "test_accuracy": min(1.0, 0.01 * s)} for s in range(10, last + 1, 10)]
    target = ({"metric": "accuracy", "value": 0.5, "reached": True, "steps": reached_at,
               "samples": reached_at * batch, "time_s": reached_at * per_step}
              if reached_at else {"metric": "accuracy", "value": 0.5, "reached": False,
                                  "steps": max_steps})
    return {"kind": "train", "study": "s", "status": "ok", "declared": {"scaling": "strong"},
            "point": {"id": f"n1-r{ranks}-horovod-none-rep{seed}", "repeat": seed},
            "params": {"batch_size": batch // ranks, "global_batch": batch, "seed": seed,
                       "steps": max_steps, "backend": "horovod", "compression": "none"},
            "layout": {"size": ranks, "nodes": 1, "ranks_per_node": ranks},
            "metrics": {"throughput": {"mean": thr, "std": 1.0, "n": 5},
                        "step_time": {"median": batch / thr}, "evals": evals, "target": target}}


def test_five_seeds_drop_the_fastest_and_slowest():
    s = convergence.summarise([5, 1, 3, 4, 100])
    assert s["mean"] == pytest.approx(4.0) and (s["min"], s["max"]) == (3, 5) and s["kept"] == 3
    assert "dropping the fastest and slowest of 5" in s["method"]
    few = convergence.summarise([2, 4])
    assert few["mean"] == 3 and "fewer than 5" in few["method"]
    assert convergence.summarise([])["mean"] is None


def test_time_to_target_speedup_and_statistical_efficiency_beside_throughput():
    # 1 rank: target at step 50 in 0.5 s. 2 ranks, the same global batch, twice the throughput
    # and the same steps (strong scaling): the time to target halves, samples are the same.
    recs = [_rec(1, s, 50) for s in range(5)] + \
           [_rec(2, s, 50, thr=2000.0, per_step=0.005) for s in range(5)]
    res = analysis.analyse(recs, "s")
    one, two = res.convergence
    assert (one["ranks"], two["ranks"]) == (1, 2) and one["seeds"] == 5 and one["reached"] == 5
    assert one["steps"]["mean"] == 50 and one["time_s"]["mean"] == pytest.approx(0.5)
    assert two["statistical_efficiency"] == pytest.approx(1.0)
    assert two["ttt_speedup"] == pytest.approx(2.0)
    assert two["throughput_speedup"] == pytest.approx(2.0)
    assert two["curve"]["step"] == [10, 20, 30, 40, 50] and two["curve"]["seeds"] == [5] * 5


def test_a_target_some_seeds_miss_is_shown_as_such_and_gives_no_ratio():
    recs = [_rec(1, s, 50) for s in range(5)] + [_rec(2, 0, None)] + \
           [_rec(2, s, 60) for s in range(1, 5)]
    two = analysis.analyse(recs, "s").convergence[1]
    assert two["reached"] == 4 and two["seeds"] == 5
    assert two["statistical_efficiency"] is None and two["ttt_speedup"] is None
    # the curve runs to the last step any seed evaluated, the range across the seeds there
    assert two["curve"]["step"][-1] == 100 and two["curve"]["seeds"][-1] == 1


def test_a_study_without_evaluations_has_no_convergence_section():
    rec = _rec(1, 0, 50)
    del rec["metrics"]["evals"], rec["metrics"]["target"]
    assert analysis.analyse([rec], "s").convergence == []


def test_the_report_shows_time_to_target_the_overlay_and_an_unreached_target(tmp_path):
    import json

    from hpcdl import report
    recs = [_rec(1, s, 50) for s in range(5)] + \
           [_rec(2, s, 50, thr=2000.0, per_step=0.005) for s in range(5)] + \
           [_rec(4, s, None, thr=3000.0) for s in range(5)]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = report.write_report(runs)
    md = out["report"].read_text()
    assert "## Time to target" in md and "accuracy ≥ 0.5, within 100 steps" in md
    row4 = next(ln for ln in md.splitlines() if ln.startswith("| horovod/none | 1 | 4 |"))
    assert "0/5" in row4 and "not reached in 100 steps" in row4
    row2 = next(ln for ln in md.splitlines() if ln.startswith("| horovod/none | 1 | 2 |"))
    assert row2.endswith("| 1.000 | 2.000 | 2.000 |")   # same samples; time halves, as throughput
    assert (tmp_path / "convergence.png").is_file() and (tmp_path / "time-to-target.png").is_file()
    assert (tmp_path / "time-to-target.csv").is_file()


def test_a_learning_rate_axis_keeps_its_configurations_apart():
    recs = []
    for rule, at in (("linear", 50), ("none", 80)):
        for s in range(5):
            for n in (1, 2):
                r = _rec(n, s, at)
                r["point"]["lr_scaling"] = rule
                r["point"]["id"] = r["point"]["id"].replace("-rep", f"-lr{rule}-rep")
                r["params"]["lr_scaling"] = rule
                recs.append(r)
    res = analysis.analyse(recs, "s")
    assert res.axes == ["horovod/none lr:linear", "horovod/none lr:none"]
    steps = {(c["axis"], c["ranks"]): c["steps"]["mean"] for c in res.convergence}
    assert steps[("horovod/none lr:none", 2)] == 80 and steps[("horovod/none lr:linear", 2)] == 50
    assert {c["lr"]["rule"] for c in res.convergence} == {"linear", "none"}
