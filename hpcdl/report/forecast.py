"""The words and tables of the report's forecast (:mod:`.prediction` places them): the model
at the planned node counts on this allocation and on named networks as one grid with the reason
beside each figure above the measured efficiency, the inputs measured on the allocation and what
each was worth; the model's rules as the sentences say them."""
from __future__ import annotations

from typing import List

from ..analysis.units import seconds
from .table import _f, _ms, Table
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
            f"Calibrated on at most {f0['calibrated_nodes']} node(s): on this allocation the "
            f"exchange from {f0['exchange_here']}; on a named network the messages at SimGrid "
            f"SMPI's prices for a fat tree of it; beyond the calibration "
            + f"{_beyond()} the exchange it hid taken as hidden"
            + ". Each cell: efficiency, step (its band, on this allocation); every figure and band in `forecast.csv` (how: docs/reading-a-report.md).",
            ""] + _forecast_grid(pred) + [""] + (
        [(f"One column stands for {', '.join(left)}" if any(
            n["network"] == "any" for f in pred["forecast"] for n in f["networks"])
          else f"Left out: {', '.join(left)}")
         + f": on each the exchange stays under {_no_effect()} of every step here.", ""]
        if left else []) + _input_words(pred)


def _forecast_grid(pred) -> List[str]:
    """The forecast as one table: a row per axis and network, a column per node count."""
    nodes = sorted({r["nodes"] for f in pred["forecast"]
                    for r in f["here"] + [x for n in f["networks"] for x in n["rows"]]})
    why: List[str] = []
    faster = False
    out = ["| axis | where | " + " | ".join(f"{p} nodes" for p in nodes) + " |",
           "|---|---|" + "---:|" * len(nodes)]
    for f in pred["forecast"]:
        for label, rows in [("this allocation", f["here"])] + [
                ("any named network" if n["network"] == "any" else
                 "compute alone" if n["network"] == "compute" else n["label"], n["rows"])
                for n in f["networks"]]:
            by = {r["nodes"]: r for r in rows if r.get("step_s") is not None}
            if not by:
                continue
            above = [by[p]["above_measured"] for p in nodes
                     if p in by and by[p].get("above_measured")]
            mark = ""
            if above and label in ("this allocation", "compute alone"):
                # one reason per row: its largest node count's
                why.append(f"†{len(why) + 1} {f['axis']}, {label}: {above[-1]}.")
                mark = f" †{len(why)}"
            elif above:        # a named network: faster than this allocation's links
                mark = " ‡"
                faster = True
            cells = []
            for p in nodes:
                r = by.get(p)
                band = r and label == "this allocation" and r.get("band_s")
                cells.append("-" if r is None else
                             f"{_f(r['efficiency'], pct=True)}"
                             + (mark if r.get("above_measured") else "")
                             + f" · {seconds(r['step_s'])}"
                             + (f" ({seconds(band[0])}–{seconds(band[1])})" if band else ""))
            out.append(f"| {f['axis']} | {label} | " + " | ".join(cells) + " |")
    if faster:
        why.append("‡ above the measured efficiency on a named network: its exchange is a "
                   "smaller share of the step than this allocation's (each row's reason: "
                   "`forecast.csv`, above_measured).")
    return out + ([""] + why if why else [])


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
            lo, hi = min(e for _, e in moved), max(e for _, e in moved)
            said.append(f"{name} moved the step at {top} nodes by {lo * 100:+.1f}%"
                        + (f" to {hi * 100:+.1f}%" if hi != lo else "")
                        + f" ({len(moved)} axis(es); each in `report.json`)")
        else:
            bench = pred.get(f"{key}_bench") or {}
            why = ("not taken (" + "; ".join(bench["misses"]) + ")" if bench.get("misses") else
                   "no change to it" if bench else "none")
            said.append(f"{name}: {why}: {instead}" if not bench or bench.get("misses")
                        else f"{name}: {why}")
    said.append(_exchange_input(pred))
    if not any(pred.get(k) for k in ("loop_bench", "spread_bench", "exchange_bench")):
        said = ["none (no loop, spread or exchange file): the forecast is the calibration's "
                "alone; a study with `[model] forecast` measures them"]
    return ["Inputs measured on the allocation: " + "; ".join(said) + ".", ""] + (
        _cost_words(pred) if pred.get("held_out", True) else [])


def _exchange_input(pred) -> str:
    """Where the forecast's exchange on this allocation starts from."""
    starts = sorted({(f["axis"], r["exchange_from"]) for f in pred["forecast"]
                     for r in f["here"] if r.get("exchange_from")})
    if starts:
        files = sorted({src.split(" ", 1)[0] for _, src in starts})
        return ("the exchange on this allocation from each algorithm's time measured there "
                f"({', '.join(files)}), the model's growth beyond (each row's source: "
                "`forecast.csv`)")
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
    return ["What each input is worth here (held-out mean absolute step error; the band "
            "half-width that would have held 90%): " + "; ".join(f"{names[c['input']]} {pct(c['mae'])}, "
                                  f"{pct(c['needed_halfwidth'])}" for c in costs)
            + f" ({costs[0]['points']} point(s)).", ""]
