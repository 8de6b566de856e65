"""The whole study: records in, one :class:`StudyAnalysis` out (the report only renders it):
the rows and their scaling figures, the efficiency budget, the part-by-part model's held-out
check and forecast (:mod:`.predict`), the published comparison and what the records pooled."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, List, Optional, Sequence

from . import budget
from .. import checks
from ..costmodel import SMALL
from ..model import predict
from ..model.bands import Pooled, machine_kind
from ..model.inputs import Inputs
from ..model.exchange_bench import Bench
from ..model.host_spread import HostSpread
from ..model.loop_share import LoopShare
from .provenance import Provenance
from .published import PUBLISHED_INPUTS, PUBLISHED_SETUP, published_comparison
from .reading import Digest
from .scaling import Row, axes, flag_rows, rows_of
from .systems import systems_of
from ..records import lookup as _get


@dataclass
class StudyAnalysis:
    """Everything the report shows, computed once; ``report.json`` is this object serialised."""

    study: str
    workload: Optional[str]
    scaling: str
    scaling_source: str                # where the scaling kind came from
    calibration: str                   # "runs" or "fit:<path>"
    records: int
    rows: List[Row]
    published: List[dict]
    cores: Optional[int] = None
    convergence: List[dict] = field(default_factory=list)   # time to accuracy (convergence.py)
    budget: List[dict] = field(default_factory=list)        # where the efficiency goes (budget.py)
    systems: List[dict] = field(default_factory=list)       # asynchronous and pipeline runs' own
    provenance: Optional[Provenance] = None                 # what was pooled (provenance.py)
    prediction: dict = field(default_factory=dict)          # held-out points, part by part
    why_no_model: str = ""             # why the study has no model ("" when it has one)

    @property
    def axes(self) -> List[str]:
        return axes(self.rows)

    def as_dict(self) -> dict:
        return {"schema": "hpcdl.report/4", "study": self.study, "workload": self.workload,
                "scaling": self.scaling, "scaling_source": self.scaling_source,
                "calibration": self.calibration, "records": self.records,
                "rows": [r.as_dict() for r in self.rows],
                "published": {"setup": PUBLISHED_SETUP, "inputs": PUBLISHED_INPUTS,
                              "rows": self.published},
                "cores": self.cores,
                "convergence": self.convergence, "budget": self.budget,
                "systems": self.systems, "why_no_model": self.why_no_model or None,
                "provenance": self.provenance.as_dict() if self.provenance else None,
                "prediction": self.prediction}


def declared_scaling(recs: Iterable[dict], given: Optional[str] = None):
    """(scaling kind, where it came from): the study's declaration in the records, else ``given``."""
    kinds = (set(recs.scalings) if isinstance(recs, Digest) else
             {_get(r, "declared", "scaling") for r in recs} - {None})
    if len(kinds) > 1:
        raise ValueError(f"the records declare different scaling kinds {sorted(kinds)}: "
                         "report one study at a time")
    if kinds:
        kind = kinds.pop()
        if given and given != kind:
            raise ValueError(f"--scaling {given} contradicts the study's declared {kind} scaling")
        return kind, "declared by the study"
    if given:
        return given, "given on the command line"
    raise ValueError("the records do not declare strong or weak scaling (they were not made by a "
                     "study): give --scaling strong or --scaling weak")


def analyse(recs: "Iterable[dict] | Digest", name: str, given: Optional[Inputs] = None,
            scaling: Optional[str] = None, allow_mixed: bool = False) -> StudyAnalysis:
    """The analysis of one study's records, or of what :class:`.reading.Digest` kept of them
    as they were read (raises ValueError on what cannot be analysed, and
    :class:`provenance.MixedRecords` on records of different code, software, study files,
    processors or machine settings unless ``allow_mixed``). ``given``: the model's inputs the
    user gave, each over the one the study declares (:class:`hpcdl.model.inputs.Inputs`)."""
    recs = recs if isinstance(recs, Digest) else Digest.of(recs)
    origin = recs.origin.result(allow_mixed)
    rows = rows_of(recs.runs)
    if not rows:
        raise ValueError("no record has metrics.throughput")
    kind, source = declared_scaling(recs, scaling)
    inputs = (given or Inputs()).over(Inputs.declared(recs))
    # a bench fit (declared or given) calibrates the exchange: alone, with the study's every
    # point for the rest; beside a declared calibration subset, with the subset's points
    nodes_max = inputs.nodes_max
    cores = recs.cores
    flag_rows(rows, cores)
    # an axis whose records time no step (a script seen only from outside) has no model, nor
    # one whose step is no allreduce (the asynchronous parameter server, a pipeline)
    timed = [a for a in axes(rows)
             if any(math.isfinite(r.step_time) and r.modelled for r in rows if r.axis == a)]
    ahead = _predicted(recs, origin, kind, inputs, name)
    _heldout_from(ahead, rows)
    _above_measured(ahead, rows)
    for r in rows:
        r.fitted = r.nodes <= nodes_max if nodes_max else r.fitted
    spent = budget.of_points(recs.budget, rows)
    return StudyAnalysis(
        study=name, workload=recs.workload, scaling=kind,
        scaling_source=source, calibration=_calibration_text(inputs),
        records=recs.records, rows=rows, cores=cores,
        why_no_model="" if ahead else _no_model(rows, timed),
        published=published_comparison(),
        convergence=recs.curves.result({(r.axis, r.ranks): r.speedup for r in rows}),
        budget=spent,
        systems=systems_of(recs.systems),
        provenance=origin, prediction=ahead)


def _no_model(rows: Sequence[Row], timed: Sequence[str]) -> str:
    """Why no axis of a study has the part-by-part model."""
    if not timed:
        return ("no record times a step that is one allreduce (a script seen only from outside, "
                "an asynchronous parameter server, a pipeline)")
    if not any(r.computes and any(c is not None for c in r.computes) for r in rows):
        return "no record probes the compute alone, so no step splits into compute and exchange"
    return ("no axis has a 1-rank point and a multi-rank point with probes, one rank per node "
            "or all ranks on one node: measure both")


def _predicted(recs: Digest, origin, kind: str, inputs: Inputs, name: str) -> dict:
    """:func:`predict.of_points` of the records: the held-out exchange from the tuning files
    ``inputs.exchange`` names (a path pattern), a Horovod axis's compute beyond its calibration
    after the loop file (:mod:`hpcdl.model.loop_share`; used only when every record ran on the
    machine it measured), every axis's slowest rank there drawn from the spread file
    (:mod:`hpcdl.model.host_spread`, likewise); the band from the residuals file's other
    studies on the same kind of machine (:mod:`hpcdl.model.bands`)."""
    machines = {key[2] for key in origin.groups}
    machine = machines.pop() if len(machines) == 1 else None
    if not inputs.nodes_max and not inputs.counts:
        return {}
    fit_for = _fit_for(checks.fit_file(inputs.fit) if inputs.fit else None, inputs.fit)
    files = predict.Files(
        bench=Bench(inputs.exchange, machine=machine) if inputs.exchange else None,
        loop=LoopShare(inputs.loop, machine) if inputs.loop else None,
        spread=HostSpread(inputs.spread, machine) if inputs.spread else None,
        residuals=(Pooled(inputs.residuals, machine_kind(machine), name)
                   if inputs.residuals not in (None, "none") else None))
    out = predict.of_points(recs.points, inputs.nodes_max, kind, exchange_fit=fit_for,
                            files=files, forecast=inputs.counts, networks=inputs.networks)
    if out and out["held_out"]:
        out["input_costs"] = predict.input_costs(out, recs.points, inputs.nodes_max, kind,
                                                 fit_for, files)
    return out


def _calibration_text(inputs: Inputs) -> str:
    """How the model is calibrated, in one line (StudyAnalysis.calibration)."""
    nodes_max, fit_label = inputs.nodes_max, inputs.fit
    whose = "their" if nodes_max else "the forecast's"     # held-out points, or none
    if inputs.spread:
        return (_calibration_text(replace(inputs, spread=None))
                + f"; {whose} slowest rank from the nodes' spread in {inputs.spread}")
    if inputs.loop:
        return (_calibration_text(replace(inputs, loop=None))
                + f"; {whose} compute after the share of a node Horovod's loop takes in "
                f"{inputs.loop}")
    if inputs.exchange and nodes_max:
        return (f"runs with at most {nodes_max} node(s); the other points are predicted, their "
                f"exchange from the tuning files {inputs.exchange} (at most {SMALL} nodes, "
                "below each point's own)"
                + (f", else from fit:{fit_label}" if fit_label else ""))
    if fit_label and nodes_max:
        return (f"runs with at most {nodes_max} node(s), the exchange from fit:{fit_label}; the "
                "other points are predicted")
    if fit_label:
        return f"fit:{fit_label}"
    return (f"runs with at most {nodes_max} node(s); the other points are predicted"
            if nodes_max else "runs")


def _above_measured(ahead: dict, rows: Sequence[Row]) -> None:
    """Each forecast row above its axis's best measured efficiency gets the reason beside it
    (``above_measured``): the compute alone where every rank shared one host, else how much of
    its step is exchange against the measured point's, and the allreduce where it differs."""
    points = {(ax["axis"], pt["nodes"]): pt for ax in ahead.get("axes", []) for pt in ax["points"]}
    for f in ahead.get("forecast") or []:
        multi = [r for r in rows if r.axis == f["axis"] and r.ranks > 1
                 and math.isfinite(r.efficiency)]
        if not multi:
            continue
        best = max(multi, key=lambda r: r.efficiency)
        unit = "nodes" if best.nodes > 1 else "ranks"
        pt = points.get((f["axis"], best.ranks)) or points.get((f["axis"], best.nodes)) or {}
        m = pt.get("measured") or {}
        share = (m["exchange"] or 0.0) / m["step"] if m.get("step") else None
        for frows in [f["here"]] + [n["rows"] for n in f["networks"]]:
            for r in frows:
                if r.get("step_s") is None or r["efficiency"] <= best.efficiency:
                    continue
                why = ("no exchange is forecast, the ranks shared one host" if r["exchange_s"] == 0
                       else f"exchange {r['exchange_s'] / r['step_s']:.0%} of its step"
                       + (f", {share:.0%} measured" if share is not None else "")
                       + (f"; {r['algorithm']} there, {pt['algorithm']} measured"
                          if pt.get("algorithm") not in (None, r["algorithm"]) else ""))
                r["above_measured"] = (f"above the measured {best.efficiency:.0%} "
                                       f"({getattr(best, unit)} {unit}): {why}")


def _heldout_from(ahead: dict, rows: Sequence[Row]) -> None:
    """Each held-out row's step error as the part-by-part prediction made it."""
    errors = {(ax["axis"], pt["nodes"]): pt["error"]["step"]
              for ax in ahead.get("axes", []) for pt in ax["points"] if not pt["fitted"]}
    for r in rows:
        if (r.axis, r.nodes) in errors and r.ranks == r.nodes:
            r.heldout_error = errors[(r.axis, r.nodes)]


def _fit_for(fit_doc: Optional[dict], label: Optional[str]):
    """``(backend, compression) -> the fit's entry`` (its source naming ``label``), or None."""
    if fit_doc is None:
        return None

    def entry(backend: str, compression: str) -> Optional[dict]:
        fit = load_fit(fit_doc, backend, compression)
        if fit is not None and label:
            fit["source"] = f"{fit['source']} from {label}"
        return fit
    return entry


def load_fit(doc: dict, backend: str = "horovod", compression: str = "none") -> Optional[dict]:
    """The alpha/beta/gamma entry of a ``hpcdl.fit/1`` document for a backend and compression."""
    entries = doc.get("backends") or {}
    # A compression's own entry first; else the uncompressed one (wire bytes carry the ratio).
    for key in (f"{backend}+{compression}", backend, f"{backend}+none"):
        if key in entries:
            out = dict(entries[key])
            out["source"] = f"bench fit ({key}, {doc.get('ranks', '?')} ranks)"
            return out
    return None
