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


def test_calibration_recovers_the_parameters_it_was_given():
    rows = analysis.group_records(_records())
    m = _calibrate(rows)
    assert m.determined and not m.why
    assert m.alpha == pytest.approx(50e-6, rel=1e-6)
    assert m.beta == pytest.approx(1e-9, rel=1e-6)
    assert m.c0 == pytest.approx(2e-3) and m.c1 == pytest.approx(10e-6)
    assert m.fixed == pytest.approx(1e-3)
    analysis.predict_rows(rows, m)
    assert max(abs(r.model_error) for r in rows) < 1e-6


def test_the_window_is_measured_from_the_probes_and_alpha_beta_from_the_exchange_alone():
    rows = analysis.group_records(_records(window=0.1))
    m = _calibrate(rows)
    assert m.window == pytest.approx(0.1)
    assert m.alpha == pytest.approx(50e-6, rel=1e-6) and m.beta == pytest.approx(1e-9, rel=1e-6)
    assert any(n.startswith("window measured: the exchange hid behind 10% of the compute")
               for n in m.notes)
    analysis.predict_rows(rows, m)
    assert max(abs(r.model_error) for r in rows) < 1e-6
    # without exchange probes nothing is hidden, and the notes say the window was not measured
    flat = _calibrate(analysis.group_records(_records()))
    assert flat.window == 0 and any("window not measured" in n for n in flat.notes)


def test_an_exchange_hides_behind_the_compute_only_so_a_longer_one_is_not_hidden_in_proportion():
    """Weak scaling: the compute stays, the exchange grows with p; the hidden time stays at the
    window's share of the compute, so the exposed exchange grows by all the exchange added."""
    m = costmodel.StepModel(algorithm="ring", beta=1e-9, c1=1e-3, window=0.5,
                            window_measured=True)
    c = 0.1                                         # batch 100: 100 ms of compute
    e2, e8 = (float(m.exchange(p, 100e6)) for p in (2, 8))     # 100 ms and 175 ms
    assert float(m.step_time(2, 100, 100e6)) == pytest.approx(c + e2 - 0.5 * c)
    assert float(m.step_time(8, 100, 100e6)) - float(m.step_time(2, 100, 100e6)) == \
        pytest.approx(e8 - e2)
    # an exchange shorter than the window hides whole
    assert float(m.step_time(2, 100, 10e6)) == pytest.approx(c)


def test_compute_while_exchanging_is_fitted_to_the_multi_rank_runs_and_one_rank_alone_beside_it():
    rows = analysis.group_records(_records(window=0.1, single=0.7))
    m = _calibrate(rows)
    assert m.single == pytest.approx(0.7)
    assert m.c0 == pytest.approx(2e-3) and m.c1 == pytest.approx(10e-6)
    assert any(n.startswith("one rank alone computes in 0.70x") for n in m.notes)
    analysis.predict_rows(rows, m)
    assert max(abs(r.model_error) for r in rows) < 1e-6
    # the extrapolation's one-rank baseline is the rank alone, not a rank that exchanges
    ext = analysis.extrapolate(m, "strong", 1024, 2e6, {"x": costmodel.PRESETS["ib-edr"]}, [1])
    assert ext[0]["step_time_s"] == pytest.approx(0.7 * (2e-3 + 10e-6 * 1024) + 1e-3)


def test_a_window_measured_at_8_ranks_is_not_carried_to_more_ranks_nor_to_512_gpus():
    res = analysis.analyse(_records(window=0.3), "s")
    m = res.models["horovod/none"]
    assert m.window == pytest.approx(0.3) and m.window_ranks == 8
    assert any("beyond 8 ranks none of the exchange is taken as hidden" in n for n in m.notes)
    # at 8 ranks the measured window hides exchange; at 16 none does, in the step and the share
    b, n = 128, 2e6
    c8, e8 = float(m.compute(b, 8, measured=False)), float(m.exchange(8, n))
    assert float(m.step_time(8, b, n, measured=False)) == pytest.approx(
        c8 + m.fixed + e8 - min(e8, 0.3 * c8))
    c16, e16 = float(m.compute(b, 16, measured=False)), float(m.exchange(16, n))
    assert float(m.step_time(16, b, n, measured=False)) == pytest.approx(c16 + m.fixed + e16)
    ext = analysis.extrapolate(m, "weak", b, n, {"x": costmodel.PRESETS["ib-edr"]}, [8, 16])
    net = costmodel.PRESETS["ib-edr"]
    for e in ext:
        ex = float(m.exchange(e["ranks"], n, net))
        hidden = min(ex, 0.3 * c8) if e["ranks"] == 8 else 0.0
        assert e["exchange_share"] == pytest.approx((ex - hidden) / e["step_time_s"])
    # the published comparison is at 512 GPUs: the window does not reach it
    assert all(p["measured_window"] is None and p["model_efficiency_measured_window"] is None
               for p in res.published)
    wide = costmodel.StepModel(window=0.3, window_measured=True, window_ranks=512)
    assert analysis._measured_window(wide) == pytest.approx(0.3)


def test_calibration_with_noise_predicts_within_a_few_percent_held_out():
    rows = analysis.group_records(_records(noise=0.01, repeats=4))
    m = _calibrate(rows)
    analysis.predict_rows(rows, m)
    analysis.heldout_errors(rows, "ring")
    assert all(abs(r.model_error) < 0.05 for r in rows)
    assert all(r.heldout_error is not None and abs(r.heldout_error) < 0.08 for r in rows)


def test_calibration_from_a_bench_fit_uses_its_alpha_beta_gamma():
    doc = {"schema": "hpcdl.fit/1", "ranks": 2,
           "backends": {"horovod+none": {"alpha_s": 3e-6, "beta_s_per_byte": 2e-10,
                                         "gamma_s_per_byte": 1e-10, "r2": 0.99}}}
    fit = analysis.load_fit(doc, "horovod", "none")
    assert analysis.load_fit(doc, "ps", "none") is None
    m = _calibrate(analysis.group_records(_records(ranks=(1, 2))), fit)
    assert (m.alpha, m.beta, m.gamma) == (3e-6, 2e-10, 1e-10)
    assert m.determined and "bench fit" in m.source


def test_one_multi_rank_configuration_does_not_determine_alpha_and_beta():
    rows = analysis.group_records(_records(ranks=(1, 2)))
    m = _calibrate(rows)
    assert not m.determined and (m.alpha, m.beta) == (0.0, 0.0)
    assert "one equation for two unknowns" in m.why[0]
    res = analysis.analyse(_records(ranks=(1, 2)), "s")
    assert not res.models["horovod/none"].determined
    # nothing is extrapolated from it, not even to the presets' networks: the window and the
    # multi-rank compute rest on one point as well
    assert res.extrapolation == [] and "1 multi-rank configuration(s)" in res.extrapolation_why
    recs = _records(ranks=(1, 2))
    for r in recs:
        del r["metrics"]["split"]["compute_s"]
    unprobed = _calibrate(analysis.group_records(recs))
    with pytest.raises(ValueError, match="compute is not probed"):
        analysis.extrapolate(unprobed, "strong", 1024, 2e6, costmodel.PRESETS, [1, 2, 4])
    assert analysis.analyse(recs, "s").extrapolation == []


def test_an_exchange_hidden_below_the_probe_is_not_fitted():
    recs = _records(ranks=(1, 2, 4))
    for r in recs:       # probed compute as long as the whole step: nothing left to fit
        r["metrics"]["split"]["compute_s"] = r["metrics"]["step_time"]["median"] * 1.02
    m = _calibrate(analysis.group_records(recs))
    assert not m.determined and any("no exchange time to fit" in w for w in m.why)
    assert any("not shorter than the measured step" in n for n in m.notes)


def test_extrapolation_efficiency_falls_with_ranks_and_is_higher_on_faster_networks():
    m = _calibrate(analysis.group_records(_records()))
    rows = analysis.extrapolate(m, "weak", 64, 100e6, costmodel.PRESETS, [1, 2, 8, 64, 512])
    for net in costmodel.PRESETS:
        eff = [r["efficiency"] for r in rows if r["network"] == net]
        assert eff[0] == pytest.approx(1.0)
        assert all(a >= b for a, b in zip(eff, eff[1:]))
    at512 = {r["network"]: r["efficiency"] for r in rows if r["ranks"] == 512}
    assert at512["ib-ndr"] > at512["ib-hdr"] > at512["ib-edr"] > at512["roce-25g"]
    strong = analysis.extrapolate(m, "strong", 64, 1e6, {"x": costmodel.PRESETS["ib-edr"]},
                                  [1, 2, 64, 128])
    assert [r["ranks"] for r in strong] == [1, 2, 64]     # stops below one sample per rank


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
    assert not res.models["horovod/none"].determined
    assert not any(e["network"] == "local" for e in res.extrapolation)


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
    assert res.models["horovod/none"].determined and res.extrapolation


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


def test_no_overlap_is_taken_from_a_configuration_whose_split_is_not_determined():
    """A probe not shorter than the step would read as 100% hidden: it is not used."""
    recs = _records(ranks=(1, 2), window=0.5)
    for r in recs:
        if r["layout"]["size"] == 2:
            r["metrics"]["split"]["compute_s"] = r["metrics"]["step_time"]["median"] * 1.01
    res = analysis.analyse(recs, "s")
    m = res.models["horovod/none"]
    assert not m.window_measured and m.window == 0
    assert any(n.startswith("window not determined") for n in m.notes)
    assert all(p["measured_window"] is None for p in res.published)
    assert res.extrapolation == []              # one multi-rank configuration: nothing drawn


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


def test_a_model_calibrated_on_two_nodes_predicts_four_and_eight_with_a_band():
    res = analysis.analyse(_held_out_records(), "s")
    rows = {r.nodes: r for r in res.rows}
    assert [rows[n].fitted for n in (1, 2, 4, 8)] == [True, True, False, False]
    assert all(r.axis == "horovod/none@200mbit" for r in res.rows)
    assert "at most 2 node(s)" in res.calibration
    m = res.models["horovod/none@200mbit"]
    assert m.determined and m.alpha == 0.0 and m.beta == pytest.approx(4e-9, rel=0.1)
    for n in (4, 8):
        r = rows[n]
        # predicted from points it never saw: the model's own truth, within the noise
        assert abs(r.model_error) < 0.08, (n, r.model_error)
        lo, hi = r.model_band
        assert lo <= r.model_step_time <= hi and hi > lo


def test_the_prediction_of_a_model_that_leaves_something_out_misses_and_says_so():
    recs = _held_out_records(noise=0.0)
    for r in recs:              # an exchange that costs twice the model's at 8 nodes only
        if r["layout"]["size"] == 8:
            r["metrics"]["step_time"]["median"] *= 1.5
    res = analysis.analyse(recs, "s")
    r8 = [r for r in res.rows if r.nodes == 8][0]
    assert r8.model_error == pytest.approx(1 / 1.5 - 1, abs=0.02)


def test_records_of_two_link_rates_make_two_axes_with_their_own_beta():
    fast = _held_out_records(network="1gbit")
    for r in fast:
        r["point"]["id"] = r["point"]["id"].replace("-rep", "-1gbit-rep")
    res = analysis.analyse(_held_out_records() + fast, "s")
    assert res.axes == ["horovod/none@200mbit", "horovod/none@1gbit"]


def test_strong_scaling_calibrated_on_one_and_two_nodes_says_c0_is_assumed():
    """One multi-rank batch size cannot separate a per-step compute cost from the slowdown of
    computing beside the exchange: compute is taken as proportional, and the notes say so."""
    m = _calibrate(analysis.group_records(_records(ranks=(1, 2), window=0.1)))
    assert m.c0 == 0.0
    assert any("c0 = 0 is not measured, it is assumed" in n for n in m.notes)


def test_a_window_wider_than_the_compute_is_not_carried_and_the_notes_say_why():
    recs = _records(ranks=(1, 2), window=0.1)
    for r in recs:             # the step paid for less than compute + the exchange timed alone
        if r["layout"]["size"] == 2:
            r["metrics"]["step_time"]["median"] = r["metrics"]["split"]["compute_s"] * 1.05
            r["metrics"]["split"]["exchange_alone_s"] = r["metrics"]["split"]["compute_s"] * 3
    m = _calibrate(analysis.group_records(recs), fit={"alpha_s": 1e-6, "beta_s_per_byte": 1e-9})
    assert m.window == 0.0 and not m.window_measured
    assert any(n.startswith("window not determined") and "over 100%" in n for n in m.notes)


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
    assert "ring" in res.models and "ssp2" not in res.models
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

def test_a_window_over_the_whole_compute_is_not_carried_into_any_prediction():
    # the exchange timed alone cost more than the step paid beyond compute: 186% of it
    obs = [costmodel.Observation(1, 1, 100, 0, 1.0e-3, 1.0e-3),
           costmodel.Observation(2, 1, 100, 4e5, 1.2e-3, 1.0e-3, exchange=2.06e-3)]
    m = costmodel.calibrate(obs, "ring", bandwidth_only=True)
    assert not m.window_measured and m.window == 0
    assert any(n.startswith("window not determined") and "over 100%" in n for n in m.notes)
    assert not any("capped" in n for n in m.notes)


def test_one_rank_alone_slower_than_a_rank_among_several_is_not_carried():
    rows = analysis.group_records(_records(window=0.1, single=1.1))
    m = costmodel.calibrate([r.observation() for r in rows])
    assert m.single == 1.0
    assert any("not carried, single = 1" in n for n in m.notes)


def test_a_parameter_server_has_no_window_by_construction():
    rows = analysis.group_records(_records(window=0.3))
    m = costmodel.calibrate([r.observation() for r in rows], "ps")
    assert m.window == 0 and not m.window_measured
    assert any(n.startswith("no window: a parameter server's exchange starts") for n in m.notes)


def test_nothing_is_extrapolated_from_one_multi_rank_configuration(tmp_path):
    res = analysis.analyse(_records(ranks=(1, 2), window=0.2), "s")
    assert res.extrapolation == []
    assert "1 multi-rank configuration(s)" in res.extrapolation_why
    assert all(p.get("measured_window") is None for p in res.published)
    # with four rank counts the model is determined and extrapolated, and says from what
    full = analysis.analyse(_records(window=0.2), "s")
    assert full.extrapolation and not full.extrapolation_why
    assert full.extrapolation_source == "3 multi-rank configurations"


def test_a_network_whose_exchange_never_shows_in_the_step_is_left_out():
    extra = [{"network": "ib", "label": "InfiniBand", "ranks": p, "exchange_share": 0.0}
             for p in (1, 2, 4)]
    extra += [{"network": "eth", "label": "Ethernet", "ranks": p, "exchange_share": 0.02 * p}
              for p in (1, 2, 4)]
    kept, flat = analysis._network_effect(extra)
    assert flat == ["InfiniBand"] and {e["network"] for e in kept} == {"eth"}
