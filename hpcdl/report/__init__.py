"""Render a study's analysis: Markdown and CSV tables, PNG plots, and ``report.json``.

Input is ``results/<study>/runs.jsonl``; :func:`hpcdl.analysis.analyse` computes everything, and
this module only formats it: ``report.md``, one CSV per table, PNG plots, and ``report.json``
(the analysis object serialised), next to the records. Only numpy and matplotlib (Agg) are used,
so a report can be made anywhere the results folder is copied to. The sections are registered in
:mod:`.sections`; this module reads the records, writes the files and heads each with its command.
"""
from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

from . import sections
from .plots import draw_plots  # matplotlib is imported only when plots are drawn
from .table import Table, stable
from .. import analysis, checks, costmodel
from ..errors import UserError

__all__ = ["Table", "write_report", "select_records"]


# --- the report -----------------------------------------------------------------------------------

def _resolve(src) -> Path:
    src = Path(src)
    return src / "runs.jsonl" if src.is_dir() else src


def select_records(recs: List[dict], study_name: Optional[str]) -> List[dict]:
    recs = [r for r in recs if r.get("kind", "train") == "train"]
    names = Counter(r.get("study") for r in recs)
    if study_name is None:
        named = [n for n in names if n]
        if len(named) > 1:
            raise UserError(f"records of several studies ({', '.join(sorted(named))}): "
                            "pick one with --study NAME")
        study_name = named[0] if named else None
    return [r for r in recs if r.get("study") == study_name] if study_name else recs


def _load_fit_doc(fit_path) -> dict:
    path = Path(fit_path)
    if not path.is_file():
        raise UserError(f"fit {fit_path}: no such file (make one with 'hpcdl bench fit')")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"fit {fit_path}: cannot be read: "
                        f"{getattr(exc, 'strerror', None) or exc}") from None
    except ValueError as exc:
        raise UserError(f"fit {fit_path}: not JSON ({exc}); make one with "
                        "'hpcdl bench fit'") from None
    schema = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
    if schema != "hpcdl.fit/1":
        raise UserError(f"fit {fit_path}: schema is {schema!r}, expected 'hpcdl.fit/1'")
    return doc


def write_report(src, out_dir=None, fit_path=None, study_name: Optional[str] = None,
                 algorithm: Optional[str] = None, max_ranks: int = 1024,
                 plots: bool = True, scaling: Optional[str] = None,
                 allow_mixed: bool = False) -> Dict:
    """Analyse the records in ``src`` and render the report; return {'report', 'json', 'files'}."""
    runs = _resolve(src)
    if not runs.exists():
        raise UserError(f"{runs}: no such results file (run the study first: hpcdl study run)")
    read = checks.scan(runs, checks.train_record_problem)
    for note in read.notes():
        sys.stderr.write(f"hpcdl study report: {note}\n")
    recs = select_records(read.records, study_name)
    if not recs:
        raise UserError(f"{runs}: no train records{f' of study {study_name}' if study_name else ''}")
    out = Path(out_dir) if out_dir else runs.parent
    checks.check_writable_dir(out, "the report's folder")
    fit_path = fit_path or analysis.declared_calibration(recs)[0]
    fit_doc = _load_fit_doc(fit_path) if fit_path else None
    try:
        res = analysis.analyse(recs, recs[0].get("study") or runs.parent.name, fit_doc,
                               str(fit_path) if fit_path else None, scaling, algorithm, max_ranks,
                               allow_mixed)
    except ValueError as exc:
        raise UserError(f"{runs}: {exc}") from None
    if fit_doc and not any(m.source.startswith("bench fit") for m in res.models.values()):
        raise UserError(f"fit {fit_path}: no entry for the study's axes ({', '.join(res.axes)}); "
                        f"it has {', '.join(fit_doc.get('backends') or {}) or 'none'}")
    pngs = draw_plots(res, out) if plots else []
    tables, lines, extra = sections.render(sections.Context(res, recs, runs, pngs))
    command = _command(recs, runs, res.provenance.mixed)
    files: List[Path] = []
    for t in tables:
        path = out / f"{t.name}.csv"
        path.write_text(t.csv_text(command))
        files.append(path)
    files += pngs
    report = out / "report.md"
    report.write_text(f"<!-- command: {command} -->\n" + "\n".join(
        _opening(res, runs) + _left_out(read) + lines
        + ["Files: " + ", ".join(f"`{t.name}.csv`" for t in tables) + ", `report.json`.", ""]))
    js = out / "report.json"
    js.write_text(json.dumps(stable(json.loads(json.dumps({**res.as_dict(), **extra,
                                                          "left_out": _left_out_json(read)},
                                                          default=_jsonable))),
                             indent=1, sort_keys=True))
    files += [report, js]
    return {"report": report, "json": js, "files": files}


def _command(recs, runs, mixed: bool = False) -> str:
    """The commands that regenerate this report: the study's runs (when a study made them: on
    this machine, through Slurm, or on the cluster box at each link rate it recorded) into the
    results root the records are in, named explicitly (points already recorded there are
    skipped; another root measures afresh), then the report itself."""
    study_file = next(((r.get("declared") or {}).get("study_file") for r in recs
                       if (r.get("declared") or {}).get("study_file")), None)
    report = f"hpcdl study report {_shown(runs.parent)}" + (" --allow-mixed" if mixed else "")
    if not study_file:
        return report
    root = f"--results-root {_shown(runs.parent.parent)}"
    submit = (f"hpcdl study submit {study_file} {root} && "
              f"hpcdl study status {study_file} {root} --wait 14400")
    boxes = [r["box"] for r in recs if isinstance(r.get("box"), dict)]
    if boxes:
        rates = sorted({b["link_rate"] for b in boxes}, key=costmodel.rate_bits)
        nodes = max(int(b.get("nodes_in_box") or 0) for b in boxes)
        cpus = boxes[0].get("cpus_per_node")
        up = f"scripts/cluster-box.sh up {nodes} --link $rate" + (f" --cpus-per-node {cpus:g}"
                                                                  if cpus else "")
        return (f"for rate in {' '.join(rates)}; do {up} && scripts/cluster-box.sh check && "
                f"{submit}; done; {report}")
    if any(((r.get("manifest") or {}).get("slurm") or {}).get("job_id") for r in recs):
        return f"{submit} && {report}"
    return f"hpcdl study run {study_file} {root} && {report}"


def _shown(path) -> str:
    """The path relative to the working directory when it lies below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _jsonable(x):
    if isinstance(x, float) and math.isnan(x):
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


def _opening(res, runs) -> List[str]:
    return [f"# Scaling study `{res.study}`", "",
            f"{res.scaling.capitalize()} scaling ({res.scaling_source}) of `{res.workload}` "
            f"from `{runs}` ({res.records} record(s), {len(res.rows)} configuration(s)). "
            "Throughput is the total over all ranks, mean ± 1.96σ over the timed iterations of "
            "every repeat; the step time is the median step of the slowest rank (median over "
            "repeats). Speedup S = X(N)/X(N₀) and efficiency E = S/(N/N₀) against the smallest "
            "run of each axis; Karp–Flatt e = (1/S − 1/p)/(1 − 1/p). Compute is the probed "
            "forward and backward pass; the rest of the step is the exchange not hidden behind "
            "it, the optimizer update and per-step overhead (at one rank nothing is exchanged).",
            ""] + _caution(res.provenance)


def _left_out(read) -> List[str]:
    """What of the results file is not in the report, and why (nothing when all of it is)."""
    notes = read.notes()
    return (["**Left out of this report:** " + " ".join(f"{n}." for n in notes), ""]
            if notes else [])


def _left_out_json(read) -> dict:
    """Every line of the results file the report left out: torn, repeated, no measurement."""
    return {"torn_lines": read.torn, "duplicate_lines": read.duplicates,
            "excluded": read.excluded}


def _caution(prov) -> List[str]:
    """A warning at the top when the records were not made alike or runs overlapped."""
    said = []
    if prov is not None and prov.mixed:
        said.append("it pools records that were not made alike (" + " / ".join(prov.differences())
                    + ")")
    if prov is not None and prov.overlaps:
        said.append(f"{len(prov.overlaps)} pair(s) of its runs overlapped in time on a machine "
                    "they shared")
    return [f"**Caution:** {' and '.join(said)}; see Runs below.", ""] if said else []
