"""Scaling maths, the alpha-beta-gamma model, its calibration and the published comparison."""
import math
import random

import numpy as np
import pytest

from hpcdl import analysis, costmodel


def test_speedup_efficiency_and_karp_flatt_on_known_inputs():
    s = analysis.speedup([100.0, 180.0, 320.0], 100.0)
    assert s.tolist() == pytest.approx([1.0, 1.8, 3.2])
    e = analysis.efficiency(s, [1, 2, 4], 1)
    assert e.tolist() == pytest.approx([1.0, 0.9, 0.8])
    kf = analysis.karp_flatt(s, [1, 2, 4])
    assert math.isnan(kf[0])
    # e = (1/S - 1/p) / (1 - 1/p): S=1.8, p=2 -> (0.5556-0.5)/0.5 = 0.1111
    assert kf[1] == pytest.approx((1 / 1.8 - 0.5) / 0.5)
    assert kf[2] == pytest.approx((1 / 3.2 - 0.25) / 0.75)
    # Amdahl with serial fraction f: S = 1/(f + (1-f)/p) gives Karp-Flatt e = f exactly.
    f = 0.07
    p = np.array([2, 8, 64])
    assert analysis.karp_flatt(1 / (f + (1 - f) / p), p) == pytest.approx([f, f, f])


def test_pooled_matches_the_union_of_samples():
    rng = np.random.default_rng(1)
    a, b = rng.normal(10, 1, 7), rng.normal(12, 2, 13)
    mean, std = analysis.pooled([a.mean(), b.mean()], [a.std(ddof=1), b.std(ddof=1)], [7, 13])
    both = np.concatenate([a, b])
    assert mean == pytest.approx(both.mean())
    assert std == pytest.approx(both.std(ddof=1))


def _records(alpha=50e-6, beta=1e-9, c0=2e-3, c1=10e-6, fixed=1e-3, nbytes=2_000_000,
             global_batch=1024, ranks=(1, 2, 4, 8), repeats=3, noise=0.0, seed=0, window=None,
             single=1.0, weak_batch=None, window_ranks=None):
    """Records of a strong-scaling study made by the model itself (weak scaling at
    ``weak_batch`` per rank if given); with ``window`` set, the
    probes also timed the exchange alone, and it hides behind at most that share of the
    compute (at up to ``window_ranks`` ranks if given, none beyond); one rank alone computes in
    ``single`` times a multi-rank rank's time."""
    rng = random.Random(seed)
    out = []
    for rep in range(repeats):
        for p in ranks:
            b = weak_batch or global_batch // p
            comp = (c0 + c1 * b) * (single if p == 1 else 1.0)
            exch = costmodel.predict("ring", nbytes, p, alpha, beta)
            hides = window_ranks is None or p <= window_ranks
            hidden = min(exch, (window or 0.0) * comp) if hides else 0.0
            step = (comp + fixed + exch - hidden) * (1 + rng.gauss(0, noise))
            split = {"method": "probe", "compute_s": comp}
            if window is not None and p > 1:
                split["exchange_alone_s"] = exch
            x = b * p / step
            out.append({"kind": "train", "study": "s", "status": "ok",
                        "declared": {"scaling": "weak" if weak_batch else "strong"},
                        "point": {"id": f"n{p}-r1-horovod-none-rep{rep}", "repeat": rep},
                        "params": {"batch_size": b, "global_batch": b * p,
                                   "backend": "horovod", "compression": "none"},
                        "layout": {"size": p, "nodes": p, "ranks_per_node": 1},
                        "metrics": {"throughput": {"mean": x, "std": 0.01 * x, "n": 10,
                                                   "unit": "samples/s"},
                                    "step_time": {"median": step},
                                    "split": split},
                        "gradient_bytes": nbytes})
    return out


def test_group_records_pools_repeats_and_scales_against_the_smallest_run():
    rows = analysis.group_records(_records(repeats=3))
    assert [r.ranks for r in rows] == [1, 2, 4, 8]
    assert all(r.runs == 3 for r in rows)
    assert rows[0].speedup == 1.0 and rows[0].efficiency == 1.0
    r2 = rows[1]
    assert r2.speedup == pytest.approx(r2.throughput / rows[0].throughput)
    assert r2.efficiency == pytest.approx(r2.speedup / 2)
    assert r2.karp_flatt == pytest.approx((1 / r2.speedup - 0.5) / 0.5)


def _calibrate(rows, fit=None):
    return costmodel.calibrate([r.observation() for r in rows], "ring", fit)


def test_published_comparison_derives_the_window_it_needs():
    rows = {r["model"]: r for r in analysis.published_comparison()}
    assert rows["ResNet-101"]["published_efficiency"] == 0.90
    assert rows["VGG-16"]["published_efficiency"] == 0.68
    for r in rows.values():
        # the derived window, put back into the model, gives the published efficiency
        w, c, e = r["window_needed"], r["compute_s"], r["exchange_s"]
        assert 0 < w * c < e                 # some of the exchange hides, not all of it
        eff = c / (c + e - min(e, w * c))
        assert eff == pytest.approx(r["published_efficiency"], rel=1e-9)
        assert r["model_efficiency_no_overlap"] < r["published_efficiency"]
    # VGG-16 has 3x the gradients of ResNet-101: its exchange is longer and its efficiency lower
    assert rows["VGG-16"]["exchange_s"] > 2.5 * rows["ResNet-101"]["exchange_s"]
    assert rows["VGG-16"]["model_efficiency_no_overlap"] < rows["ResNet-101"]["model_efficiency_no_overlap"]


# --- what a figure cannot support ------------------------------------------------------------

def _rec(ranks, rep, tput, ci, step, comp, gb=None, batch=32, scaling="weak"):
    gb = gb or batch * ranks
    return {"kind": "train", "study": "s", "status": "ok", "declared": {"scaling": scaling},
            "point": {"repeat": rep},
            "params": {"batch_size": gb // ranks, "global_batch": gb, "backend": "horovod",
                       "compression": "none", "workload": "cnn"},
            "layout": {"size": ranks, "nodes": 1, "ranks_per_node": ranks},
            "metrics": {"throughput": {"mean": tput, "std": ci / 1.96, "n": 6, "unit": "img/s"},
                        "step_time": {"median": step}, "split": {"compute_s": comp}},
            "gradient_bytes": 400_000, "manifest": {"cpu_count": 2}}


def test_a_probe_longer_than_the_step_leaves_the_split_undetermined():
    recs = [_rec(1, 0, 420.0, 4.0, 0.0760, 0.0781), _rec(2, 0, 770.0, 40.0, 0.0810, 0.0800)]
    res = analysis.analyse(recs, "s")
    one, two = res.rows
    assert one.compute_share is None and one.rest_share is None
    assert any("split of this step is not determined" in f for f in one.flags)
    assert two.compute_share == pytest.approx(0.0800 / 0.0810)


def test_slower_with_more_ranks_flags_karp_flatt_and_the_spread():
    # the expmlp case: speedup 0.52 with 1-rank repeats spread +-59%
    recs = [_rec(1, 0, 1.86e6, 1.1e6, 0.52e-3, 0.5e-3, gb=1000, scaling="strong"),
            _rec(2, 0, 0.98e6, 0.43e6, 0.82e-3, 0.49e-3, gb=1000, scaling="strong")]
    res = analysis.analyse(recs, "s")
    one, two = res.rows
    assert any("spread ±59%" in f for f in one.flags)
    assert two.karp_flatt > 1
    kf = [f for f in two.flags if f.startswith("Karp–Flatt")]
    # 26% +- 19 points: the slowdown is real despite the spread, and the cause is the fixed cost
    assert kf and "outside [0, 1]" in kf[0] and "per-step costs" in kf[0]


def test_an_effect_inside_the_spread_is_called_unresolved():
    recs = [_rec(1, 0, 1000.0, 400.0, 1e-3, 0.9e-3, gb=1000, scaling="strong"),
            _rec(2, 0, 900.0, 400.0, 1.1e-3, 0.5e-3, gb=1000, scaling="strong")]
    two = analysis.analyse(recs, "s").rows[1]
    kf = [f for f in two.flags if f.startswith("Karp–Flatt")][0]
    assert "spread of the repeats is as large as the effect" in kf
    recs[1]["metrics"]["throughput"]["mean"] = 1800.0      # E = 90% +- 50 points
    two = analysis.analyse(recs, "s").rows[1]
    assert any("not resolved from ideal" in f for f in two.flags)
    assert not any(f.startswith("Karp–Flatt") for f in two.flags)


def test_a_clear_slowdown_names_the_per_step_cost_as_the_cause():
    recs = [_rec(1, 0, 2.0e6, 0.02e6, 0.5e-3, 0.45e-3, gb=1000, scaling="strong"),
            _rec(2, 0, 1.0e6, 0.01e6, 1.0e-3, 0.3e-3, gb=1000, scaling="strong")]
    two = analysis.analyse(recs, "s").rows[1]
    kf = [f for f in two.flags if f.startswith("Karp–Flatt")][0]
    assert "per-step costs that do not shrink with the batch" in kf
    assert not any("not resolved" in f for f in two.flags)


def test_good_runs_carry_no_flags():
    recs = _records(ranks=(1, 2, 4, 8), noise=0.0)
    res = analysis.analyse(recs, "s")
    assert all(r.flags == [] for r in res.rows)
    assert res.prediction["forecast"] and not res.why_no_model


def test_scaling_comes_from_the_declaration_never_from_the_numbers():
    recs = _records(ranks=(1, 2))
    assert analysis.analyse(recs, "s").scaling_source == "declared by the study"
    for r in recs:
        del r["declared"]
    with pytest.raises(ValueError, match="do not declare strong or weak"):
        analysis.analyse(recs, "s")
    assert analysis.analyse(recs, "s", scaling="strong").scaling == "strong"
    with pytest.raises(ValueError, match="contradicts"):
        analysis.analyse(_records(ranks=(1, 2)), "s", scaling="weak")


def _held_out_records(noise=0.02, network="200mbit"):
    """A weak-scaling study made by the model (alpha 0, beta 4 ns/B, the exchange hidden at 2
    nodes only, as on the box), declaring that the model calibrates on the points with at most
    2 nodes."""
    recs = _records(alpha=0.0, beta=4e-9, weak_batch=128, ranks=(1, 2, 4, 8), repeats=3,
                    noise=noise, window=0.2, seed=3, window_ranks=2)
    for r in recs:
        r["declared"]["calibration"] = "runs:nodes<=2"
        r["point"]["network"] = network
    return recs


def test_records_of_two_link_rates_make_two_axes_with_their_own_beta():
    fast = _held_out_records(network="1gbit")
    for r in fast:
        r["point"]["id"] = r["point"]["id"].replace("-rep", "-1gbit-rep")
    res = analysis.analyse(_held_out_records() + fast, "s")
    assert res.axes == ["horovod/none@200mbit", "horovod/none@1gbit"]


def _variant_record(variant, backend, size, repeat, **metrics):
    return {"kind": "train", "status": "ok", "study": "s", "declared": {"scaling": "weak"},
            "params": {"backend": backend, "compression": "none", "batch_size": 100,
                       "global_batch": 100 * size, "workload": "mnist"},
            "layout": {"size": size, "nodes": 1, "ranks_per_node": size},
            "point": {"id": f"n1-r{size}-{backend}-none-v{variant}-rep{repeat}",
                      "variant": variant, "repeat": repeat},
            "metrics": {"throughput": {"mean": 1000.0 * size, "std": 1.0, "n": 5},
                        "step_time": {"median": 0.01}, **metrics}}


def test_variants_are_axes_and_the_asynchronous_runs_have_no_allreduce_model():
    from hpcdl import analysis
    st = {"staleness_bound": 2, "workers": 2, "updates_per_s": 50.0, "lead_max": 2,
          "per_worker": [{"held_s": 0.5}, {"held_s": 0.0}]}
    recs = [_variant_record("ring", "horovod", n, k) for n in (1, 2) for k in (0, 1)]
    recs += [_variant_record("ssp2", "ps-async", 2, k, **{"async": dict(
        st, staleness={"hist": {"0": 3, "2": 1}} if k else {"hist": {"1": 4}})})
        for k in (0, 1)]
    recs += [_variant_record("ssp2", "ps-async", 1, 0, **{"async": dict(
        st, staleness={"hist": {"0": 5}})})]
    res = analysis.analyse(recs, "s")
    assert res.axes == ["ring", "ssp2"]
    assert "ssp2" not in [a["axis"] for a in res.prediction.get("axes", [])]
    assert "probes the compute" in res.why_no_model        # these records carry no probes
    (two,) = [r for r in res.systems if r["ranks"] == 2]
    assert two["axis"] == "ssp2" and two["kind"] == "async" and two["runs"] == 2
    assert two["staleness_hist"] == {"0": 3, "1": 4, "2": 1}
    assert two["staleness_max"] == 2 and two["staleness_mean"] == pytest.approx(6 / 8)
    assert two["lead_max"] == 2 and two["held_s"] == pytest.approx(0.5)


def test_the_report_tables_asynchronous_and_pipeline_runs_side_by_side(tmp_path):
    from hpcdl import analysis
    from hpcdl.report import sections
    st = {"staleness_bound": None, "workers": 2, "updates_per_s": 50.0, "lead_max": 7,
          "per_worker": [{"held_s": 0.0}], "staleness": {"hist": {"0": 2, "1": 2}}}
    pipe = {"stages": 2, "micro_batches": 4, "bubble": 0.25, "bubble_theory": 0.2,
            "bubble_expected": 0.22, "bytes_per_step": 1000, "ring_bytes_per_rank_at_k": 500.0}
    recs = [_variant_record("downpour", "ps-async", 2, 0, **{"async": st}),
            _variant_record("pipe", "horovod", 2, 0, pipeline=pipe)]
    res = analysis.analyse(recs, "s")
    about = analysis.Digest.of(recs).about
    (t,) = sections.systems(sections.Context(res, about, tmp_path / "runs.jsonl")).tables
    text = t.csv_text()
    assert "downpour" in text and "pipe" in text and "0: 2, 1: 2" in text
    md = t.markdown()
    assert "| downpour | 2 | 1 | 50.0 | 0.50 / 1 / 1 | 0: 2, 1: 2 | 7 |" in md
    assert "| 25.0% | 20.0% | 22.0% | 1,000 | 500 |" in md


# --- no claim from what the data cannot support ----------------------------------------------------
