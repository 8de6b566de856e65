"""The part-by-part prediction of held-out points (hpcdl.model.predict): the MPI library's
allreduce decision, the bytes on each link, the expected slowest rank, the calibration from the
smallest node counts recovering a study made by known parts, the two baselines, the conformal
band and its coverage, the prediction across link rates, and the remedies' gains."""
import json
import math
import random
import re
from pathlib import Path

import pytest

from hpcdl import analysis, costmodel
from hpcdl import study as study_model
from hpcdl.model import Inputs
from hpcdl.analysis import reading
from hpcdl.model import (allreduce, baselines, host_spread, loop_share, measured, networks, parts,
                         predict)
from hpcdl.model.host_spread import HostSpread
from hpcdl.model.loop_share import LoopShare
from hpcdl.report import prediction

MB = 4_617_088          # box-cnn-weak's gradient bytes


def test_open_mpi_fixed_decision_for_the_sizes_training_exchanges():
    # 4.6 MB (fp32) and 2.3 MB (fp16) on 2..8 ranks: Rabenseifner (6) everywhere
    for p in (2, 3, 4, 5, 8):
        for n in (MB, MB / 2):
            assert allreduce.ompi_allreduce(p, n) == 6
    # small messages: recursive doubling (3) or ring (4), by the communicator's size
    assert allreduce.ompi_allreduce(2, 4) == 4 and allreduce.ompi_allreduce(2, 1000) == 3
    assert allreduce.ompi_allreduce(2, 100_000) == 5
    assert allreduce.ompi_allreduce(4, 8) == 4 and allreduce.ompi_allreduce(4, 4096) == 3
    assert allreduce.ompi_allreduce(8, 4096) == 3 and allreduce.ompi_allreduce(300, 1000) == 2


def _rec(p, backend="horovod", compression="none", env=None):
    return {"params": {"backend": backend, "compression": compression},
            "manifest": {"env": env or {}}}


def test_the_algorithm_a_record_ran_pinned_or_decided():
    assert allreduce.algorithm_of(_rec(4), 4, MB) == "rabenseifner"
    pinned = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
              "OMPI_MCA_coll_tuned_allreduce_algorithm": "4"}
    assert allreduce.algorithm_of(_rec(4, env=pinned), 4, MB) == "ring"
    # a pinned algorithm without dynamic rules is ignored by Open MPI, and so here
    assert allreduce.algorithm_of(_rec(4, env={"OMPI_MCA_coll_tuned_allreduce_algorithm": "4"}),
                                4, MB) == "rabenseifner"
    assert allreduce.algorithm_of(_rec(4, backend="ps"), 4, MB) == "ps"
    assert allreduce.algorithm_of(_rec(4, backend="ring"), 4, MB) == "ring"
    assert allreduce.algorithm_of(_rec(4, env={"HOROVOD_CONTROLLER": "gloo"}), 4, MB) == "ring"


def test_bytes_on_a_link_and_which_algorithms_exchange_both_ways_with_one_peer():
    n = 1000.0
    assert costmodel.link_bytes("ring", n, 4) == pytest.approx(1500)
    assert costmodel.link_bytes("rabenseifner", n, 8) == pytest.approx(1750)
    assert costmodel.link_bytes("rabenseifner", n, 6) == pytest.approx(1500 + 2000)   # 2 fold in
    assert costmodel.link_bytes("recursive doubling", n, 8) == pytest.approx(3000)
    assert costmodel.link_bytes("ps", n, 4) == pytest.approx(6000)
    assert costmodel.link_bytes("ring", n, 1) == 0
    assert costmodel.pairwise("rabenseifner", 8) and costmodel.pairwise("ring", 2)
    assert not costmodel.pairwise("ring", 4) and not costmodel.pairwise("ps", 2)


def test_beyond_a_power_of_two_the_ranks_fold_in_and_out_one_way_as_open_mpi_sends_them():
    """Open MPI's Rabenseifner on 3 or 6 ranks: the extra ranks' pairs swap halves (both ways),
    then send a half and at the end the whole result one way; only the swap and the core's
    recursive halving and doubling send both ways over one connection."""
    n = 1000.0
    assert costmodel.link_parts("rabenseifner", n, 2) == pytest.approx((1000, 0))
    assert costmodel.link_parts("rabenseifner", n, 3) == pytest.approx((1000 + 500, 1500))
    assert costmodel.link_parts("rabenseifner", n, 6) == pytest.approx((1500 + 500, 1500))
    assert costmodel.link_parts("rabenseifner", n, 8) == pytest.approx((1750, 0))
    assert costmodel.link_parts("recursive doubling", n, 6) == pytest.approx((2000, 2000))
    assert costmodel.link_parts("ring", n, 3) == pytest.approx((0, 2000 * 2 / 3))
    assert costmodel.link_parts("ps", n, 3) == pytest.approx((0, 4000))
    # the time: the both-ways bytes 1 + duplex times as long, the one-way bytes at the rate
    rate, d = 8e6 / allreduce.FRAMING, 0.5              # 1 MB/s of payload
    assert allreduce.on_link("rabenseifner", n, 3, rate, d) == pytest.approx(
        (1500 * 1.5 + 1500) / 1e6)
    assert allreduce.on_link("rabenseifner", n, 2, rate, d) == pytest.approx(1000 * 1.5 / 1e6)


def test_expected_maximum_of_draws():
    assert parts.expected_max([1.0, 2.0], 1) == pytest.approx(1.5)
    assert parts.expected_max([1.0, 2.0], 2) == pytest.approx(1.75)
    assert parts.expected_max([1.0, 2.0, 3.0], 50) == pytest.approx(3.0, abs=1e-6)
    assert parts.expected_max([], 4) == 1.0


def test_conformal_quantile_needs_enough_residuals_for_its_level():
    assert baselines.conformal_quantile([0.1 * i for i in range(1, 10)], 0.9) == pytest.approx(0.9)
    assert baselines.conformal_quantile([0.1, 0.2, 0.3], 0.9) is None


# --- a study made by known parts --------------------------------------------------------------

RATE = 200e6


def truth(p, b=128, per_sample=3.2e-3, k=0.05, duplex=0.9, window=0.1, fixed=2e-3,
          wire=MB, rate=RATE, backend="horovod", spread=(1.0,), pin=None, ex_factor=None,
          loop=None):
    """compute center, slowest rank's compute, exchange alone and step of the known parts;
    ``ex_factor``: by node count, what the exchange costs beyond the model's terms; ``loop``: by
    node count, the share of a rank's CPU Horovod's loop takes (compute beyond 2 nodes grows by
    it)."""
    center = per_sample * b * (1 + k * (p > 1))
    if loop and p > 2:
        center *= (1 - loop[2]) / (1 - loop[p])
    algo = ("ps" if backend == "ps"
            else allreduce.OMPI_ALLREDUCE[pin or allreduce.ompi_allreduce(p, wire)])
    ex = 0.0
    if p > 1:
        both, one = costmodel.link_parts(algo, wire, p)
        ex = (both * (1 + duplex) + one) / (rate / 8 * allreduce.FRAMING)
        ex *= (ex_factor or {}).get(p, 1.0)
    step_c = center * parts.expected_max(spread, p)
    # the exchange hides behind compute at 2 nodes, the calibration, and beyond it the share of
    # that the model takes there (made by the model's own parts)
    w = 0.0 if backend == "ps" else window
    hidden = min(ex, w * step_c) * (1.0 if p <= 2 else parts.BEYOND)
    return center, ex, step_c + fixed + ex - hidden


def study(nodes=(1, 2, 4, 8), repeats=3, rates=(RATE,), compressions=("none",),
          backend="horovod", batch=128, tuning="", pin=None, **kw):
    """Records of known parts; ``tuning``: the point's tuning axis, ``pin``: the Open MPI
    algorithm its multi-node runs pinned (a tuning file's pick)."""
    out = []
    env = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
           "OMPI_MCA_coll_tuned_allreduce_algorithm": str(pin)} if pin else {}
    for rate in rates:
        net = f"{int(rate / 1e6)}mbit"
        for comp in compressions:
            wire = costmodel.wire_bytes(MB // 4, comp)
            for rep in range(repeats):
                for p in nodes:
                    center, ex, step = truth(p, b=batch, wire=wire, rate=rate, backend=backend,
                                             pin=pin if p > 1 else None, **kw)
                    ranks = [{"host": f"n{i + 1}", "compute_probes_s": [9.9] + [center] * 5,
                              "exchange_probes_s": [9.9] + [ex] * 5 if p > 1 else []}
                             for i in range(p)]
                    out.append({
                        "kind": "train", "status": "ok",
                        "declared": {"scaling": "weak", "calibration": "runs:nodes<=2"},
                        "point": {"id": f"n{p}-{backend}-{comp}-{net}-t{tuning}-rep{rep}",
                                  "repeat": rep, "network": net,
                                  **({"tuning": tuning} if tuning else {})},
                        "params": {"batch_size": batch, "global_batch": batch * p,
                                   "backend": backend, "compression": comp, "workload": "cnn"},
                        "layout": {"size": p, "nodes": p, "ranks_per_node": 1},
                        "box": {"link_bits_per_s": rate, "link_rate": net},
                        "manifest": {"env": env if p > 1 else {}},
                        "metrics": {"throughput": {"mean": batch * p / step, "std": 1.0, "n": 15,
                                                   "unit": "img/s"},
                                    "step_time": {"median": step},
                                    "split": {"method": "probe", "compute_s": center,
                                              "exchange_alone_s": ex if p > 1 else None},
                                    "ranks": ranks},
                        "gradient_bytes": MB})
    return out


def _run(recs, remedied=()):
    return predict.of_records(recs, reading.row_key, 2, "weak", remedied)


def test_a_study_made_by_known_parts_is_predicted_exactly_at_every_held_out_point():
    res = _run(study(rates=(RATE, 500e6), compressions=("none", "fp16")))
    assert len(res["axes"]) == 4
    for ax in res["axes"]:
        m = ax["model"]
        assert m["k"] == pytest.approx(0.05) and m["duplex"] == pytest.approx(0.9)
        assert m["window"] == pytest.approx(0.1) and m["fixed_s"] == pytest.approx(2e-3)
        for pt in ax["points"]:
            assert pt["algorithm"] == "rabenseifner" or pt["nodes"] == 1
            for part in ("compute", "exchange", "step"):
                if pt["measured"][part]:
                    assert pt["predicted"][part] == pytest.approx(pt["measured"][part], rel=1e-9)
    h = res["heldout"]
    assert h["points"] == 8 and h["within_10"] == 8 and h["parts_within_15"] == 8
    assert h["mae_model"] == pytest.approx(0, abs=1e-9)
    # the baselines miss what grows with p: the naive one most
    assert h["mae_naive"] > h["mae_one_parameter"] > 0
    # across rates the model needs only the other rate
    assert res["cross_rate"] and all(abs(c["error"]) < 1e-9 for c in res["cross_rate"])


def test_at_3_and_6_nodes_the_duplex_share_calibrated_at_2_costs_only_the_bytes_sent_both_ways():
    res = _run(study(nodes=(1, 2, 3, 6)))
    (ax,) = res["axes"]
    assert ax["model"]["duplex"] == pytest.approx(0.9)
    held = [pt for pt in ax["points"] if pt["nodes"] in (3, 6)]
    assert len(held) == 2
    for pt in held:
        p, ex = pt["nodes"], pt["measured"]["exchange"]
        assert pt["algorithm"] == "rabenseifner"
        assert pt["predicted"]["exchange"] == pytest.approx(ex, rel=1e-9)
        # the share on every byte, as if the fold went both ways, would cost 20-27% more
        wire = costmodel.wire_bytes(MB // 4, "none")
        every = allreduce.on_link("rabenseifner", wire, p, RATE) * 1.9
        assert every > 1.2 * ex


def test_the_first_probe_is_left_out_and_the_slowest_rank_is_the_expected_maximum():
    recs = study(spread=(0.9, 1.1))
    # the same study, but the ranks' probes spread: rank i of each run at 0.9 or 1.1 x center
    for r in recs:
        for i, rank in enumerate(r["metrics"]["ranks"]):
            c = rank["compute_probes_s"][1]
            f = 1.1 if i % 2 else (0.9 if r["layout"]["size"] > 1 else 1.0)
            rank["compute_probes_s"] = [50.0] + [c * f] * 5
    res = _run(recs)
    pts = {pt["nodes"]: pt for pt in res["axes"][0]["points"]}
    # the 2-node run's slowest rank is 1.1 x its center (the median of its ranks' probes)
    assert pts[2]["measured"]["compute"] == pytest.approx(1.1 * truth(2)[0])
    assert pts[8]["predicted"]["compute"] > pts[4]["predicted"]["compute"]
    # the traced first probe (50 s) left no trace
    assert all(pt["measured"]["compute"] < 1.0 for pt in pts.values())


def test_the_one_beta_baseline_is_the_one_node_step_plus_the_two_node_excess_as_bandwidth():
    res = _run(study())
    pts = {pt["nodes"]: pt for pt in res["axes"][0]["points"]}
    s1, s2 = pts[1]["measured"]["step"], pts[2]["measured"]["step"]
    ring = lambda p: float(costmodel.coefficients("ring", MB, p)[1])      # noqa: E731
    assert pts[8]["one_parameter"] == pytest.approx(s1 + (s2 - s1) / ring(2) * ring(8))
    assert pts[8]["naive"] == pytest.approx(s2)          # weak: efficiency stays, so the step


def test_the_parameter_server_has_no_window_and_a_fixed_time_per_exchange():
    recs = study(backend="ps", window=0.4)
    for r in recs:                    # hpcdl's ps times its phases on rank 0, no probes
        for rank in r["metrics"]["ranks"]:
            rank["compute_probes_s"], rank["exchange_probes_s"] = [], []
        r["metrics"]["split"] = {"method": "timed", "compute_s": r["metrics"]["split"]["compute_s"],
                                 "exchange_s": r["metrics"]["split"]["exchange_alone_s"]}
        if r["layout"]["size"] > 1:
            r["metrics"]["split"]["exchange_s"] += 0.1           # the root's own work
            r["metrics"]["step_time"]["median"] += 0.1
    res = _run(recs)
    m = res["axes"][0]["model"]
    assert m["window"] == 0 and m["k"] == pytest.approx(0.05)
    assert m["per_exchange_s"] == pytest.approx(0.1)
    for pt in res["axes"][0]["points"]:
        assert pt["predicted"]["exchange"] == pytest.approx(pt["measured"]["exchange"] or 0.0)


def test_the_band_comes_from_left_out_repeats_and_its_coverage_is_counted():
    rng = random.Random(1)
    recs = study(repeats=9)
    for r in recs:                    # run-to-run noise of a few percent on every step
        r["metrics"]["step_time"]["median"] *= 1 + rng.gauss(0, 0.03)
    res = _run(recs)
    assert res["band_residuals"] == 9            # each 2-node repeat, predicted without it
    q = res["band_halfwidth"]
    assert q is not None and 0 < q < 0.2
    h = res["heldout"]
    assert h["banded"] == 2 and h["covered"] == sum(
        pt["band"][0] <= pt["measured"]["step"] <= pt["band"][1]
        for pt in res["axes"][0]["points"] if not pt["fitted"])
    assert h["coverage"] == h["covered"] / h["banded"]


def test_remedies_predicted_and_measured_by_the_fp16_axis_and_a_larger_batch_study():
    recs = study(compressions=("none", "fp16"))
    bigger = study(batch=256)
    res = _run(recs, remedied=bigger)
    fixes = {r["remedy"]: r for r in res["remedies"] if not r["remedy"].startswith("allreduce ")}
    assert set(fixes) == {"fp16 gradients", "twice the batch per rank"}
    for r in fixes.values():
        assert r["nodes"] == 8 and r["model_gain"] > 1
        # the studies were made by the model's own parts: the gain comes exactly
        assert r["gain_error"] == pytest.approx(0, abs=1e-9)
    # without the larger-batch study its gain is predicted only
    alone = {r["remedy"]: r for r in _run(recs)["remedies"]}
    assert alone["twice the batch per rank"]["measured_gain"] is None


def test_the_tuned_settings_are_a_remedy_of_the_default_ones_measured_by_the_tuning_axis():
    # default settings: Open MPI's Rabenseifner (both ways over one connection, the duplex
    # share); tuned: the ring pinned, at two rates: the model calibrated on the default's 1-2
    # nodes predicts the ring's gain at 8 nodes exactly, and across rates only within a setting
    recs = (study(rates=(RATE, 500e6), tuning="default")
            + study(rates=(RATE, 500e6), tuning="tuned", pin=4))
    res = _run(recs)
    fixes = [r for r in res["remedies"] if r["remedy"].startswith("the tuned settings")]
    assert [(r["axis"], r["remedy"]) for r in fixes] == [
        ("horovod/none@200mbit settings:default", "the tuned settings' allreduce (ring)"),
        ("horovod/none@500mbit settings:default", "the tuned settings' allreduce (ring)")]
    for r in fixes:
        assert r["model_gain"] > 1.05 and r["gain_error"] == pytest.approx(0, abs=1e-9)
    # a tuned axis gets no remedies of its own; fp16 and the batch stay the default's
    assert {r["axis"] for r in res["remedies"]} == {f["axis"] for f in fixes}
    assert all(c["calibrated"].split(" ")[1] == c["predicted"].split(" ")[1]
               for c in res["cross_rate"]) and len(res["cross_rate"]) == 8
    assert all(abs(c["error"]) < 1e-9 for c in res["cross_rate"])


def test_the_report_says_whether_the_model_beats_the_baselines_and_what_its_band_covered():
    recs = study(repeats=9)
    res = _run(recs)
    lines = "\n".join(prediction._prediction_markdown(res, {
        "prediction-vs-measured": prediction._prediction_table(res),
        "prediction-remedies": prediction._remedy_table(res)}))
    assert "The model's error is at most half the one-β baseline's." in lines
    assert "Step within 10%: 2 of 2" in lines and "nominal coverage 90%, measured" in lines
    res["heldout"]["mae_model"] = res["heldout"]["mae_one_parameter"] * 1.5
    lines = "\n".join(prediction._prediction_markdown(res, {
        "prediction-vs-measured": prediction._prediction_table(res),
        "prediction-remedies": prediction._remedy_table(res)}))
    assert "The model does **not** beat the one-β baseline." in lines


def test_a_study_without_a_calibration_subset_calibrates_on_every_point_and_without_probes_on_none():
    res = predict.of_records(study(), reading.row_key, 0, "weak")
    assert not res["held_out"] and res["heldout"]["points"] == 0
    assert all(pt["fitted"] for ax in res["axes"] for pt in ax["points"])
    assert res["forecast"] and res["band_halfwidth"] is not None
    recs = study()
    for r in recs:
        for rank in r["metrics"]["ranks"]:
            rank["compute_probes_s"] = []
        r["metrics"]["split"] = {"method": "probe"}
    assert _run(recs) == {}


def test_a_window_over_the_whole_compute_is_held_at_all_of_it():
    recs = study()
    for r in recs:     # the exchange alone (1 s) beyond what the step paid less its whole compute
        if r["layout"]["size"] == 2:
            c = r["metrics"]["split"]["compute_s"]
            for rank in r["metrics"]["ranks"]:
                rank["exchange_probes_s"] = [9.9] + [1.0] * 5
            r["metrics"]["step_time"]["median"] = c + 2e-3 + 1.0 - 1.2 * c
    ax = _run(recs)["axes"][0]
    assert ax["model"]["window"] == 1.0
    two = next(pt for pt in ax["points"] if pt["nodes"] == 2)
    # all of the compute hid exchange: the step pays the fixed cost and the exchange beyond it
    assert two["predicted"]["exchange"] == pytest.approx(1.0)
    assert two["predicted"]["step"] == pytest.approx(ax["model"]["fixed_s"] + 1.0)


def test_a_bench_fit_beside_the_calibration_subset_gives_the_exchange_of_every_point():
    fit = {"alpha_s": 1e-3, "beta_s_per_byte": 4e-8, "model": "ring", "source": "bench fit (horovod)"}
    res = predict.of_records(study(), reading.row_key, 2, "weak",
                          exchange_fit=lambda backend, compression: dict(fit))
    ax = res["axes"][0]
    assert ax["model"]["exchange_source"] == "bench fit (horovod)"
    for pt in ax["points"]:
        p = pt["nodes"]
        want = costmodel.predict("ring", MB, p, 1e-3, 4e-8) if p > 1 else 0.0
        assert pt["predicted"]["exchange"] == pytest.approx(want, rel=1e-12)
        # compute still comes from the runs, unchanged by the fit
        assert pt["predicted"]["compute"] == pytest.approx(pt["measured"]["compute"], rel=1e-9)
    # a fit is of one allocation's links: nothing is predicted across rates from it
    two = predict.of_records(study(rates=(RATE, 500e6)), reading.row_key, 2, "weak",
                          exchange_fit=lambda backend, compression: dict(fit))
    assert two["cross_rate"] == []


def test_the_declared_calibration_names_the_fit_and_the_subset_alone_or_together():
    def declared(cal):
        got = Inputs.declared([{"declared": {"calibration": cal}}])
        return got.fit, got.nodes_max
    assert declared("runs") == (None, 0)
    assert declared("runs:nodes<=2") == (None, 2)
    assert declared("fit:r/fit.json") == ("r/fit.json", 0)
    assert declared("runs:nodes<=4;fit:a;b.json") == ("a;b.json", 4)
    assert Inputs.declared([{}]) == Inputs()


def test_the_studys_model_inputs_are_json_in_the_record_and_read_back_whole(tmp_path):
    fit = tmp_path / "f;1.json"          # a path may hold ";"
    fit.write_text(json.dumps({"schema": "hpcdl.fit/1", "ranks": 2, "backends": {
        "horovod": {"alpha_s": 1e-3, "beta_s_per_byte": 4e-8, "model": "ring"}}}))
    path = tmp_path / "s.toml"
    path.write_text('[study]\nname = "s"\nscaling = "weak"\n[workload]\nname = "cnn"\n'
                    'batch_size = 8\n[layout]\nnodes = [1, 2, 4]\n[model]\ncalibrate = '
                    '{nodes_max = 2, exchange = "t-{nodes}n.json"}\nforecast = [16, 64]\n'
                    f'fit = "{fit}"\n')
    declared = study_model.load(path).declared
    # a forecast study measures its allocation's loop and spread files itself
    loop, spread = "results/s/allocation/loop-cpu.json", "results/s/allocation/spread.json"
    assert declared["model"] == {"nodes_max": 2, "exchange": "t-{nodes}n.json", "loop": loop,
                                 "spread": spread, "fit": str(fit), "forecast": [16, 64]}
    got = Inputs.declared([{"declared": json.loads(json.dumps(declared))}])
    assert got == Inputs(nodes_max=2, fit=str(fit), exchange="t-{nodes}n.json", loop=loop,
                         spread=spread, forecast=(16, 64))
    # a record made before the JSON form reads the same
    assert Inputs.declared([{"declared": {"calibration": f"runs:nodes<=2;fit:{fit};bench:"
                                          f"t-{{nodes}}n.json;loop:{loop};spread:{spread};"
                                          "forecast:16,64"}}]) == got
    assert Inputs.of_json({"networks": ["ib-edr"]}).networks == ("ib-edr",)
    # the user's inputs go over the declared ones, field by field
    assert Inputs(loop="l.json", forecast=()).over(got) == Inputs(
        nodes_max=2, fit=str(fit), exchange="t-{nodes}n.json", loop="l.json", spread=spread,
        forecast=())


def test_a_study_declaring_both_is_analysed_with_the_fit_for_the_exchange_only(tmp_path):
    recs = study()
    for r in recs:
        r["declared"]["calibration"] = f"runs:nodes<=2;fit:{tmp_path / 'f.json'}"
    doc = {"schema": "hpcdl.fit/1", "ranks": 2, "backends": {
        "horovod": {"alpha_s": 1e-3, "beta_s_per_byte": 4e-8, "model": "ring"}}}
    (tmp_path / "f.json").write_text(json.dumps(doc))
    res = analysis.analyse(recs, "s")
    assert res.calibration.startswith(
        f"runs with at most 2 node(s), the exchange from fit:{tmp_path / 'f.json'}")
    ax = res.prediction["axes"][0]
    assert ax["model"]["exchange_source"] == f"bench fit (horovod, 2 ranks) from {tmp_path}/f.json"
    assert {r.fitted for r in res.rows} == {True, False}
    line = prediction._model_table(res.prediction).markdown()
    assert f"from the bench fit (horovod, 2 ranks) from {tmp_path}/f.json" in line


def _tuning_file(path, nodes, candidates, nbytes=MB):
    """A tuning file as 'hpcdl tune' writes it, with ``candidates``: (compression, name, times)."""
    import json
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "schema": "hpcdl.tuning/1", "bytes": nbytes, "time": "2026-11-26T07:20:00+00:00",
        "made_for": {"nodes": nodes, "ranks": nodes, "ranks_per_node": 1},
        "candidates": [{"compression": c, "name": n, "times_s": t} for c, n, t in candidates]}))


DEFAULTS = "library's choice, cycle 1 ms, fusion 128 MiB"


def test_the_held_out_exchange_is_priced_from_a_small_allocation_never_from_its_own_count(
        tmp_path):
    """Nothing measured at p enters the prediction of p: the 4-node tuning file prices the
    8-node point (the model's growth from 4 to 8 nodes times what the allocation took over the
    model at 4), and stands beside the 4-node point as measured there, not as its prediction."""
    # the 4- and 8-node exchange costs 1.3x what the link model can know from 2 nodes
    extra = {4: 1.3, 8: 1.3}
    recs = study(ex_factor=extra) + study(backend="ps", ex_factor=extra)
    ex = {p: truth(p, ex_factor=extra)[1] for p in (4, 8)}
    _tuning_file(tmp_path / "box-4n-200mbit.json", 4, [
        ("none", DEFAULTS, [ex[4] * 0.9, ex[4], ex[4] * 1.2]),
        ("none", "ring, cycle 1 ms, fusion 128 MiB", [0.001])])
    _tuning_file(tmp_path / "box-8n-200mbit.json", 4, [("none", DEFAULTS, [ex[8]])])
    bench = predict.Bench(str(tmp_path / "box-{nodes}n-{network}.json"))
    res = predict.of_records(recs, reading.row_key, 2, "weak", bench=bench)
    ring = next(a for a in res["axes"] if a["backend"] == "horovod")
    at = {pt["nodes"]: pt for pt in ring["points"]}
    # 4 nodes: the link model's exchange (1.3x short), the file's median beside it
    assert at[4]["exchange_from"] is None
    assert at[4]["error"]["exchange"] == pytest.approx(1 / 1.3 - 1, rel=1e-9)
    assert at[4]["exchange_measured_here"] == pytest.approx(ex[4], rel=1e-12)
    # 8 nodes: from the 4-node file, grown by the model: exact, the step too
    assert at[8]["predicted"]["exchange"] == pytest.approx(ex[8], rel=1e-9)
    assert at[8]["error"]["step"] == pytest.approx(0.0, abs=1e-9)
    assert "box-4n-200mbit.json (" + DEFAULTS + ", none, median of 3 rounds" in at[8]["exchange_from"]
    assert "x1.3 the model's at 4 nodes" in at[8]["exchange_from"]
    assert at[8]["model_exchange_error"] == pytest.approx(1 / 1.3 - 1, rel=1e-9)
    # the 8-node file was made for 4 nodes: not measured here, and why is said
    assert at[8]["exchange_measured_here"] is None
    assert any("box-8n-200mbit.json: made for 4 node(s)" in m for m in res["exchange_bench"]["misses"])
    assert res["exchange_bench"]["points"] == 1
    # the parameter server's exchange is not what 'hpcdl tune' times
    ps = next(a for a in res["axes"] if a["backend"] == "ps")
    assert all(pt["exchange_from"] is None for pt in ps["points"])
    # calibration points keep the runs' exchange
    assert all(pt["exchange_from"] is None for pt in ring["points"] if pt["fitted"])
    words = "\n".join(prediction._bench_words(res))
    assert "for 1 of them" in words
    assert "within 15% at 0 of 1" in words and "not taken:" in words


def test_a_fold_is_priced_from_a_count_that_folds_and_its_steps_from_a_power_of_two(tmp_path):
    """Open MPI's Rabenseifner folds the ranks beyond a power of two in and out (the same bytes
    one way at any count) around the power of two's steps. Where this allocation runs the fold
    1.8x and the steps 1.3x as slowly as the link model knows, the 6-node point is the 3-node
    file's time (one fold, one step each way) plus the steps 4 ranks add beyond 2 at the
    4-node file's rate; the 8-node point the 4-node file grown by the model: both exact. The
    3-node time grown by the model alone would miss 6 nodes, the 4-node time its fold."""
    def model(p):
        both, one = costmodel.link_parts("rabenseifner", MB, p)
        return (both * 1.9 + one) / (RATE / 8 * allreduce.FRAMING)

    pow2 = costmodel.power_of_two_below
    taken = {p: 1.3 * model(pow2(p)) + 1.8 * (model(p) - model(pow2(p))) for p in (3, 4, 6, 8)}
    extra = {p: taken[p] / model(p) for p in taken}
    recs = study(nodes=(1, 2, 6, 8), ex_factor=extra)
    for q in (3, 4):
        _tuning_file(tmp_path / f"box-{q}n-200mbit.json", q, [("none", DEFAULTS, [taken[q]])])
    bench = predict.Bench(str(tmp_path / "box-{nodes}n-{network}.json"))
    res = predict.of_records(recs, reading.row_key, 2, "weak", bench=bench)
    at = {pt["nodes"]: pt for pt in res["axes"][0]["points"]}
    assert at[6]["algorithm"] == at[8]["algorithm"] == "rabenseifner"
    assert "box-3n-200mbit.json" in at[6]["exchange_from"]
    assert "(its fold), plus the steps from 2 to 4 ranks" in at[6]["exchange_from"]
    assert "box-4n-200mbit.json" in at[6]["exchange_from"]
    assert "box-4n-200mbit.json" in at[8]["exchange_from"]
    for p in (6, 8):
        assert at[p]["predicted"]["exchange"] == pytest.approx(taken[p], rel=1e-9)
    grown = model(6) * taken[3] / model(3)
    assert abs(grown - taken[6]) / taken[6] > 0.02
    # no power of two timed: the 3-node time grown by the model, as before
    (tmp_path / "box-4n-200mbit.json").unlink()
    res = predict.of_records(recs, reading.row_key, 2, "weak",
                             bench=predict.Bench(str(tmp_path / "box-{nodes}n-{network}.json")))
    at = {pt["nodes"]: pt for pt in res["axes"][0]["points"]}
    assert "its fold" not in at[6]["exchange_from"]
    assert at[6]["predicted"]["exchange"] == pytest.approx(grown, rel=1e-9)


def test_the_forecast_on_the_allocation_starts_from_a_small_allocations_measured_exchange(
        tmp_path):
    """The forecast's exchange on this allocation is priced as the held-out points are: the
    model's times what the algorithm that runs there took over the model's at the largest node
    count of at most 4 a tuning file measured; a file at 8 nodes does not enter it."""
    extra = {4: 1.3, 8: 1.3}
    recs = study(ex_factor=extra)
    ex4, ex8 = truth(4, ex_factor=extra)[1], truth(8, ex_factor=extra)[1]
    _tuning_file(tmp_path / "e-4n-200mbit.json", 4, [
        ("none", DEFAULTS, [ex4]),
        ("none", "Rabenseifner, cycle 1 ms, fusion 128 MiB", [ex4 * 0.99, ex4, ex4 * 1.01]),
        ("none", "ring, cycle 1 ms, fusion 128 MiB", [0.5])])
    _tuning_file(tmp_path / "e-8n-200mbit.json", 8, [("none", DEFAULTS, [ex8 * 2])])
    bench = predict.Bench(str(tmp_path / "e-{nodes}n-{network}.json"))
    res = predict.of_records(recs, reading.row_key, 2, "weak", bench=bench, forecast=(8, 64))
    (f,) = res["forecast"]
    here = {r["nodes"]: r for r in f["here"]}
    assert here[8]["exchange_s"] == pytest.approx(ex8, rel=1e-9)      # not the 8-node file's
    assert "e-4n-200mbit.json (" in here[8]["exchange_from"]
    plain = predict.of_records(recs, reading.row_key, 2, "weak", forecast=(8, 64))
    bare = {r["nodes"]: r for r in plain["forecast"][0]["here"]}
    assert bare[64]["exchange_from"] == ""
    assert here[64]["exchange_s"] == pytest.approx(bare[64]["exchange_s"] * 1.3, rel=1e-9)
    assert "x1.3 the model's at 4 nodes" in here[64]["exchange_from"]
    # a study holding no point out starts from its largest node count's own runs
    every = predict.of_records(recs, reading.row_key, 0, "weak", forecast=(64,))
    (r64,) = every["forecast"][0]["here"]
    assert r64["exchange_from"].startswith("the 8-node runs' own exchange")
    assert r64["exchange_s"] == pytest.approx(bare[64]["exchange_s"] * 1.3, rel=0.02)


def test_a_held_out_point_that_ran_its_own_tuned_setting_is_priced_from_that_setting(tmp_path):
    """A study that tunes at each node count runs another setting at each: the 4-node point ran
    the segmented ring, the 8-node point the ring. The 4-node point's exchange is priced from
    what the 3-node file timed of its own setting, not from another algorithm's time there."""
    recs = study(nodes=(1, 2, 4, 8), pin=4)
    seg = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
           "OMPI_MCA_coll_tuned_allreduce_algorithm": "5",
           "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": str(1 << 20)}
    for r in recs:
        if r["layout"]["nodes"] == 4:
            r["manifest"] = {**r["manifest"], "env": seg}
    _tuning_file(tmp_path / "t-3.json", 3, [
        ("none", "recursive doubling, cycle 1 ms, fusion 128 MiB", [0.05]),
        ("none", "ring, cycle 1 ms, fusion 128 MiB", [0.30]),
        ("none", "segmented ring (1024 KiB segments), cycle 1 ms, fusion 128 MiB", [0.40])])
    res = predict.of_records(recs, reading.row_key, 2, "weak",
                             bench=predict.Bench(str(tmp_path / "t-{nodes}.json")))
    at = {pt["nodes"]: pt for pt in res["axes"][0]["points"]}
    assert at[4]["algorithm"] == "segmented ring" and at[8]["algorithm"] == "ring"
    assert "segmented ring (1024 KiB segments)" in at[4]["exchange_from"]
    assert "recursive doubling" not in at[4]["exchange_from"]
    assert "t-3.json (ring, " in at[8]["exchange_from"]


def test_what_each_input_is_worth_is_measured_by_leaving_it_out(tmp_path):
    extra = {4: 1.3, 8: 1.3}
    recs = study(ex_factor=extra)
    _tuning_file(tmp_path / "e-4n-200mbit.json", 4,
                 [("none", DEFAULTS, [truth(4, ex_factor=extra)[1]])])
    bench = predict.Bench(str(tmp_path / "e-{nodes}n-{network}.json"))
    done = predict.of_records(recs, reading.row_key, 2, "weak", bench=bench, forecast=())
    costs = predict.input_costs(done, predict._points(recs, reading.row_key), 2, "weak", None,
                                predict.Files(bench))
    by = {c["input"]: c for c in costs}
    # the held-out 4 and 8 nodes; no loop or spread file given, so none is left out
    assert set(by) == {"all", "exchange"} and by["all"]["points"] == by["exchange"]["points"] == 2
    # priced from the 4-node exchange, the 8-node point is exact; without it, 1.3x short
    assert by["exchange"]["mae"] > by["all"]["mae"]
    assert by["exchange"]["needed_halfwidth"] > by["all"]["needed_halfwidth"]


def test_a_pinned_algorithm_takes_its_own_candidate_and_another_model_is_refused(tmp_path):
    recs = study(pin=4)
    _tuning_file(tmp_path / "t-4.json", 4, [
        ("none", DEFAULTS, [9.0]), ("none", "ring, cycle 1 ms, fusion 128 MiB", [0.25])])
    _tuning_file(tmp_path / "t-8.json", 8, [("none", "ring, cycle 1 ms, fusion 128 MiB", [0.5])],
                 nbytes=2 * MB)
    res = predict.of_records(recs, reading.row_key, 2, "weak",
                          bench=predict.Bench(str(tmp_path / "t-{nodes}.json")))
    at = {pt["nodes"]: pt for pt in res["axes"][0]["points"]}
    # the 4-node file prices the 8-node point with the ring the runs pinned; measured at 4 itself
    assert at[4]["exchange_measured_here"] == 0.25 and at[4]["exchange_from"] is None
    assert "t-4.json" in at[8]["exchange_from"]
    assert at[8]["exchange_measured_here"] is None
    assert any("another model's gradients" in m for m in res["exchange_bench"]["misses"])


def test_a_tuning_file_made_on_another_processor_is_refused(tmp_path):
    import json
    recs = study(pin=4)
    path = tmp_path / "t-4.json"
    _tuning_file(path, 4, [("none", "ring, cycle 1 ms, fusion 128 MiB", [0.25])])
    doc = json.loads(path.read_text())
    doc["made_for"]["cpu"] = "Intel Xeon (family 6 model 85; avx512f)"
    path.write_text(json.dumps(doc))
    pattern = str(tmp_path / "t-{nodes}.json")
    here = "cpu AMD EPYC (family 25 model 1; avx2 fma); box cpus_per_node=0.2"
    res = predict.of_records(recs, reading.row_key, 2, "weak", bench=predict.Bench(pattern, machine=here))
    at = {pt["nodes"]: pt for pt in res["axes"][0]["points"]}
    assert at[8]["exchange_from"] is None and at[4]["exchange_measured_here"] is None
    assert f"{path}: made on processor 'Intel Xeon (family 6 model 85; avx512f)', the records ran " \
           "on 'AMD EPYC (family 25 model 1; avx2 fma)'" in res["exchange_bench"]["misses"]
    # the records' own processor: taken
    same = here.replace("AMD EPYC (family 25 model 1; avx2 fma)", doc["made_for"]["cpu"])
    res = predict.of_records(recs, reading.row_key, 2, "weak", bench=predict.Bench(pattern, machine=same))
    assert {pt["nodes"]: pt for pt in res["axes"][0]["points"]}[4]["exchange_measured_here"] == 0.25


def test_the_setting_names_are_the_ones_tune_writes():
    env = {"HOROVOD_FUSION_THRESHOLD": "67108864"}
    assert costmodel.setting_name(env) == "library's choice, cycle 1 ms, fusion 64 MiB"
    assert costmodel.setting_name({**env, "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                                   "OMPI_MCA_coll_tuned_allreduce_algorithm": "5",
                                   "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize":
                                   "1048576", "HOROVOD_HIERARCHICAL_ALLREDUCE": "1"}) == (
        "segmented ring (1024 KiB segments), cycle 1 ms, fusion 64 MiB, hierarchical")
    # a pin without dynamic rules does nothing in Open MPI, and so names nothing
    assert costmodel.setting_name({"OMPI_MCA_coll_tuned_allreduce_algorithm": "4"}) == DEFAULTS
    # the cycle time read back from a name, as the loop file is looked up
    assert costmodel.setting_cycle(costmodel.setting_name({"HOROVOD_CYCLE_TIME": "0.2"})) == "0.2"
    assert costmodel.setting_cycle(DEFAULTS) == "1" and costmodel.setting_cycle("") is None


def test_the_processor_is_read_back_from_a_machine_setting():
    from hpcdl.analysis.provenance import cpu_of, machine_setting
    rec = {"manifest": {"cpu": "AMD EPYC (family 25 model 1; avx2 fma)"},
           "box": {"link_rate": "200mbit", "cpus_per_node": 0.2}}
    assert cpu_of(machine_setting(rec)) == "AMD EPYC (family 25 model 1; avx2 fma)"
    assert cpu_of(machine_setting({"manifest": {"cpu": "x"}})) == "x"
    assert cpu_of(machine_setting({"box": {"link_rate": "200mbit"}})) == ""


def test_a_declared_exchange_bench_is_read_beside_the_subset(tmp_path):
    recs = [{"declared": {"calibration": "runs:nodes<=2;bench:results/t-{nodes}n.json"}}]
    assert Inputs.declared(recs).nodes_max == 2
    assert Inputs.declared(recs).exchange == "results/t-{nodes}n.json"
    assert Inputs.declared([{"declared": {"calibration": "runs:nodes<=2"}}]).exchange is None
    extra = {3: 1.2, 4: 1.2, 8: 1.2}
    recs = study(ex_factor=extra)
    pattern = str(tmp_path / "t-{nodes}n.json")
    for r in recs:
        r["declared"]["calibration"] = f"runs:nodes<=2;bench:{pattern}"
    for p in (3, 4, 8):
        _tuning_file(tmp_path / f"t-{p}n.json", p, [("none", DEFAULTS,
                                                     [truth(p, ex_factor=extra)[1]])])
    res = analysis.analyse(recs, "s")
    assert res.calibration.endswith(f"their exchange from the tuning files {pattern} "
                                    "(at most 4 nodes, below each point's own)")
    # 4 nodes priced from the 3-node file, 8 from the 4-node one: both exact
    assert res.prediction["heldout"]["mae_model"] == pytest.approx(0.0, abs=1e-9)


def test_the_repeats_spread_is_the_measurements_own_error_and_the_report_says_it():
    recs = study(nodes=(1, 2, 4), repeats=3)
    for r in recs:                 # repeat 2 of every point 10% slower
        if r["point"]["repeat"] == 2:
            r["metrics"]["step_time"]["median"] *= 1.1
    res = _run(recs)
    assert [pt["repeat_spread"] for pt in res["axes"][0]["points"]] == pytest.approx([0.1] * 3)
    assert res["noise"] == pytest.approx({"points": 3, "median": 0.1, "max": 0.1})
    assert "repeats of one point lie 10.0% apart" in prediction._noise_words(res["noise"])
    one = _run(study(nodes=(1, 2, 4), repeats=1))
    assert one["noise"] == {"points": 0, "median": None, "max": None}
    assert one["axes"][0]["points"][0]["repeat_spread"] is None
    assert prediction._noise_words(one["noise"]).startswith("One repeat per point")


def test_a_baseline_within_the_repeats_spread_is_said_to_be_beyond_what_can_be_shown():
    recs = study(repeats=9)
    res = _run(recs)

    def words():
        return "\n".join(prediction._prediction_markdown(res, {
            "prediction-vs-measured": prediction._prediction_table(res),
            "prediction-remedies": prediction._remedy_table(res)}))
    res["heldout"].update(mae_model=0.048, mae_one_parameter=0.046)
    res["floor"] = {}                  # as without folds of repeats to refit the model on
    res["noise"] = {"points": 12, "median": 0.05, "max": 0.137}
    assert "does **not** beat the one-β baseline" in words()
    assert "Half the one-β baseline's error (2.3%) is within half the repeats' own spread" in words()
    res["noise"] = {"points": 12, "median": 0.036, "max": 0.05}     # the repeats agree closer
    assert "within half the repeats' own spread" not in words()


def _noisy(repeats, seed, sd=0.03):
    rng = random.Random(seed)
    recs = study(repeats=repeats)
    for r in recs:                    # run-to-run noise on every step, the model's parts exact
        r["metrics"]["step_time"]["median"] *= 1 + rng.gauss(0, sd)
    return recs


def test_the_floor_is_the_error_a_model_without_bias_shows_with_these_repeats():
    # the study by known parts has a model without bias: over many noisy studies its held-out
    # error averages about the floor each study estimates from its own repeats
    floors, errors = [], []
    for seed in range(40):
        res = _run(_noisy(4, seed))
        low = res["floor"]
        assert low["folds"] == 4 and low["points"] == 2
        for row in low["rows"]:
            assert row["floor"] == pytest.approx(predict.floor.SQRT_2_PI * (
                (row["model_moves"] ** 2 + row["measured_moves"] ** 2) / 4) ** 0.5)
        floors.append(low["floor"])
        errors.append(res["heldout"]["mae_model"])
    mean_floor, mean_err = sum(floors) / 40, sum(errors) / 40
    assert 0.8 < mean_err / mean_floor < 1.25
    # a repeat's noise is what it was made with; the model's predictions move less than the
    # one-β baseline's, which extrapolates the 2-node excess alone
    assert 0.02 < sum(r["measured_moves"] for s in range(3) for r in _run(_noisy(4, s))["floor"]
                      ["rows"]) / 6 < 0.04
    low = _run(_noisy(4, 0))["floor"]
    assert low["model_moves"] < low["one_parameter_moves"]
    assert len(low["mae_model_by_fold"]) == 4 == len(low["mae_one_parameter_by_fold"])
    # one repeat: nothing to refit on, no floor
    assert _run(study(repeats=1))["floor"] == {}


def test_a_target_below_the_floor_is_said_to_be_beyond_what_these_repeats_can_show():
    res = _run(_noisy(4, 0))

    def words():
        return "\n".join(prediction._prediction_markdown(res, {
            "prediction-vs-measured": prediction._prediction_table(res),
            "prediction-remedies": prediction._remedy_table(res)}))
    res["heldout"].update(mae_model=0.056, mae_one_parameter=0.052)
    res["floor"].update(floor=0.030, model_moves=0.041, one_parameter_moves=0.088,
                        measured_moves=0.029)
    text = words()
    assert "does **not** beat the one-β baseline" in text
    assert "would show a mean error of about 3.0% here" in text
    assert "half the one-β baseline's error (2.6%) is below that" in text
    assert "does **not** beat the naive baseline" not in text
    res["heldout"].update(mae_naive=0.05)        # a model no better than "efficiency stays"
    assert "The model does **not** beat the naive baseline." in words()
    res["floor"]["floor"] = 0.02                 # the repeats could show it: no excuse made
    assert "would show a mean error of about 2.0% here (`hpcdl.model.floor`)." in words()
    assert "is below that" not in words()
    res["heldout"].update(mae_model=0.02)        # the target met: nothing said of the floor
    assert "would show a mean error" not in words()


# --- what Horovod's loop takes from compute, by node count (a loop file) ----------------------

LOOP = {1: 0.075, 2: 0.12, 4: 0.165, 8: 0.2}
MACHINE = "cpu X (family 1 model 1; avx2); box nodes_in_box=8, cpus_per_node=0.2"


def _loop_file(path, shares_by_cycle, machine=MACHINE, **tables):
    """A loop file of these shares; ``tables``: more of its tables at the 1 ms cycle, each
    {name: (field, {nodes: value})} (growth's ratio, window's share)."""
    import json
    path.write_text(json.dumps({
        "schema": "hpcdl.loop-cpu/1", "time": "2026-11-26T18:00:00+00:00",
        "made_for": {"machine": machine, "link_rate": "200mbit", "rounds": 2},
        "shares": {c: {str(n): {"median": v, "busiest": v + 0.05} for n, v in t.items()}
                   for c, t in shares_by_cycle.items()},
        **{name: {"1": {str(n): {field: v} for n, v in by_n.items()}}
           for name, (field, by_n) in tables.items()}}))
    return str(path)


def test_compute_beyond_the_calibration_follows_the_loops_share_from_a_loop_file(tmp_path):
    recs = study(loop=LOOP) + study(backend="ps")
    path = _loop_file(tmp_path / "loop.json", {"1": LOOP, "5": {2: 0.3, 8: 0.3}})
    res = predict.of_records(recs, reading.row_key, 2, "weak", loop=LoopShare(path, MACHINE))
    hvd = next(a for a in res["axes"] if a["backend"] == "horovod")
    # the axis ran Horovod's default cycle (1 ms): its shares, but only those a small
    # allocation measures below each point: 4 nodes take the calibration's (no growth), 8 the
    # 4-node share held (the 8-node entry is left out)
    assert hvd["model"]["loop_shares"] == LOOP
    err = {pt["nodes"]: pt["error"]["compute"] for pt in hvd["points"] if not pt["fitted"]}
    assert err[4] == pytest.approx((1 - 0.165) / (1 - 0.12) - 1, rel=1e-9)
    assert err[8] == pytest.approx((1 - 0.2) / (1 - 0.165) - 1, rel=1e-9)
    for pt in hvd["points"]:
        if pt["fitted"]:
            assert pt["predicted"]["compute"] == pytest.approx(pt["measured"]["compute"], rel=1e-9)
    # the parameter server runs no Horovod loop: its compute stays at 1 + k
    ps = next(a for a in res["axes"] if a["backend"] == "ps")
    assert ps["model"]["loop_shares"] is None
    assert res["loop_bench"]["axes"] == [hvd["axis"]] and not res["loop_bench"]["misses"]
    # without the file the 8-node compute is short by exactly the loop's growth
    plain = predict.of_records(recs, reading.row_key, 2, "weak")
    at8 = next(pt for a in plain["axes"] if a["backend"] == "horovod" for pt in a["points"]
               if pt["nodes"] == 8)
    assert at8["error"]["compute"] == pytest.approx((1 - 0.2) / (1 - 0.12) - 1, rel=1e-9)
    words = "\n".join(prediction._loop_words(res))
    assert "on 1 Horovod axis(es)" in words and "loop.json (2 round(s), links 200mbit" in words


def test_a_loop_file_of_another_machine_or_cycle_is_not_taken_and_says_why(tmp_path):
    recs = study(loop=LOOP)
    path = _loop_file(tmp_path / "loop.json", {"5": LOOP})
    res = predict.of_records(recs, reading.row_key, 2, "weak", loop=LoopShare(path, MACHINE))
    assert res["axes"][0]["model"]["loop_shares"] is None
    assert res["loop_bench"]["misses"] == [f"{path}: no shares at a 1 ms cycle"]
    other = LoopShare(path, MACHINE.replace("0.2", "0.5"))
    assert other.shares(DEFAULTS) is None and "measured on" in other.misses()[0]
    assert LoopShare(path, None).misses() == [f"{path}: the records come from more than one machine"]
    assert "no such file" in LoopShare(str(tmp_path / "none.json"), MACHINE).misses()[0]
    # calibration points and p <= the calibrated p are never scaled
    assert loop_share.factor(LOOP, 2, 2) == 1.0 and loop_share.factor(LOOP, 4, 4) == 1.0
    assert loop_share.factor({2: 0.1}, 8, 2) == 1.0


def test_compute_beyond_the_calibration_grows_as_the_pass_beside_a_live_exchange_did(tmp_path):
    """A loop file's growth (the workload's pass beside a live exchange over alone, by node
    count) takes the place of the loop's share: a point at p grows by growth(k)/growth(p_cal),
    k the largest count below p of at most 4 nodes, held beyond it; never under 1."""
    recs = study(loop=LOOP)
    plain = predict.of_records(recs, reading.row_key, 2, "weak")
    path = _loop_file(tmp_path / "loop.json", {"1": LOOP},
                      growth=("ratio", {2: 1.10, 3: 1.15, 4: 1.21, 8: 1.6}))
    res = predict.of_records(recs, reading.row_key, 2, "weak", loop=LoopShare(path, MACHINE))
    ax = res["axes"][0]
    assert ax["model"]["loop_shares"] is None          # the growth holds the loop's share
    assert set(ax["model"]["growth"]) == {"3", "4"}
    grown = {pt["nodes"]: pt["predicted"]["compute"] / base["predicted"]["compute"]
             for pt, base in zip(ax["points"], plain["axes"][0]["points"])}
    assert grown[1] == grown[2] == 1.0
    assert grown[4] == pytest.approx(1.15 / 1.10, rel=1e-12)     # 3 nodes': nothing at 4 itself
    assert grown[8] == pytest.approx(1.21 / 1.10, rel=1e-12)     # 4 nodes', held (8's unused)
    assert res["loop_bench"]["growth"] == [ax["axis"]]
    words = "\n".join(prediction._loop_words(res))
    assert "grows as the workload's pass did beside a live exchange at up to 4 nodes" in words
    assert "live ×1.100 from 4" in " ".join(map(str, prediction._model_table(res).rows[0]))
    # a count reading under the calibration's is its noise: no shorter compute
    assert host_spread.crowd_factor({2: 1.2, 4: 1.1}, 8, 2) == 1.0


def test_beyond_the_calibration_half_the_hidden_exchange_hides_and_the_window_stands_beside(
        tmp_path):
    """Beyond the calibration the step takes half the exchange the calibration hid
    (parts.BEYOND), whether or not a loop file measured a window; the window's step (the share
    of a pass the allocation's training steps hid, at the largest count below p of at most 4
    nodes above the calibration that folds as p does, else the largest) stands beside each
    point as ``step_if_window``, not taken (docs/decisions.md)."""
    recs = study(nodes=(1, 2, 4, 6, 8), window=0.3)
    path = _loop_file(tmp_path / "loop.json", {"1": LOOP},
                      window=("share", {2: 0.3, 3: 0.05, 4: 0.2, 8: 0.9}))
    res = predict.of_records(recs, reading.row_key, 2, "weak", loop=LoopShare(path, MACHINE))
    plain = predict.of_records(recs, reading.row_key, 2, "weak", loop=LoopShare(
        _loop_file(tmp_path / "plain.json", {"1": LOOP}), MACHINE))
    (ax,), (bare,) = res["axes"], plain["axes"]
    assert ax["model"]["windows"] == {"3": 0.05, "4": 0.2}
    assert "windows" not in bare["model"]
    taken = {4: 0.05, 6: 0.05, 8: 0.2}          # 4: only 3 below it; 6: 3 folds alike; 8: 4
    w, fixed = ax["model"]["window"], ax["model"]["fixed_s"]
    for pt, base in zip(ax["points"], bare["points"]):
        assert pt["predicted"] == base["predicted"]         # the window changes no prediction
        if pt["fitted"]:
            assert "step_if_window" not in pt
            continue
        c, e = pt["predicted"]["compute"], pt["predicted"]["exchange"]
        assert pt["predicted"]["step"] == pytest.approx(
            c + fixed + e - parts.BEYOND * min(e, w * c), rel=1e-9)
        assert pt["step_if_window"] == pytest.approx(
            c + fixed + e - min(e, taken[pt["nodes"]] * c), rel=1e-9)
        assert pt["step_if_none"] == pytest.approx(c + fixed + e, rel=1e-9)
        assert "step_if_window" not in base
    # the report names the middle rule, with or without a window measured
    from hpcdl.report import forecast as words
    for pred in (res, plain):
        assert words._forecast_table(pred).meta["hidden"].startswith("half the calibration's")
    assert parts.window_at({3: 0.1, 4: 0.2}, 4, 4) is None          # nothing above 4 nodes
    assert parts.window_at({2: 0.5}, 8, 2) is None                  # only the calibration's
    assert parts.window_at({3: 0.1}, 8, 2) == 0.1                   # none alike: the largest


def test_the_loops_share_between_measured_node_counts_is_interpolated_and_beyond_them_held():
    # a study at node counts the loop file did not measure (6 nodes; 16 nodes)
    assert loop_share.share_at(LOOP, 4) == 0.165
    six = 0.165 + (math.log2(6) - 2) * (0.2 - 0.165)
    assert loop_share.share_at(LOOP, 6) == pytest.approx(six)
    assert loop_share.share_at(LOOP, 3) == pytest.approx(0.12 + (math.log2(3) - 1) * 0.045)
    assert loop_share.share_at(LOOP, 16) == 0.2 and loop_share.share_at({2: 0.1, 4: 0.2}, 1) == 0.1
    # a prediction takes the shares below its p and of at most 4 nodes, held beyond them
    assert loop_share.factor(LOOP, 6, 2) == pytest.approx(0.88 / 0.835)
    assert loop_share.factor(LOOP, 16, 2) == pytest.approx(0.88 / 0.835)
    assert loop_share.factor(LOOP, 4, 2) == 1.0
    assert loop_share.factor({2: 0.12, 3: 0.15, 8: 0.2}, 4, 2) == pytest.approx(0.88 / 0.85)
    # a calibration at a node count the file lacks takes nothing from it
    assert loop_share.factor({1: 0.1, 4: 0.2}, 8, 2) == 1.0
    # more peers do not make the loop take less: a share under the calibration's is noise
    assert loop_share.factor({2: 0.255, 7: 0.165, 8: 0.176}, 8, 2) == 1.0


def test_a_declared_loop_file_is_read_beside_the_bench_and_the_subset(tmp_path):
    from hpcdl.analysis.provenance import machine_setting
    recs = study(loop=LOOP)
    path = _loop_file(tmp_path / "loop.json", {"1": LOOP}, machine=machine_setting(recs[0]))
    declared = f"runs:nodes<=2;bench:results/t-{{nodes}}n.json;loop:{path}"
    got = Inputs.declared([{"declared": {"calibration": declared}}])
    assert (got.nodes_max, got.fit, got.exchange, got.loop) == (
        2, None, "results/t-{nodes}n.json", path)
    for r in recs:
        r["declared"]["calibration"] = f"runs:nodes<=2;loop:{path}"
    res = analysis.analyse(recs, "s")
    assert res.calibration.endswith(f"their compute after the share of a node Horovod's loop "
                                    f"takes in {path}")
    # the 8-node point takes the 4-node share (nothing measured at 8 enters its prediction)
    at8 = next(pt for pt in res.prediction["axes"][0]["points"] if pt["nodes"] == 8)
    assert at8["error"]["compute"] == pytest.approx((1 - 0.2) / (1 - 0.165) - 1, rel=1e-9)


# --- how far the allocation's nodes lie apart computing at once (a spread file) ----------------

SPREAD = {"2": [[0.99, 1.01]] * 2, "4": [[0.98, 1.0, 1.0, 1.03]] * 2,
          "8": [[0.97, 0.98, 0.99, 1.0, 1.0, 1.01, 1.04, 1.12], [0.98, 0.99, 1.0, 1.0, 1.0, 1.0,
                                                                 1.02, 1.08]]}


def _spread_file(path, spread=SPREAD, machine=MACHINE, coupled=None):
    import json
    made = {"machine": machine, "link_rate": "200mbit", "rounds": 2}
    if coupled is not None:
        made["coupled"] = coupled
    path.write_text(json.dumps({
        "schema": "hpcdl.host-spread/1", "time": "2026-11-27T07:00:00+00:00",
        "made_for": made, "spread": spread}))
    return str(path)


def test_the_slowest_rank_beyond_the_calibration_is_drawn_from_the_spread_file(tmp_path):
    recs = study(nodes=(1, 2, 4, 8, 16)) + study(backend="ps", nodes=(1, 2, 4, 8, 16))
    path = _spread_file(tmp_path / "spread.json")
    res = predict.of_records(recs, reading.row_key, 2, "weak", spread=HostSpread(path, MACHINE))
    plain = _run(recs)
    files = {int(k): [d for run in v for d in run] for k, v in SPREAD.items()}
    for ax, without in zip(res["axes"], plain["axes"]):
        # every axis's slowest rank (the parameter server's slowest worker too)
        # only what a small allocation measures (at most 4 nodes), below each point
        assert set(ax["model"]["host_spread"]) == {"4"}
        assert ax["model"]["host_spread"]["4"]["draws"] == 8
        for pt, base in zip(ax["points"], without["points"]):
            p = pt["nodes"]
            # the synthetic ranks compute alike: without the file the slowest is the center
            if p <= 2:       # calibration points are never drawn from the file
                assert pt["predicted"] == base["predicted"]
                continue
            k = 4 if p > 4 else 2       # the largest count below p of at most 4 nodes: its spread
            assert pt["predicted"]["compute"] == pytest.approx(
                base["predicted"]["compute"] * parts.expected_max(files[k], p), rel=1e-12)
            # an allreduce waits for the slowest rank; the parameter server takes the others'
            # pushes meanwhile, so its step pays the ranks' center (beyond the calibration half
            # the exchange the calibration's window hid still hides, and that grows with compute)
            grown = pt["predicted"]["compute"] - base["predicted"]["compute"]
            w, e = ax["model"]["window"], pt["predicted"]["exchange"]
            more_hidden = parts.BEYOND * (min(e, w * pt["predicted"]["compute"])
                                            - min(e, w * base["predicted"]["compute"]))
            paid = 0.0 if ax["backend"] == "ps" else grown - more_hidden
            assert pt["predicted"]["step"] == pytest.approx(base["predicted"]["step"] + paid,
                                                            rel=1e-12)
            assert (paid > 0) == (ax["backend"] != "ps")
    assert parts.expected_max(files[8], 16) > parts.expected_max(files[8], 8) > 1.03
    assert res["spread_bench"]["axes"] == [a["axis"] for a in res["axes"]]
    words = "\n".join(prediction._spread_words(res))
    assert "on 2 axis(es)" in words and "spread.json (2 round(s), links 200mbit" in words
    # each round's own factor is shown, so that a round far from the others is seen
    rounds = [parts.expected_max(run, 8) for run in SPREAD["8"]]
    assert res["spread_bench"]["rounds"]["8"] == pytest.approx(rounds)
    assert f"×{rounds[0]:.3f}/{rounds[1]:.3f} at 8 nodes" in words
    # a file without the flag was made by independent nodes (as every file was before it)
    assert "each node alone, nothing exchanged" in words and "one short training" not in words
    model = prediction._model_table(res).rows[0]
    assert any(c.startswith("×1.0") and c.endswith("at 4") for c in model) and 6 in [
        res["axes"][0]["model"]["rank_draws"]]
    assert "6" in model
    # the parameter server's records time rank 0's phases, no rank's probes: no spread of its own
    flat = {**res["axes"][1], "model": {**res["axes"][1]["model"], "rank_draws": 0}}
    flat_row = prediction._model_table({**res, "axes": [flat]}).rows[0]
    assert "none (no calibration run probed more than one rank)" in flat_row and "0" not in flat_row


def test_a_spread_files_crowd_lengthens_compute_beyond_the_calibration_by_its_ratio(tmp_path):
    """Nodes that share a host compute slower together: the file's crowd at p over the
    calibration's scales the held-out points' compute; a file made before it measured a crowd
    (no ``crowd``) changes nothing of it."""
    import json
    recs = study(nodes=(1, 2, 4, 8, 16))
    plain = predict.of_records(recs, reading.row_key, 2, "weak",
                               spread=HostSpread(_spread_file(tmp_path / "a.json"), MACHINE))
    path = _spread_file(tmp_path / "b.json")
    doc = json.loads(Path(path).read_text())
    doc["crowd"] = {"2": [1.01, 1.03, 1.02], "4": [1.05, 1.06], "8": [1.12, 1.10, 1.11]}
    Path(path).write_text(json.dumps(doc))
    res = predict.of_records(recs, reading.row_key, 2, "weak", spread=HostSpread(path, MACHINE))
    # the crowd below each point, of at most 4 nodes (the 8-node entry is never taken)
    factor = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.055 / 1.02, 16: 1.055 / 1.02}
    for pt, base in zip(res["axes"][0]["points"], plain["axes"][0]["points"]):
        assert pt["predicted"]["compute"] == pytest.approx(
            base["predicted"]["compute"] * factor[pt["nodes"]], rel=1e-12), pt["nodes"]
    assert res["axes"][0]["model"]["crowd"]["4"]["factor"] == pytest.approx(1.055 / 1.02)
    assert set(res["axes"][0]["model"]["crowd"]) == {"4"}
    assert "×1.034 at 4" in prediction._model_table(res).rows[0]
    assert "×1.110 at 8 nodes." in "\n".join(prediction._spread_words(res))
    assert prediction._model_table(plain).rows[0][6] == "-"
    # one node alone is 1; a multi-node calibration the file did not measure takes no crowd
    assert host_spread.crowd_factor({4: 1.1}, 8, 1) == pytest.approx(1.1)
    assert host_spread.crowd_factor({4: 1.1}, 8, 2) == 1.0
    assert host_spread.crowd_factor({2: 1.0, 4: 1.1}, 3, 2) == 1.0     # 2 the largest k < 3
    assert host_spread.crowd_factor({2: 1.0, 4: 1.1}, 4, 2) == 1.0     # nothing at p itself
    assert host_spread.crowd_factor({2: 1.0, 4: 1.1, 8: 1.3}, 16, 2) == pytest.approx(1.1)
    # more nodes beside it do not speed a node up: a crowd under the calibration's is noise
    assert host_spread.crowd_factor({2: 1.08, 8: 1.04}, 8, 2) == 1.0
    assert host_spread.crowd_factor({4: 0.95}, 8, 1) == 1.0


def test_a_coupled_spread_file_is_drawn_from_alike_and_the_report_says_it_was_one_training(
        tmp_path):
    recs = study(nodes=(1, 2, 4, 8))
    plain = predict.of_records(recs, reading.row_key, 2, "weak",
                            spread=HostSpread(_spread_file(tmp_path / "a.json"), MACHINE))
    res = predict.of_records(recs, reading.row_key, 2, "weak", spread=HostSpread(
        _spread_file(tmp_path / "b.json", coupled=True), MACHINE))
    assert res["spread_bench"]["coupled"] is True and plain["spread_bench"]["coupled"] is False
    assert [a["points"] for a in res["axes"]] == [a["points"] for a in plain["axes"]]
    words = "\n".join(prediction._spread_words(res))
    assert "one short training of k ranks, one per node, exchanging" in words
    assert "nothing exchanged" not in words


def test_a_spread_file_of_another_machine_is_not_taken_and_says_why(tmp_path):
    recs = study()
    path = _spread_file(tmp_path / "spread.json")
    res = predict.of_records(recs, reading.row_key, 2, "weak",
                          spread=HostSpread(path, MACHINE.replace("0.2", "0.5")))
    assert res["axes"][0]["model"]["host_spread"] is None
    assert "measured on" in res["spread_bench"]["misses"][0]
    assert res["axes"][0]["points"] == _run(recs)["axes"][0]["points"]
    ones = _spread_file(tmp_path / "one.json", {"1": [[1.0]]})
    only = HostSpread(ones, MACHINE)
    assert only.spreads() is None and only.misses() == [f"{ones}: no spread at more than one node"]
    assert "not a spread file" in HostSpread(_loop_file(tmp_path / "l.json", {"1": LOOP}),
                                             MACHINE).misses()[0]
    # below the smallest node count measured, nothing to draw from
    assert host_spread.at({4: [1.0]}, 3) is None and host_spread.at(None, 8) is None


def test_the_spread_files_nodes_are_centred_as_a_records_ranks_are():
    probes = [[1.0, 1.2, 1.1], [1.3, 1.5, 1.4], [0.9, 1.0, 1.1, 1.0]]
    rec = {"kind": "train", "status": "ok", "metrics": {
        "step_time": {"median": 2.0},
        "ranks": [{"compute_probes_s": [9.9] + c} for c in probes]}}
    assert host_spread.deviations(probes) == pytest.approx(measured.measured(rec).rank_dev)
    assert host_spread.deviations(probes) == pytest.approx([1.1 / 1.1, 1.4 / 1.1, 1.0 / 1.1])


def test_a_declared_spread_file_is_read_beside_the_loop_file(tmp_path):
    from hpcdl.analysis.provenance import machine_setting
    recs = study()
    path = _spread_file(tmp_path / "spread.json", machine=machine_setting(recs[0]))
    declared = f"runs:nodes<=2;loop:x.json;spread:{path}"
    got = Inputs.declared([{"declared": {"calibration": declared}}])
    assert (got.spread, got.loop) == (path, "x.json")
    for r in recs:
        r["declared"]["calibration"] = f"runs:nodes<=2;spread:{path}"
    res = analysis.analyse(recs, "s")
    assert res.calibration.endswith(f"their slowest rank from the nodes' spread in {path}")
    at8 = next(pt for pt in res.prediction["axes"][0]["points"] if pt["nodes"] == 8)
    # the 8 synthetic ranks compute alike: the slowest of 8 drawn from the 4-node spread
    assert at8["error"]["compute"] == pytest.approx(
        parts.expected_max([d for run in SPREAD["4"] for d in run], 8) - 1, rel=1e-9)


# --- a bias at one node count: the sign test ------------------------------------------------------

def test_the_sign_test_of_errors_leaning_one_way():
    assert baselines.sign_test([-0.1] * 6) == pytest.approx(2 / 64)
    assert baselines.sign_test([-0.1, -0.2, 0.1]) == 1.0
    assert baselines.sign_test([-0.1] * 4 + [0.1]) == pytest.approx(2 * 6 / 32)
    assert baselines.sign_test([0.0, 0.0]) == 1.0 and baselines.sign_test([]) == 1.0


def test_every_point_at_a_node_count_under_predicted_is_said_to_be_a_bias():
    # six axes whose compute grows with the loop's share beyond 2 nodes, predicted without it
    recs = (study(loop=LOOP, rates=(RATE, 500e6), compressions=("none", "fp16"))
            + study(loop=LOOP, backend="ps", rates=(RATE, 500e6)))
    res = _run(recs)
    by = {b["nodes"]: b for b in res["heldout"]["by_nodes"]}
    assert sorted(by) == [4, 8]
    for p in (4, 8):
        assert by[p]["points"] == 6 and by[p]["under"] == 6 and by[p]["biased"]
        assert by[p]["sign_p"] == pytest.approx(2 / 64)
        assert by[p]["compute"] == pytest.approx((1 - LOOP[p]) / (1 - LOOP[2]) - 1, rel=1e-9)
    words = "\n".join(prediction._bias_words(res["heldout"]["by_nodes"]))
    assert "**Bias at 8 nodes**: 6 of 6 held-out steps are under-predicted" in words
    assert "optimistic in efficiency" in words and "p = 0.031" in words
    # an unbiased study: no node count flagged, no words
    plain = _run(study(rates=(RATE, 500e6), compressions=("none", "fp16")))
    assert not any(b["biased"] for b in plain["heldout"]["by_nodes"])
    assert prediction._bias_words(plain["heldout"]["by_nodes"]) == []


def test_beyond_the_calibration_the_band_spans_the_exchange_hidden_as_there_to_none():
    """How much of the exchange hides beyond the calibrated node count is not known (box points
    beyond it hid from none to more than at the calibration): the point is predicted with half of
    the calibration's hidden, the band's lower edge as if all of it hid, its upper edge none."""
    rng = random.Random(2)
    recs = study(repeats=9, window=0.3)
    for r in recs:
        r["metrics"]["step_time"]["median"] *= 1 + rng.gauss(0, 0.03)
    res = _run(recs)
    q = res["band_halfwidth"]
    (ax,) = res["axes"]
    assert ax["model"]["window"] > 0.2
    for pt in ax["points"]:
        step = pt["predicted"]["step"]
        c, e = pt["predicted"]["compute"], pt["predicted"]["exchange"]
        hidden = min(e, ax["model"]["window"] * c)
        if pt["nodes"] <= 2:                       # the calibration: hidden in the step itself
            assert pt["step_if_hidden"] == pytest.approx(step)
            assert pt["band"] == pytest.approx([step / (1 + q), step * (1 + q)])
        else:
            none = pt["step_if_none"]
            assert hidden > 0.05 * none
            assert step == pytest.approx(none - hidden / 2)
            assert pt["step_if_hidden"] == pytest.approx(none - hidden)
            w = q * math.sqrt(1 + math.log2(pt["nodes"] / 2))     # widened with the distance
            # as a ratio on both sides: a lower edge is never 0 s, however wide the band
            assert pt["band"] == pytest.approx([(none - hidden) / (1 + w), none * (1 + w)])
    # the parameter server hides nothing: its band stays about its step
    ps = _run(study(backend="ps", window=0.3, repeats=9))
    for pt in ps["axes"][0]["points"]:
        assert pt["step_if_hidden"] == pytest.approx(pt["predicted"]["step"])


# --- the forecast -----------------------------------------------------------------------------

def test_an_algorithms_messages_carry_its_link_bytes_and_count_its_latency_terms():
    """exchange_time over step_spans(): a ring's 2(p-1) messages of n/p, Rabenseifner's halving
    2 log2 p of shrinking size, each at α + bytes·β; the bytes are link_bytes' in every case."""
    n = 1e6
    for algo in ("ring", "rabenseifner", "recursive doubling", "linear", "allgather"):
        for p in (2, 3, 6, 16, 24, 1024):
            assert sum(m * c for m, c, _ in costmodel.step_spans(algo, n, p)) == pytest.approx(
                costmodel.link_bytes(algo, n, p))
    alpha, beta = 1e-5, 1e-9
    t = lambda algo, p: allreduce.exchange_time(algo, n, p, lambda m: alpha + m * beta)  # noqa
    assert t("ring", 64) == pytest.approx(126 * alpha + 2 * 63 / 64 * n * beta)
    assert t("rabenseifner", 64) == pytest.approx(12 * alpha + 2 * 63 / 64 * n * beta)
    assert t("recursive doubling", 64) == pytest.approx(6 * alpha + 6 * n * beta)
    assert allreduce.exchange_time("ring", n, 1, lambda m: 1.0) == 0.0


def test_each_message_knows_how_far_apart_its_ranks_are():
    """step_spans: each algorithm's messages (their count is its latency term, their bytes its
    link bytes), each with the distance of its farthest pair: a ring's every step waits on its
    wrap-around pair, halving and doubling go 1, 2, 4, ... apart, the fold pairs neighbours."""
    n = 1e6
    for p in (2, 3, 6, 16, 24, 1024):
        k = p.bit_length() - 1                   # log2 of the largest power of two <= p
        fold = (1 << k) < p
        log = math.ceil(math.log2(p))
        for algo, count, sent in (("ring", 2 * (p - 1), 2 * (p - 1) / p * n),
                                  ("rabenseifner", 2 * k + 3 * fold, None),
                                  ("recursive doubling", k + 2 * fold, None),
                                  ("linear", 2 * (p - 1), None), ("allgather", p - 1, None),
                                  ("nonoverlapping", 2 * log, 2 * log * n)):
            spans = costmodel.step_spans(algo, n, p)
            assert sum(c for _, c, _ in spans) == count, (algo, p)
            assert sum(m * c for m, c, _ in spans) == pytest.approx(
                sent if sent is not None else costmodel.link_bytes(algo, n, p)), (algo, p)
            assert all(1 <= s < p for _, _, s in spans)
    assert costmodel.step_spans("ring", n, 64) == [(n / 64, 126, 63)]
    assert [s for _, _, s in costmodel.step_spans("rabenseifner", n, 64)] == [1, 2, 4, 8, 16, 32]
    assert costmodel.step_spans("recursive doubling", n, 6)[-1] == (n, 2, 1)


def test_on_a_tree_a_message_whose_pair_spans_a_leaf_costs_the_far_price():
    """exchange_time with a leaf size: a ring within one leaf pays the near price every step;
    past a leaf every step waits on the wrap-around pair across the tree; Rabenseifner's halving
    pays far only for the rounds whose partners sit a leaf or more apart; the fixed cost comes
    once a call."""
    n, near, far = 1e6, (lambda m: 1e-6), (lambda m: 3e-6)
    t = lambda algo, p: allreduce.exchange_time(algo, n, p, near, far, 32, fixed=5e-6)  # noqa
    assert t("ring", 16) == pytest.approx(5e-6 + 30 * 1e-6)
    assert t("ring", 64) == pytest.approx(5e-6 + 126 * 3e-6)
    # 64 ranks: partners 1, 2, 4, 8, 16 apart stay in a leaf, 32 apart cross (2 messages)
    assert t("rabenseifner", 64) == pytest.approx(5e-6 + 10 * 1e-6 + 2 * 3e-6)
    # without a leaf size the far price is never asked for
    assert allreduce.exchange_time("ring", n, 64, near, far) == pytest.approx(126 * 1e-6)

def test_the_forecast_is_the_held_out_model_carried_to_the_planned_node_counts():
    res = predict.of_records(study(), reading.row_key, 2, "weak", forecast=(8, 64, 256))
    (ax,) = res["axes"]
    (f,) = res["forecast"]
    here = {r["nodes"]: r for r in f["here"]}
    # at a node count the study measured, the forecast is the held-out prediction itself
    eight = next(pt for pt in ax["points"] if pt["nodes"] == 8)
    assert here[8]["step_s"] == pytest.approx(eight["predicted"]["step"])
    assert here[8]["compute_s"] == pytest.approx(eight["predicted"]["compute"])
    assert here[8]["exchange_s"] == pytest.approx(eight["predicted"]["exchange"])
    # and at 64 it follows the known parts: compute, the library's algorithm, and half the
    # exchange the calibration hid
    center, ex, step = truth(64)
    assert here[64]["algorithm"] == "rabenseifner"
    assert here[64]["exchange_s"] == pytest.approx(ex)
    assert step < center + 2e-3 + ex
    assert here[64]["step_s"] == pytest.approx(step)
    t1 = truth(1)[2]
    assert here[64]["efficiency"] == pytest.approx(t1 / here[64]["step_s"])
    # the band widens with the distance from the calibration (steps with noise: a band > 0)
    rng = random.Random(3)
    noisy = study(repeats=9)
    for r in noisy:
        r["metrics"]["step_time"]["median"] *= 1 + rng.gauss(0, 0.03)
    res = predict.of_records(noisy, reading.row_key, 2, "weak", forecast=(8, 64, 256))
    (f,) = res["forecast"]
    window = res["axes"][0]["model"]["window"]
    # the upper edge above the step with none hidden, the point half the hidden below that
    none = [r["step_s"] + parts.BEYOND * min(r["exchange_s"], window * r["compute_s"])
            for r in f["here"]]
    widths = [r["band_s"][1] / n - 1 for r, n in zip(f["here"], none)]
    assert widths == sorted(widths) and widths[0] < widths[-1]
    assert widths[-1] == pytest.approx(res["band_halfwidth"] * math.sqrt(1 + math.log2(128)))


def test_a_named_network_whose_exchange_stays_hidden_in_the_compute_is_left_out_with_why():
    """This study's 1 MB of gradients on InfiniBand costs far under 1% of a 0.4 s step: the
    network columns would repeat the compute's ratio, so they are left out and named."""
    res = predict.of_records(study(), reading.row_key, 2, "weak", forecast=(16,))
    (f,) = res["forecast"]
    assert "InfiniBand EDR" in f["left_out"] and len(f["left_out"]) == 4
    # one column stands for them all: the slowest's, whose exchange still stays under 1%
    (any_net,) = f["networks"]
    assert any_net["network"] == "any" and any_net["label"].startswith("25 GbE RoCE or faster")
    assert all(r["exchange_s"] < 0.01 * r["step_s"] for r in any_net["rows"])
    # a gradient a thousand times as large shows on every preset, exchange at SMPI's prices
    big = study(per_sample=1e-6)
    for r in big:
        r["gradient_bytes"] = 1000 * MB
    res = predict.of_records(big, reading.row_key, 2, "weak", forecast=(16,))
    (f,) = res["forecast"]
    nets = {n["network"]: n for n in f["networks"]}
    assert "ib-edr" in nets
    row = nets["ib-edr"]["rows"][0]
    assert f["gradient_bytes"] > 100 * MB
    assert row["exchange_s"] == pytest.approx(networks.exchange(
        "ib-edr", row["algorithm"], f["gradient_bytes"], 16))
    ib = costmodel.PRESETS["ib-edr"]      # SMPI's protocol costs: above the bare link's bytes
    assert row["exchange_s"] > allreduce.exchange_time(
        row["algorithm"], f["gradient_bytes"], 16, lambda m: ib.alpha + m * ib.beta)
    assert row["compute_s"] == pytest.approx(f["here"][0]["compute_s"])    # as measured


def test_two_repeats_get_a_band_and_its_basis_is_stated():
    res = _run(study(repeats=2))
    assert res["band_residuals"] == 2
    assert res["band_halfwidth"] is not None and res["band_basis"].startswith("normal from 2")
    q, basis = baselines.band_quantile([0.01, 0.03], 0.9)
    assert q == pytest.approx(2.920 * math.sqrt((0.01 ** 2 + 0.03 ** 2) / 2) * math.sqrt(1.5))
    assert baselines.band_quantile([], 0.9)[0] is None


def test_a_report_carries_one_prediction_of_each_point(tmp_path):
    """Where the part-by-part model predicts, the whole-step model's table, its α-β table and
    extrapolation are not made: no point has two predictions."""
    from hpcdl import records as _records, report
    path = tmp_path / "s" / "runs.jsonl"
    path.parent.mkdir()
    for r in study(rates=(RATE, 500e6)):
        _records.append(path, r)
    written = report.write_report(path.parent, out_dir=tmp_path / "out", plots=False)
    names = {p.name for p in written["files"]}
    assert "forecast.csv" in names and "prediction-vs-measured.csv" in names
    assert "model-vs-measured.csv" not in names and "model-extrapolation.csv" not in names
    text = (tmp_path / "out" / "report.md").read_text()
    assert "MODEL beside each measurement" not in text and "α (µs)" not in text
    assert "### Forecast (MODEL)" in text


def test_a_study_names_its_forecast_and_the_report_command_overrides_it(tmp_path):
    """[model] forecast = [...] travels in every record's declaration; --forecast on the
    report's command line wins and is written into the command that heads the report."""
    from hpcdl import records as _records, report
    from hpcdl.study import load as _load
    path = tmp_path / "s" / "runs.jsonl"
    path.parent.mkdir()
    for r in study():
        r["declared"]["calibration"] = "runs:nodes<=2;forecast:12,48"
        _records.append(path, r)
    res = analysis.analyse(_records.read(path), "s")
    assert [r["nodes"] for r in res.prediction["forecast"][0]["here"]] == [12, 48]
    written = report.write_report(path.parent, out_dir=tmp_path / "o", plots=False,
                                  given=report.Inputs(forecast=(100,)))
    head = written["report"].read_text().splitlines()[0]
    assert "--forecast 100" in head
    assert report.rendered_with(tmp_path / "o")["given"].forecast == (100,)
    toml = tmp_path / "st.toml"
    toml.write_text('[study]\nname = "x"\nscaling = "weak"\n[workload]\nname = "expmlp"\nbatch_size = 8\n'
                    '[layout]\nranks = [1, 2]\n[model]\nforecast = [64, 16]\n')
    st = _load(toml)
    assert st.forecast == [16, 64]
    assert st.declared["model"]["forecast"] == [16, 64]
    for bad, why in (("[1]", "node counts of 2 or more"), ("[64, 16, 64]", "each node count once"),
                     ("[]", "leave the key out")):
        toml.write_text(re.sub(r"forecast = \[.*\]", f"forecast = {bad}", toml.read_text()))
        with pytest.raises(Exception, match=f"model.forecast: .*{why}"):
            _load(toml)



def test_the_named_networks_are_the_studys_or_the_users_and_the_command_keeps_them(tmp_path):
    """[model] networks picks the named networks the forecast is drawn on; --networks (here
    given to write_report) wins, 'none' shows none, and the command that heads the report keeps
    it; an unknown name is refused."""
    from hpcdl import records as _records, report
    from hpcdl.study import load as _load
    path = tmp_path / "s" / "runs.jsonl"
    path.parent.mkdir()
    for r in study():
        r["declared"] = {**r["declared"], "model": {"nodes_max": 2, "networks": ["ib-edr"]}}
        _records.append(path, r)
    shown = {n["network"] for f in analysis.analyse(_records.read(path), "s").prediction[
        "forecast"] for n in f["networks"]}
    assert shown <= {"ib-edr", "any"} and shown
    written = report.write_report(path.parent, out_dir=tmp_path / "o", plots=False,
                                  given=report.Inputs(networks=()))
    assert "--networks none" in written["report"].read_text().splitlines()[0]
    assert report.rendered_with(tmp_path / "o")["given"].networks == ()
    doc = json.loads(written["json"].read_text())
    assert all(f["networks"] == [] for f in doc["prediction"]["forecast"])
    toml = tmp_path / "st.toml"
    toml.write_text('[study]\nname = "x"\nscaling = "weak"\n[workload]\nname = "expmlp"\n'
                    'batch_size = 8\n[layout]\nranks = [1, 2]\n[model]\nnetworks = ["roce-25g"]\n')
    assert _load(toml).declared["model"] == {"networks": ["roce-25g"]}
    toml.write_text(toml.read_text().replace("roce-25g", "myrinet"))
    with pytest.raises(Exception, match="model.networks: 'myrinet' is not allowed"):
        _load(toml)


def test_the_allreduce_the_model_predicts_fastest_is_advised_where_the_library_ran_another():
    """Open MPI's Rabenseifner at 5 and 8 nodes sends both ways over one connection (the duplex
    share) and folds the extra rank in at 5: the ring is advised with its gain, and the pin
    that gets it; an axis that already ran the ring gets no such advice."""
    res = _run(study(nodes=(1, 2, 5)))
    (fix,) = [r for r in res["remedies"] if r["remedy"].startswith("allreduce ")]
    assert fix["remedy"].startswith("allreduce ring (Open MPI's coll_tuned_allreduce_algorithm 4")
    c, _, _ = truth(5)
    both, one = costmodel.link_parts("ring", MB, 5)
    ring = (both * 1.9 + one) / (RATE / 8 * allreduce.FRAMING)
    hidden = parts.BEYOND * min(ring, 0.1 * c)        # half the calibration's window's share
    assert fix["model_efficiency"] == pytest.approx(truth(1)[2] / (c + 2e-3 + ring - hidden))
    assert fix["model_gain"] > 1.3 and fix["measured_gain"] is None
    pinned = _run(study(nodes=(1, 2, 5), pin=4))
    assert not [r for r in pinned["remedies"] if r["remedy"].startswith("allreduce ")]


def test_the_answer_says_what_the_best_exchange_gives_and_the_command_that_runs_it(tmp_path):
    """A study that ran the MPI library's allreduce where the model gives another more: the
    answer block says so with both efficiencies and the one command that tunes and runs it (in
    the remedy's line where that exchange is the most useful remedy; a line of its own where
    another gains more, as box-fc-cnn-450mbit's fp16 does: tests/unit/test_report_summary.py)."""
    from hpcdl import records as _records, report
    path = tmp_path / "results" / "s" / "runs.jsonl"
    path.parent.mkdir(parents=True)
    for r in study(nodes=(1, 2, 5)):
        r["declared"] = {**r["declared"], "study_file": "jobs/s.toml"}
        _records.append(path, r)
    written = report.write_report(path.parent, plots=False)
    head = "\n".join(written["report"].read_text().splitlines()[:20])
    remedies = json.loads(written["json"].read_text())["prediction"]["remedies"]
    fix = next(r for r in remedies if r["remedy"].startswith("allreduce "))
    assert max(remedies, key=lambda r: r["model_gain"]) == fix
    # the most useful remedy is that exchange: one line says it, with the command that gets it
    assert (f"- Most useful remedy (MODEL): {fix['remedy']}: efficiency "
            f"{fix['model_efficiency_as_run']:.0%} → {fix['model_efficiency']:.0%} at 5 "
            "nodes. The points ran the MPI library's allreduce; get it: `hpcdl study "
            "submit jobs/s.toml --tune --results-root ") in head
    assert "best exchange" not in head


def test_a_rank_with_peers_is_never_forecast_faster_than_alone():
    """Where the 2-node compute reads shorter than the 1-node probe (k < 0), the compute per
    sample is the 2-node one and k = 0: the held-out points are predicted as before, and no
    forecast efficiency passes 100% (the model's one node is no longer slower than its larger
    points)."""
    res = predict.of_records(study(k=-0.1), reading.row_key, 2, "weak", forecast=(16, 64))
    m = res["axes"][0]["model"]
    assert m["k"] == 0.0 and m["per_sample_s"] == pytest.approx(3.2e-3 * 0.9)
    assert m["fixed_s"] == pytest.approx(2e-3)            # what the 1-node step left beside it
    held = [pt for pt in res["axes"][0]["points"] if not pt["fitted"]]
    assert held and all(pt["error"]["step"] == pytest.approx(0, abs=1e-9) for pt in held)
    effs = [r["efficiency"] for f in res["forecast"]
            for rows in [f["here"]] + [n["rows"] for n in f["networks"]] for r in rows]
    assert effs and max(effs) <= 1.0


def test_a_one_host_study_forecasts_the_compute_alone_and_says_why_it_is_above_measured():
    """Ranks sharing one host's memory say nothing of a network: no named network and no
    allocation column, the compute alone, labelled; every row above the measured efficiency
    carries its reason."""
    recs = study(nodes=(1, 2, 4))
    for r in recs:
        p = r["layout"]["size"]
        r["layout"] = {"size": p, "nodes": 1, "ranks_per_node": p}
        for rank in r["metrics"]["ranks"]:
            rank["host"] = "ws"
    r0 = analysis.analyse(recs, "s")
    (f,) = r0.prediction["forecast"]
    assert r0.prediction["one_node"] and f["here"] == []
    assert [n["network"] for n in f["networks"]] == ["compute"]
    assert all(row["exchange_s"] == 0.0 for row in f["networks"][0]["rows"])
    best = max(r.efficiency for r in r0.rows if r.ranks > 1)
    above = [row for row in f["networks"][0]["rows"] if row["efficiency"] > best]
    assert above and all(row["above_measured"].startswith(
        f"above the measured {best:.0%} (") for row in above)
    assert all("no exchange is forecast, the ranks shared one host" in row["above_measured"]
               for row in above)
