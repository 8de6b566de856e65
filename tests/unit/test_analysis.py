"""Scaling maths, the alpha-beta-gamma model, its calibration and the published comparison."""
import math
import random

import numpy as np
import pytest

from hpcdl import analysis


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


def test_ring_and_ps_exchange_times():
    a, b, g, n = 1e-5, 1e-9, 5e-10, 1e6
    assert analysis.ring_exchange(1, n, a, b, g) == 0.0
    assert analysis.ps_exchange(1, n, a, b, g) == 0.0
    assert analysis.ring_exchange(4, n, a, b, g) == pytest.approx(6 * a + 1.5 * n * b + 0.75 * n * g)
    assert analysis.ps_exchange(4, n, a, b, g) == pytest.approx(6 * a + 6 * n * b + 3 * n * g)
    # The ring's bandwidth term saturates at 2n beta; the parameter server's grows with p.
    big = analysis.ring_exchange(1024, n, 0, b)
    assert big == pytest.approx(2 * n * b, rel=1e-3)
    assert analysis.ps_exchange(1024, n, 0, b) > 500 * big
    with pytest.raises(ValueError):
        analysis.exchange_time("tree", 2, n, a, b)


def _records(alpha=50e-6, beta=1e-9, c0=2e-3, c1=10e-6, fixed=1e-3, nbytes=2_000_000,
             global_batch=1024, ranks=(1, 2, 4, 8), repeats=3, noise=0.0, seed=0):
    rng = random.Random(seed)
    out = []
    for rep in range(repeats):
        for p in ranks:
            b = global_batch // p
            comp = c0 + c1 * b
            step = (comp + fixed + analysis.ring_exchange(p, nbytes, alpha, beta)) * (
                1 + rng.gauss(0, noise))
            x = global_batch / step
            out.append({"kind": "train", "study": "s", "status": "ok",
                        "point": {"id": f"n{p}-r1-horovod-none-rep{rep}", "repeat": rep},
                        "params": {"batch_size": b, "global_batch": global_batch,
                                   "backend": "horovod", "compression": "none"},
                        "layout": {"size": p, "nodes": p, "ranks_per_node": 1},
                        "metrics": {"throughput": {"mean": x, "std": 0.01 * x, "n": 10,
                                                   "unit": "samples/s"},
                                    "step_time": {"median": step},
                                    "split": {"compute_s": comp, "exchange_s": step - comp}},
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


def test_calibration_recovers_the_parameters_it_was_given():
    rows = analysis.group_records(_records())
    m = analysis.calibrate(rows, "ring")
    assert m.alpha == pytest.approx(50e-6, rel=1e-6)
    assert m.beta == pytest.approx(1e-9, rel=1e-6)
    assert m.c0 == pytest.approx(2e-3) and m.c1 == pytest.approx(10e-6)
    assert m.fixed == pytest.approx(1e-3)
    analysis.predict_rows(rows, m)
    assert max(abs(r.model_error) for r in rows) < 1e-6


def test_calibration_with_noise_predicts_within_a_few_percent_held_out():
    rows = analysis.group_records(_records(noise=0.01, repeats=4))
    m = analysis.calibrate(rows, "ring")
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
    m = analysis.calibrate(analysis.group_records(_records()), "ring", fit)
    assert (m.alpha, m.beta, m.gamma) == (3e-6, 2e-10, 1e-10)
    assert "bench fit" in m.source


def test_one_rank_count_puts_the_exchange_on_the_dominant_term():
    small = analysis.calibrate(analysis.group_records(_records(ranks=(1, 2), nbytes=2436)), "ring")
    assert small.beta == 0 and small.alpha > 0
    big = analysis.calibrate(analysis.group_records(_records(ranks=(1, 2))), "ring")
    assert big.alpha == 0 and big.beta > 0
    for m, n in ((small, 2436), (big, 2_000_000)):   # either way the 2-rank step is reproduced
        rows = analysis.group_records(_records(ranks=(1, 2), nbytes=n))
        analysis.predict_rows(rows, m)
        assert abs(rows[1].model_error) < 1e-6


def test_extrapolation_efficiency_falls_with_ranks_and_is_higher_on_faster_networks():
    m = analysis.calibrate(analysis.group_records(_records()), "ring")
    rows = analysis.extrapolate(m, "weak", 64, 100e6, analysis.PRESETS, [1, 2, 8, 64, 512])
    for net in analysis.PRESETS:
        eff = [r["efficiency"] for r in rows if r["network"] == net]
        assert eff[0] == pytest.approx(1.0)
        assert all(a >= b for a, b in zip(eff, eff[1:]))
    at512 = {r["network"]: r["efficiency"] for r in rows if r["ranks"] == 512}
    assert at512["ib-ndr"] > at512["ib-hdr"] > at512["ib-edr"] > at512["roce-25g"]
    strong = analysis.extrapolate(m, "strong", 64, 1e6, {"x": analysis.PRESETS["ib-edr"]},
                                  [1, 2, 64, 128])
    assert [r["ranks"] for r in strong] == [1, 2, 64]     # stops below one sample per rank


def test_model_lands_within_ten_points_of_horovods_published_efficiency():
    rows = {r["model"]: r for r in analysis.published_comparison()}
    assert rows["ResNet-101"]["published_efficiency"] == 0.90
    assert rows["VGG-16"]["published_efficiency"] == 0.68
    for r in rows.values():
        assert abs(r["difference_points"]) <= 10, r
    # The model must tell the two apart for the right reason: VGG-16 has 3x the gradients.
    assert rows["VGG-16"]["exchange_s"] > 2.5 * rows["ResNet-101"]["exchange_s"]
    assert rows["VGG-16"]["model_efficiency"] < rows["ResNet-101"]["model_efficiency"]
