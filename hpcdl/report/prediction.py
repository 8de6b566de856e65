"""The words and tables of the report's model sections (:mod:`.sections` registers them): the
part-by-part prediction of the held-out points beside its baselines and band, what each input
measured on the allocation was worth, the forecast at the planned node counts and on named
networks (:mod:`.forecast`), the remedies."""
from __future__ import annotations

from typing import Callable, List, Optional

from .forecast import _beyond, _forecast_markdown, _no_effect
from .table import _f, _ms, Table
from ..analysis.units import seconds
from ..costmodel import SMALL


def _model_markdown(res, by_name) -> List[str]:
    head = ([] if res.prediction else
            ["## Communication model", "", f"None: {res.why_no_model}.", ""])
    return head + ["A whole-step α-β-γ BASELINE (not the model) beside Horovod's published "
                   "efficiency at 512 GPUs: `model-vs-published.csv`.", ""]


def _prediction_table(pred) -> Table:
    t = Table("prediction-vs-measured", "Prediction beside measurement, part by part",
              ["axis", "nodes", "point", "allreduce", "compute meas (ms)", "pred", "err",
               "exchange meas (ms)", "pred", "err", "exchange from",
               "exchange alone measured here (ms)", "step meas (ms)", "pred",
               "err", f"{pred['nominal'] * 100:.0f}% band (ms)", "in band", "naive err",
               "one-β err"],
              meta={"calibration": f"runs with at most {pred['nodes_max']} node(s)"
                                   + "".join(sorted({f"; exchange from the {src}" for src in (
                                       a["model"]["exchange_source"] for a in pred["axes"])
                                       if src.startswith("bench fit")})),
                    "compute": "the slowest rank's median probe, first probe left out",
                    "exchange": "the slowest rank's median exchange timed alone",
                    "exchange_from": "small: priced from hpcdl tune's exchange-only runs on at "
                                     f"most {SMALL} nodes below the point's own; model: the link "
                                     "model",
                    "measured_here": "hpcdl tune's exchange-only run at the point's own node "
                                     "count, beside the prediction, never in it",
                    "band": f"{pred['nominal'] * 100:.0f}% nominal, {pred['band_basis']}, "
                            f"±{_f(pred['band_halfwidth'], pct=True)} at the calibration; beyond "
                            "it about the step as if the exchange hid as at the calibration and "
                            "as if none hid",
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
                   "small" if pt.get("exchange_from") else "model",
                   _ms(pt.get("exchange_measured_here")),
                   _ms(m["step"]), _ms(p["step"]), _f(e["step"], pct=True),
                   f"{_ms(band[0])}–{_ms(band[1])}" if band else "-",
                   {True: "yes", False: "**no**"}.get(pt.get("inside"), "-"),
                   _f(pt["naive_error"], pct=True), _f(pt["one_parameter_error"], pct=True)],
                  {"axis": ax["axis"], "nodes": pt["nodes"], "fitted": pt["fitted"],
                   "algorithm": pt["algorithm"], "runs": pt["runs"],
                   **{f"measured_{k}_s": m[k] for k in m}, **{f"model_{k}_s": p[k] for k in p},
                   **{f"{k}_error": e[k] for k in e}, "band_s": band, "inside": pt.get("inside"),
                   "exchange_from": pt.get("exchange_from"),
                   "exchange_measured_here_s": pt.get("exchange_measured_here"),
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
        t.add([r["axis"], r["nodes"], r["remedy"].replace("; hpcdl tune finds it", ""), _f(r["model_efficiency_as_run"], pct=True),
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
    out = [f"Exchange of the held-out points (\"small\" above): priced from what `hpcdl tune` "
           f"measured on at most {SMALL} nodes below the point's own (`{bench['pattern']}`), "
           f"for {len(held)} of them; the others keep the link model's (what it measured at a "
           "point's own count stands beside it)."]
    errs = [abs(pt["model_exchange_error"]) for pt in held
            if pt.get("model_exchange_error") is not None]
    if errs:
        out[0] += (f" The link model alone would have put the exchange of those points within "
                   f"15% at {sum(e <= 0.15 for e in errs)} of {len(errs)} (mean absolute error "
                   f"{_f(sum(errs) / len(errs), pct=True)}).")
    # each point's file, round and scale stay in report.json, not in the prose
    out[0] += (" Each point's file and its scale over the model's: `report.json`, "
               "`prediction.axes[].points[].exchange_from`.")
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
    def words(loop: dict) -> str:
        grown = loop.get("growth") or []
        shares = len(loop["axes"]) - len(grown)
        return ("Compute beyond the calibration, on " + " and on ".join(
            w for w in ((f"{len(grown)} Horovod axis(es), grows as the workload's pass did "
                         "beside a live exchange at up to 4 nodes (held beyond)") if grown else "",
                        (f"{shares} Horovod axis(es), also follows the share of a node "
                         "Horovod's loop takes at up to 4 nodes") if shares else "") if w)
                + f": {loop['source']}.")
    return _file_words(pred.get("loop_bench"), words)


def _spread_words(pred) -> List[str]:
    """Where the held-out points' slowest rank was drawn from a spread file: what it measured,
    each round's own factor (a round far from the others shows), the crowd."""
    return _file_words(pred.get("spread_bench"), lambda spread: (
        f"The slowest rank beyond the calibration, on {len(spread['axes'])} axis(es), is drawn "
        "from how far the allocation's nodes lay apart computing "
        + ("in one short training of k ranks, one per node, exchanging" if spread.get("coupled")
           else "at once, each node alone, nothing exchanged")
        + f": {spread['source']}; each round alone: " + "; ".join(
            f"×{'/'.join(f'{f:.3f}' for f in fs)} at {k} nodes"
            for k, fs in sorted((spread.get("rounds") or {}).items(), key=lambda kv: int(kv[0])))
        + ("; crowd (the first node's compute while k compute): " + ", ".join(
            f"×{v:.3f} at {k} nodes" for k, v in sorted((spread.get("crowd") or {}).items(),
                                                         key=lambda kv: int(kv[0])))
           if spread.get("crowd") else "") + "."))


def _model_table(pred) -> Table:
    """Each axis's calibrated parts (report.json's ``prediction.axes[].model``), one row each."""
    t = Table("prediction-model", "The model of each axis, as calibrated",
              ["axis", "compute per sample", "× beyond one rank", "loop share by nodes",
               "spread draws", "spread file's slowest of p", "crowd", "fixed", "window",
               "exchange"],
              meta={"source": "report.json prediction.axes[].model"})
    for ax in pred["axes"]:
        m = ax["model"]
        loop = sorted((int(n), v) for n, v in (m.get("loop_shares") or {}).items())
        t.add([ax["axis"], seconds(m["per_sample_s"]), f"{1 + m['k']:.2f}",
               ", ".join(f"{v * 100:.0f}% at {n}" for n, v in loop) or "-",
               m["rank_draws"] or "none (no calibration run probed more than one rank)",
               ", ".join(f"×{v['max_factor']:.3f} at {n}"
                         for n, v in (m.get("host_spread") or {}).items()) or "-",
               ", ".join(f"×{v['factor']:.3f} at {n}" for n, v in (m.get("crowd") or {}).items())
               + "".join(f"; live ×{v['factor']:.3f} from {n}"
                         for n, v in (m.get("growth") or {}).items()) or "-",
               seconds(m["fixed_s"]), f"{m['window'] * 100:.0f}%", _exchange_words(m)],
              {"axis": ax["axis"], **m})
    return t


def _exchange_words(m: dict) -> str:
    """How an axis's model prices its exchange, in a few words."""
    if m["exchange_source"].startswith("bench fit"):
        return f"from the {m['exchange_source']}"
    if m["rated"]:
        return ("link bytes at the payload rate, "
                + (f"+{m['duplex'] * 100:.0f}% of the other direction's" if m["duplex"] else
                   f"+{seconds(m['per_exchange_s'])} per exchange"))
    if m["seconds_per_link_byte"] is not None:
        return f"{m['seconds_per_link_byte'] * 1e9:.3f} ns per link byte"
    return "not measured"


def _dropped(pred) -> tuple:
    """The prediction table's columns the Markdown leaves to the CSV: the baselines' errors
    (their means are in the words), the point's kind where only held-out rows are shown, the
    exchange measured at the point's own count where none was."""
    out = [17, 18] + ([2] if pred.get("held_out", True) else [])
    if not any(pt.get("exchange_measured_here") is not None
               for ax in pred["axes"] for pt in ax["points"]):
        out.append(11)
    return tuple(out)


def _held_rows(pred):
    """Which rows of the prediction table the Markdown shows: the held-out points (all where
    none is held out)."""
    if not pred.get("held_out", True):
        return None
    return lambda raw: not raw["fitted"]


def _prediction_markdown(pred, by_name) -> List[str]:
    h = pred["heldout"]
    lines = (["## Prediction of the points not calibrated on (MODEL, checked against "
              "measurement)", "", f"Calibrated on each axis's runs with at most "
              f"{pred['nodes_max']} node(s); every larger point predicted part by part."]
             if pred.get("held_out", True) else
             ["## The model, calibrated on every point (MODEL; no point held out)", "",
              "No point is held out to check it (`[model] calibrate = {nodes_max = N}` holds "
              "the larger points out)."])
    held = pred.get("held_out", True)
    lines = [lines[0], lines[1], lines[2] + " Compute, exchange and step each from the "
             "calibration runs (how, and the band: docs/reading-a-report.md)" + (
                 f"; beyond the calibration {_beyond()} the exchange hidden there is taken "
                 "as hidden"
                 + ". Baselines: **naive** (efficiency stays at the largest calibrated "
                 "point's) and **one-β** (the 1-node step plus one β)." if held else "."), "",
             by_name["prediction-vs-measured"].markdown(_held_rows(pred), drop=_dropped(pred)),
             "", "Calibration rows, baselines' errors: `prediction-vs-measured.csv`."
             if pred.get("held_out", True) else "", ""]
    lines += _bench_words(pred) + _loop_words(pred) + _spread_words(pred)
    lines += ["The model of each axis, as calibrated: `prediction-model.csv`.", ""]
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
                  f"rate: {sum(e <= 0.15 for e in errs)} of {len(errs)} within 15% "
                  "(each point: `prediction-across-rates.csv`)."]
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
    drawn = pred.get("band_drawn") or {}
    if drawn.get("source") == "pooled":
        widths = "; ".join(f"±{_f(w['halfwidth'], pct=True)} at {2 ** w['distance']:.3g}×"
                           for w in drawn["by_distance"] if w["distance"] <= drawn["checked_to"])
        how = (f"({pred['nominal'] * 100:.0f}%, {basis}; none from this study), by multiples of "
               f"the calibrated nodes: {widths}; checked to {2 ** drawn['checked_to']:.3g}×, "
               "beyond as there; ")
    else:
        how = (f"({pred['nominal'] * 100:.0f}%, {basis}), widened with the distance beyond it; ")
    return (f"Band: ±{_f(pred['band_halfwidth'], pct=True)} at the calibrated node count "
            + how + f"nominal coverage {pred['nominal'] * 100:.0f}%, measured "
            f"{h['covered']} of {h['banded']} held-out points ({_f(h['coverage'], pct=True)})"
            + (f"; by distance: {dist}." if dist else "."))


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
    return ["", "**What to try** (MODEL, checked where run): each remedy's efficiency at each "
            "uncompressed axis's largest point, predicted, and measured where the study ran it "
            "(docs/reading-a-report.md).", "", by_name["prediction-remedies"].markdown(
                drop=() if any(r.get("measured_efficiency") is not None for r in pred["remedies"])
                else (7, 8, 9))]

