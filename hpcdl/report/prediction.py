"""The words and tables of the report's model sections (:mod:`.sections` registers them): the
part-by-part prediction of the held-out points beside its baselines and band, what each input
measured on the allocation was worth, the forecast at the planned node counts and on named
networks, the remedies, and the published comparison."""
from __future__ import annotations

from typing import Callable, List, Optional

from .table import _f, _ms, Table
from .. import analysis, costmodel
from ..model import forecast as _forecast_rules, parts as _parts_rules


def _beyond() -> str:
    """How much of the calibration's hidden exchange a point beyond it takes
    (:data:`hpcdl.model.parts.BEYOND`), as the sentences say it: 'half the ...'."""
    share = _parts_rules.BEYOND
    return {0.5: "half", 1.0: "all of", 0.0: "none of"}.get(share, f"{share:.0%} of")


def _no_effect() -> str:
    """The share of every step under which a network shows no effect
    (:data:`hpcdl.model.forecast.NETWORK_EFFECT`), as a percentage."""
    return f"{_forecast_rules.NETWORK_EFFECT * 100:.0f}%"


def _model_markdown(res, by_name) -> List[str]:
    head = (["## Communication model", "",
             "One model: the part-by-part model of the next section, calibrated on this study's "
             "runs" + (" and checked on the points it was not calibrated on" if
                       res.prediction.get("held_out") else "")
             + ", then carried to the forecast."] if res.prediction else
            ["## Communication model", "", f"None: {res.why_no_model}."])
    return head + ["", "Horovod's published run, with the same exchange formula:", ""] + \
        _published_markdown(by_name["model-vs-published"])[2:]


def _prediction_table(pred) -> Table:
    t = Table("prediction-vs-measured", "Prediction beside measurement, part by part",
              ["axis", "nodes", "point", "allreduce", "compute meas (ms)", "pred", "err",
               "exchange meas (ms)", "pred", "err", "exchange from", "step meas (ms)", "pred",
               "err", f"{pred['nominal'] * 100:.0f}% band (ms)", "in band", "naive err",
               "one-β err"],
              meta={"calibration": f"runs with at most {pred['nodes_max']} node(s)"
                                   + "".join(sorted({f"; exchange from the {src}" for src in (
                                       a["model"]["exchange_source"] for a in pred["axes"])
                                       if src.startswith("bench fit")})),
                    "compute": "the slowest rank's median probe, first probe left out",
                    "exchange": "the slowest rank's median exchange timed alone",
                    "band": f"conformal, {pred['nominal'] * 100:.0f}% nominal, "
                            f"±{_f(pred['band_halfwidth'], pct=True)}; beyond the calibration "
                            "its edges as if the exchange hid as at the calibration and as if "
                            "none hid",
                    "naive": "efficiency stays at the largest calibrated point's",
                    "one_beta": "1-node step + one beta (alpha = 0) from the largest calibrated "
                                "point's excess"})
    for ax in pred["axes"]:
        for pt in ax["points"]:
            m, p, e = pt["measured"], pt["predicted"], pt["error"]
            band = pt.get("band")
            t.add([ax["axis"], pt["nodes"], "fitted" if pt["fitted"] else "PREDICTED",
                   pt["algorithm"], _ms(m["compute"]), _ms(p["compute"]), _f(e["compute"], pct=True),
                   _ms(m["exchange"]), _ms(p["exchange"]), _f(e["exchange"], pct=True),
                   "tune" if pt.get("exchange_from") else "model",
                   _ms(m["step"]), _ms(p["step"]), _f(e["step"], pct=True),
                   f"{band[0] * 1e3:.4g}–{band[1] * 1e3:.4g}" if band else "-",
                   {True: "yes", False: "**no**"}.get(pt.get("inside"), "-"),
                   _f(pt["naive_error"], pct=True), _f(pt["one_parameter_error"], pct=True)],
                  {"axis": ax["axis"], "nodes": pt["nodes"], "fitted": pt["fitted"],
                   "algorithm": pt["algorithm"], "runs": pt["runs"],
                   **{f"measured_{k}_s": m[k] for k in m}, **{f"model_{k}_s": p[k] for k in p},
                   **{f"{k}_error": e[k] for k in e}, "band_s": band, "inside": pt.get("inside"),
                   "exchange_from": pt.get("exchange_from"),
                   "link_model_exchange_s": pt.get("model_exchange"),
                   "link_model_exchange_error": pt.get("model_exchange_error"),
                   "naive_step_s": pt["naive"], "naive_error": pt["naive_error"],
                   "one_parameter_step_s": pt["one_parameter"],
                   "one_parameter_error": pt["one_parameter_error"]})
    return t


def _cross_rate_table(pred) -> Table:
    t = Table("prediction-across-rates", "Calibrated at one link rate, predicting another",
              ["calibrated on", "predicts", "nodes", "step meas (ms)", "pred", "err",
               "exchange meas (ms)", "pred", "err"],
              meta={"given": "only the other link rate"})
    for c in pred["cross_rate"]:
        t.add([c["calibrated"], c["predicted"], c["nodes"], _ms(c["measured_step"]),
               _ms(c["model_step"]), _f(c["error"], pct=True), _ms(c["measured_exchange"]),
               _ms(c["model_exchange"]), _f(c["exchange_error"], pct=True)], dict(c))
    return t


def _remedy_table(pred) -> Table:
    t = Table("prediction-remedies", "Remedies: the gain predicted, and measured where run",
              ["axis", "nodes", "remedy", "MODEL E as run", "MODEL E", "MODEL gain",
               "measured E as run", "measured E", "measured gain", "gain error"],
              meta={"efficiency": "1-node step / p-node step (weak scaling)"})
    for r in pred["remedies"]:
        t.add([r["axis"], r["nodes"], r["remedy"], _f(r["model_efficiency_as_run"], pct=True),
               _f(r["model_efficiency"], pct=True),
               "-" if r["model_gain"] is None else f"{r['model_gain']:.3f}×",
               _f(r["measured_efficiency_as_run"], pct=True), _f(r["measured_efficiency"], pct=True),
               "-" if r["measured_gain"] is None else f"{r['measured_gain']:.3f}×",
               _f(r["gain_error"], pct=True)], dict(r))
    return t


def _noise_words(noise) -> str:
    """What the repeats say about the measurement's own error."""
    if not noise or not noise["points"]:
        return ("One repeat per point: the measurement's own error (repeats of one point apart) "
                "is not known, so no error above can be told from it.")
    return ("The measurement's own error: the repeats of one point lie "
            f"{_f(noise['median'], pct=True)} apart (slowest − fastest step over their median; "
            f"median of {noise['points']} points, at most {_f(noise['max'], pct=True)}); a "
            "prediction is not checked closer than about half that.")


def _floor_words(pred, mae, half) -> str:
    """Whether half the one-β baseline's error is closer than these repeats can check: below the
    error a model without bias would show (:mod:`hpcdl.model.floor`), or, without folds of
    repeats to refit on, within half the repeats' own spread."""
    if half is None or mae is None or mae <= half:
        return ""
    low, noise = pred.get("floor") or {}, pred.get("noise") or {}
    if low:
        folds = ", ".join(_f(x, pct=True) for x in low["mae_model_by_fold"])
        ones = ", ".join(_f(x, pct=True) for x in low["mae_one_parameter_by_fold"])
        words = (f" Calibrated on each of {low['folds']} folds of repeats alone, the model's "
                 f"mean error was {folds} against the one-β baseline's {ones}. Its prediction "
                 f"of a held-out point varied by ±{_f(low['model_moves'], pct=True)} (standard "
                 f"deviation) between folds, the one-β baseline's by "
                 f"±{_f(low['one_parameter_moves'], pct=True)}, a held-out point's repeats by "
                 f"±{_f(low['measured_moves'], pct=True)}. A "
                 "model without any bias, calibrated on all of them, would show a mean error of "
                 f"about {_f(low['floor'], pct=True)} here (`hpcdl.model.floor`)")
        if half <= low["floor"]:
            return words + (f"; half the one-β baseline's error ({_f(half, pct=True)}) is below "
                            "that: these repeats cannot show a model that close (more repeats "
                            "lower it as 1/√n).")
        return words + "."
    if noise.get("median") is not None and half <= noise["median"] / 2:
        return (f" Half the one-β baseline's error ({_f(half, pct=True)}) is within half "
                "the repeats' own spread, about what a predictor that knew every point "
                "exactly would miss by: these repeats cannot show a model that close.")
    return ""


def _bench_words(pred) -> List[str]:
    """What the held-out points' exchange from ``hpcdl tune``'s files was, and what the link
    model alone would have said."""
    bench = pred.get("exchange_bench")
    if not bench:
        return []
    held = [pt for ax in pred["axes"] for pt in ax["points"] if pt.get("exchange_from")]
    out = [f"Exchange of the held-out points (\"tune\" above): the median `hpcdl tune` measured "
           f"for the setting and compression the point ran, from `{bench['pattern']}` at the "
           "point's node count (the workload's own gradient tensors through the path a training "
           "step calls; a launch of the ranks and seconds of timing, not a training run), for "
           f"{len(held)} of the held-out points; the others keep the link model's."]
    errs = [abs(pt["model_exchange_error"]) for pt in held
            if pt.get("model_exchange_error") is not None]
    if errs:
        out[0] += (f" The link model alone would have put the exchange of those points within "
                   f"15% at {sum(e <= 0.15 for e in errs)} of {len(errs)} (mean absolute error "
                   f"{_f(sum(errs) / len(errs), pct=True)}).")
    out += [f"- {src}" for src in sorted({pt["exchange_from"] for pt in held})]
    out += [f"- not taken: {why}" for why in bench.get("misses") or []]
    return out + [""]


def _file_words(entry: Optional[dict], words: Callable[[dict], str]) -> List[str]:
    """A short benchmark's file the prediction took (``entry``, what it gave): what it did, in
    ``words(entry)``, and why it was not taken where it was not."""
    if not entry:
        return []
    return [words(entry)] + [f"- not taken: {why}" for why in entry.get("misses") or []] + [""]


def _loop_words(pred) -> List[str]:
    """Where the held-out Horovod points' compute followed a loop file's shares."""
    return _file_words(pred.get("loop_bench"), lambda loop: (
        f"Compute beyond the calibration, on {len(loop['axes'])} Horovod axis(es): also × "
        "(1 − s(calibrated p)) / (1 − s(p)), s the median rank's share of its CPU that "
        "Horovod's loop took from its compute at p nodes and the axis's cycle time, measured "
        f"by a short benchmark on the allocation: {loop['source']}; between the node counts it "
        "measured, s is interpolated in log p, beyond the largest held at its value."))


def _spread_words(pred) -> List[str]:
    """Where the held-out points' slowest rank was drawn from a spread file."""
    return _file_words(pred.get("spread_bench"), lambda spread: (
        f"The slowest rank beyond the calibration, on {len(spread['axes'])} axis(es): the "
        "expected maximum over p ranks drawn from how far the allocation's nodes lay apart "
        + ("computing the workload in one short training of k ranks, one per node, exchanging "
           "as the study's runs do" if spread.get("coupled") else
           "computing the workload at once (each node alone, nothing exchanged)")
        + ", measured by a short benchmark on it at the largest node count k <= p: "
        f"{spread['source']}. The model pools the rounds; each round alone would give "
        + "; ".join(f"×{'/'.join(f'{f:.3f}' for f in fs)} at {k} nodes"
                    for k, fs in sorted((spread.get("rounds") or {}).items(),
                                        key=lambda kv: int(kv[0])))
        + "." + (" Compute beyond the calibration is also × crowd(p) / crowd(calibrated p) "
                 "(at least 1), "
                 "crowd how much longer the allocation's first node computed while k nodes "
                 "computed at once than alone (same benchmark, same rounds; at the largest "
                 "k <= p, one node alone 1): " + "; ".join(
                     f"×{v:.3f} at {k} nodes" for k, v in sorted(
                         (spread.get("crowd") or {}).items(), key=lambda kv: int(kv[0])))
                 + "." if spread.get("crowd") else "")))


def _axis_words(ax) -> str:
    """One axis's calibrated parts, in words."""
    m = ax["model"]
    loop = sorted((int(n), v) for n, v in (m.get("loop_shares") or {}).items())
    return (f"- **{ax['axis']}**: compute {m['per_sample_s'] * 1e6:.1f} µs/sample at one "
            f"rank, ×{1 + m['k']:.2f} beyond one rank"
            + (", the loop's share " + "/".join(f"{v * 100:.0f}" for _, v in loop) + "% at "
               + "/".join(str(n) for n, _ in loop) + " nodes" if loop else "")
            + (f"; spread from {m['rank_draws']} rank medians" if m["rank_draws"] else
               "; no spread of its own (no calibration run with more than one rank's probes)")
            + "".join(f", at {n} nodes ×{v['max_factor']:.3f} from {v['draws']} node medians "
                      f"at {n} nodes" for n, v in (m.get("host_spread") or {}).items())
            + ("; crowd " + ", ".join(f"×{v['factor']:.3f} at {n} nodes"
                                      for n, v in m["crowd"].items()) if m.get("crowd") else "")
            + "; "
            f"fixed {m['fixed_s'] * 1e3:.1f} ms; window {m['window'] * 100:.0f}%; "
            + (f"exchange from the {m['exchange_source']}"
               if m["exchange_source"].startswith("bench fit") else
               "exchange: link bytes at the link's payload rate, "
               + (f"+{m['duplex'] * 100:.0f}% of the other direction's where both "
                  "ways share a connection" if m["duplex"] else
                  f"+{m['per_exchange_s'] * 1e3:.1f} ms per exchange")
               if m["rated"] else
               f"{m['seconds_per_link_byte'] * 1e9:.3f} ns per link byte"
               if m["seconds_per_link_byte"] is not None else "exchange not measured")
            + ".")


def _prediction_markdown(pred, by_name) -> List[str]:
    h = pred["heldout"]
    lines = (["## Prediction of the points not calibrated on (MODEL, checked against "
              "measurement)", "", f"Calibrated on the runs with at most {pred['nodes_max']} "
              "node(s) of each axis (`hpcdl.model.predict`), every larger point predicted part "
              "by part."] if pred.get("held_out", True) else
             ["## The model, calibrated on every point (MODEL; no point held out)", "",
              "The study declares no calibration subset (`[model] calibrate = {nodes_max = N}` "
              "holds the larger points out to check the model on), so every point calibrates "
              "the part-by-part model (`hpcdl.model.predict`) and none checks it; the band "
              "comes from leaving repeats out."])
    lines = [lines[0], lines[1], lines[2] + " Compute: the "
             "1-node compute per sample, times 1 + k beyond one rank, k measured at the largest "
             "calibrated point (the exchange's background work, Horovod's cycle or MPI's "
             "progress, takes a share of a node's CPU once a rank has peers), times the expected "
             "maximum over p ranks of the ranks' median compute spread measured at the "
             "calibration points (the step waits for its slowest rank, and pays that rank's "
             "median compute). Exchange: the bytes on each link of the allreduce "
             "algorithm the MPI library runs at that rank count and size (named per row; Open "
             "MPI's fixed decision unless the run pinned one) at the link's payload rate (where "
             "the machine sets it; elsewhere at the time per byte the calibration measured), plus "
             "what the "
             "calibration runs spent beyond that: where the algorithm sends and receives over "
             "one connection at once (recursive halving and doubling, a ring of two), a share of "
             "the other direction's bytes (on a shaped link each direction's data queues with "
             "the other's acknowledgements), else a fixed time per exchange. Step: compute + "
             "fixed + exchange − the part hidden behind the measured window of compute up to the "
             f"calibrated node count, {_beyond()} that beyond it (docs/decisions.md says why), and none "
             "for the parameter server, whose step pays the ranks' center compute rather than "
             "the slowest's: it takes the other workers' pushes while the slowest computes). "
             "Beside it, two baselines: "
             "**naive** (efficiency stays at the largest calibrated point's) and **one-β** (the "
             "1-node step plus one β, α = 0, from the largest calibrated point's excess).", "",
             by_name["prediction-vs-measured"].markdown(), ""]
    lines += _bench_words(pred) + _loop_words(pred) + _spread_words(pred)
    lines += [_axis_words(ax) for ax in pred["axes"]]
    if h["points"]:
        mae = h["mae_model"]
        half = h["mae_one_parameter"] / 2 if h["mae_one_parameter"] is not None else None
        verdict = ("" if mae is None or half is None else
                   " The model's error is at most half the one-β baseline's." if mae <= half else
                   " The model does **not** reach half the one-β baseline's error."
                   if mae < h["mae_one_parameter"] else
                   " The model does **not** beat the one-β baseline.")
        if mae is not None and h["mae_naive"] is not None and mae >= h["mae_naive"]:
            verdict += " The model does **not** beat the naive baseline."
        verdict += _floor_words(pred, mae, half)
        lines += ["", f"Held-out points: {h['points']}. Step within 10%: {h['within_10']} of "
                  f"{h['points']}; compute and exchange each within 15%: {h['parts_within_15']} "
                  f"of {h['points']}. Mean absolute step error: model {_f(mae, pct=True)}, naive "
                  f"{_f(h['mae_naive'], pct=True)}, one-β {_f(h['mae_one_parameter'], pct=True)} "
                  f"(compute {_f(h['mae_compute'], pct=True)}, exchange "
                  f"{_f(h['mae_exchange'], pct=True)})." + verdict]
        lines += _bias_words(h.get("by_nodes") or [])
        lines.append(_noise_words(pred.get("noise")))
        lines.append(_band_words(pred, h))
    if pred["cross_rate"]:
        errs = [abs(c["error"]) for c in pred["cross_rate"] if c["error"] is not None]
        lines += ["", "Across link rates: each axis's model, calibrated at its rate, predicting "
                  "the same configuration's held-out points at the other rate, given only that "
                  f"rate: {sum(e <= 0.15 for e in errs)} of {len(errs)} within 15%.", "",
                  by_name["prediction-across-rates"].markdown()]
    if pred["remedies"]:
        lines += _remedies_markdown(pred, by_name)
    if "forecast" in by_name:
        lines += _forecast_markdown(pred, by_name)
    elif pred.get("forecast"):
        lines += ["", "### Forecast (MODEL)", "", "None to show: every named network's exchange "
                  f"stays under {_no_effect()} of every step (a column would only repeat the "
                  "compute's ratio)"
                  + (", and every rank ran on one machine, whose shared memory says nothing of a "
                     "network." if pred.get("one_node") else ".")]
    return lines + [""]


def _band_words(pred, h) -> str:
    basis = pred.get("band_basis") or ""
    if pred["band_halfwidth"] is None:
        return f"No band: {basis}."
    dist = "; ".join(f"{c['inside']} of {c['points']} at {2 ** c['distance']:.3g}× the "
                     "calibrated nodes" for c in pred.get("coverage_by_distance") or [])
    return (f"Band: ±{_f(pred['band_halfwidth'], pct=True)} at the calibrated node count "
            f"({pred['nominal'] * 100:.0f}%, {basis}: each multi-rank calibration run predicted "
            "by the model calibrated without its repeat, all axes pooled), widened to "
            "±q·√(1 + log2(N / calibrated nodes)) at N nodes: each doubling beyond the "
            "calibration adds an error of the calibration's size. Beyond the calibrated node "
            f"count the point takes {_beyond()} the exchange hidden at the calibration, the band's "
            "lower edge all of it and its upper edge none. "
            f"Nominal coverage {pred['nominal'] * 100:.0f}%, measured "
            f"{h['covered']} of {h['banded']} held-out points ({_f(h['coverage'], pct=True)})"
            + (f"; by distance: {dist}." if dist else "."))


def _forecast_table(pred) -> Table:
    t = Table("forecast", "MODEL forecast at larger node counts",
              ["axis", "network", "nodes", "allreduce", "compute (ms)", "exchange (ms)",
               "step (ms)", "band (ms)", "throughput", "efficiency"],
              meta={"kind": "model", "hidden": f"{_beyond()} the calibration's hidden exchange "
                                             "beyond it; band: from all of it to none"})
    for f in pred["forecast"]:
        nets = [("this allocation", f["here"])] + [(n["label"], n["rows"])
                                                   for n in f["networks"]]
        for label, rows in nets:
            for r in rows:
                if r.get("step_s") is None:
                    continue
                b = r["band_s"]
                t.add([f["axis"], label, r["nodes"], r["algorithm"], _ms(r["compute_s"]),
                       _ms(r["exchange_s"]), _ms(r["step_s"]),
                       f"{b[0] * 1e3:.4g}–{b[1] * 1e3:.4g}" if b else "-",
                       _f(r["throughput"], 1), _f(r["efficiency"], pct=True)],
                      {"axis": f["axis"], "network": label, **r})
    return t


def _forecast_markdown(pred, by_name) -> List[str]:
    f0 = pred["forecast"][0]
    left = sorted({n for f in pred["forecast"] for n in f["left_out"]})
    return ["", "### Forecast (MODEL)", "",
            f"The model above, calibrated on at most {f0['calibrated_nodes']} node(s), at the "
            "node counts planned: the slowest of N ranks' compute, the exchange of the "
            "allreduce the MPI library runs at N ranks (on this allocation from "
            f"{f0['exchange_here']}; on a named network its latency per message plus bytes "
            f"at {costmodel.LINE_SHARE:.0%} of its line rate, over the algorithm's messages), the "
            f"fixed cost as measured, and beyond the calibration {_beyond()} the exchange it hid "
            "taken as hidden "
            "(the band: from all of it to none). Efficiency against the model's one node.",
            "", by_name["forecast"].markdown(), ""] + (
        [(f"One column stands for {', '.join(left)}" if any(
            n["network"] == "any" for f in pred["forecast"] for n in f["networks"])
          else f"Left out: {', '.join(left)}")
         + f": on each the exchange stays under {_no_effect()} of every step here, so a column of each would "
         "only repeat the compute's ratio, not show a network effect.", ""] if left else []) \
        + _input_words(pred)


def _input_words(pred) -> List[str]:
    """Which of the allocation's inputs the forecast drew on, what each moved its largest node
    count's step by, and what stands in for a missing one."""
    said = []
    top = max((r["nodes"] for f in pred["forecast"]
               for r in f["here"] + [x for n in f["networks"] for x in n["rows"]]), default=0)
    for key, name, instead in (
            ("loop", "the loop file (Horovod's share of a node)",
             "compute beyond the calibration holds the calibration's share"),
            ("spread", "the spread file (how far the nodes lie apart)",
             "the slowest of N ranks is drawn from the calibration runs' own spread")):
        moved = [(f["axis"], f["inputs"][key]) for f in pred["forecast"]
                 if (f.get("inputs") or {}).get(key) is not None]
        if moved:
            said.append(f"{name} moved the step at {top} nodes by "
                        + ", ".join(f"{e * 100:+.1f}% ({a})" for a, e in moved))
        else:
            bench = pred.get(f"{key}_bench") or {}
            why = ("not taken (" + "; ".join(bench["misses"]) + ")" if bench.get("misses") else
                   "no change to it" if bench else "none")
            said.append(f"{name}: {why}: {instead}" if not bench or bench.get("misses")
                        else f"{name}: {why}")
    said.append(_exchange_input(pred))
    return ["Inputs measured on the allocation (`hpcdl bench allocation` and `hpcdl tune --knobs "
            "algorithm`, run by its own ranks at each node count it can get; a study with "
            "`[model] forecast` runs them): " + "; ".join(said) + ".", ""] + _cost_words(pred)


def _exchange_input(pred) -> str:
    """Where the forecast's exchange on this allocation starts from."""
    starts = sorted({(f["axis"], r["exchange_from"]) for f in pred["forecast"]
                     for r in f["here"] if r.get("exchange_from")})
    if starts:
        return ("the exchange on this allocation from each algorithm's time measured there, "
                "the model's growth beyond: " + "; ".join(f"{src} ({a})" for a, src in starts))
    bench = pred.get("exchange_bench") or {}
    why = ("not taken (" + "; ".join(bench["misses"]) + ")" if bench.get("misses") else "none")
    return (f"the exchange files (each algorithm's exchange on the allocation): {why}: the "
            "exchange on this allocation is the model's from the calibration alone")


def _cost_words(pred) -> List[str]:
    """What leaving each input out did to the held-out points (:func:`hpcdl.model.predict.
    input_costs`), or why it is not measured."""
    costs = pred.get("input_costs")
    if not costs:
        return ["What a missing input costs is measured where points are held out "
                "(`[model] calibrate = {nodes_max = N}`): none is here.", ""]
    names = {"all": "with every input", "exchange": "without the exchange files",
             "loop": "without the loop file", "spread": "without the spread file"}

    def pct(x):
        return "-" if x is None else f"{x * 100:.1f}%"
    return ["What each input is worth here: the held-out points predicted again without it "
            "(mean absolute step error; the band half-width that would have held 90% of "
            "them): " + "; ".join(f"{names[c['input']]} {pct(c['mae'])}, "
                                  f"{pct(c['needed_halfwidth'])}" for c in costs)
            + f" ({costs[0]['points']} point(s)).", ""]


def _bias_words(by_nodes) -> List[str]:
    """Where the held-out errors at one node count lean one way (a sign test), what leans."""
    out = []
    for b in by_nodes:
        if not b["biased"]:
            continue
        way = "under" if b["under"] > b["over"] else "over"
        parts = ", ".join(f"{k} {b[k] * 100:+.1f}%" for k in ("compute", "exchange")
                          if b[k] is not None)
        out.append(f"**Bias at {b['nodes']} nodes**: {max(b['under'], b['over'])} of "
                   f"{b['points']} held-out steps are {way}-predicted (mean "
                   f"{b['step'] * 100:+.1f}%; {parts}; sign test p = "
                   f"{b['sign_p']:.3f}), more one way than chance gives: the model misses "
                   f"something that grows with the node count there, and its extrapolation "
                   f"beyond {b['nodes']} nodes is likely {way}stated in step time "
                   f"({'optimistic' if way == 'under' else 'pessimistic'} in efficiency).")
    return out


def _remedies_markdown(pred, by_name) -> List[str]:
    tuned = any(r["remedy"].startswith("the tuned settings") for r in pred["remedies"])
    return ["", "**What to try** (MODEL, checked where run): at the largest point of each "
            "uncompressed axis, the efficiency the model above predicts with fp16 gradients "
            "(half the bytes on every link) and with twice the batch per rank (twice the "
            "compute per exchange), and its gain over the efficiency it predicts as run. "
            "Measured: fp16 by this study's fp16 axis; twice the batch by a study of the same "
            "workload with that batch (`benchmarks/remedy_check.py` sets the two side by "
            "side). For an axis the MPI library exchanges, also the allreduce algorithm the model "
            "predicts fastest at that point where the library chose another: pin it with "
            "`OMPI_MCA_coll_tuned_use_dynamic_rules=1` and `OMPI_MCA_coll_tuned_allreduce_"
            "algorithm=N` in the study's `[run] env`, or let `hpcdl tune` find it."
            + (" Where the study has a tuning axis, also at each default-settings axis's "
               "largest point: the tuned points' allreduce algorithm, measured by those "
               "points (the model has a term for the algorithm only, not for Horovod's cycle "
               "time or fusion)." if tuned else ""),
            "", by_name["prediction-remedies"].markdown()]


def _published_markdown(t) -> List[str]:
    s = analysis.PUBLISHED_SETUP
    net = costmodel.PRESETS[s["network"]]
    inp = analysis.PUBLISHED_INPUTS
    return ["### MODEL vs published: Horovod at 512 GPUs on 25 GbE RoCE", "",
            "Sergeev & Del Balso (2018) report 90% scaling efficiency for ResNet-101 and 68% for "
            "VGG-16 on 128 servers × 4 Pascal GPUs over 25 Gbit/s RoCE. The model gives the "
            "efficiency with none of the exchange hidden, and the fraction that would have to "
            "hide behind backprop to meet the published figure.", "",
            f"- published inputs: {inp['published']};",
            f"- assumed: {inp['assumed']} (α = {net.alpha * 1e6:.0f} µs, "
            f"β = {net.beta * 1e9:.3f} ns/B, γ = {s['gamma'] * 1e9:.3f} ns/B);",
            f"- derived: {inp['derived']}.", "", t.markdown(), ""]
