"""Writing a report: the analysis of the records (:func:`hpcdl.analysis.analyse`) rendered by
the registered sections into ``report.md``, one CSV per table, the plots and ``report.json``,
each headed by the command that regenerates it, and what the records left out or mixed."""
from __future__ import annotations

import json
import math
import os
import shlex
import sys
from pathlib import Path
from dataclasses import dataclass, replace
from typing import Dict, List, Optional

from . import sections
from .plots import draw_plots  # matplotlib is imported only when plots are drawn
from .table import stable
from .. import analysis, checks, records
from ..errors import UserError
from ..model import bands
from ..model.inputs import Inputs
from .reading import _read, _resolve
from .summary import summary


# the results root's residuals file (hpcdl study residuals), which a report's band reads where
# none is named: other studies' held-out errors on the same kind of machine
RESIDUALS = "forecast-residuals.json"


@dataclass(frozen=True)
class Reading:
    """How the records are read: which study of a file that holds several, the scaling kind
    where the records declare none, whether records of different origins may be pooled, and
    how many processes read them (:func:`.reading._workers`)."""

    study: Optional[str] = None
    scaling: Optional[str] = None
    allow_mixed: bool = False
    workers: Optional[int] = None


def write_report(src, out_dir=None, given: Optional[Inputs] = None,
                 how: Reading = Reading(), plots: bool = True) -> Dict:
    """Analyse the records in ``src`` and render the report; return {'report', 'json', 'files'}.
    ``given``: the model's inputs the user named, each over the study's declared one (the tuning
    files whose exchange the held-out points take, the loop and spread files, a bench fit, the
    forecast's node counts)."""
    given = given or Inputs()
    runs = _resolve(src)
    if not runs.exists():
        raise UserError(f"{runs}: no such results file (run the study first: hpcdl study run)")
    try:
        read, studies = _read(runs, how.study, how.workers)
    except OSError as exc:
        raise UserError(f"{exc.filename or runs}: cannot be read ({exc.strerror or exc})") from None
    for note in read.notes():
        sys.stderr.write(f"hpcdl study report: {note}\n")
    recs = studies.pick()
    if recs is None:
        raise UserError(f"{runs}: no train records{f' of study {how.study}' if how.study else ''}")
    out = Path(out_dir) if out_dir else runs.parent
    checks.check_writable_dir(out, "the report's folder")
    auto = runs.parent.parent / RESIDUALS
    if given.residuals is None and runs.name == "runs.jsonl" and auto.is_file():
        given = replace(given, residuals=_shown(auto))     # the results root's, named in the head
    for flag, named, schema in (("--loop-bench", given.loop, "hpcdl.loop-cpu/1"),
                                ("--spread-bench", given.spread, "hpcdl.host-spread/1")):
        if named:                  # named on the command line: a wrong file is refused
            checks.schema_file(named, schema, flag, "hpcdl bench allocation")
    try:
        res = analysis.analyse(recs, recs.study or runs.parent.name, given, how.scaling,
                               how.allow_mixed)
    except ValueError as exc:
        raise UserError(f"{runs}: {exc}") from None
    fit = given.over(Inputs.declared(recs)).fit
    sources = [ax["model"]["exchange_source"] for ax in (res.prediction or {}).get("axes", [])]
    if fit and not any(src.startswith("bench fit") for src in sources):
        fit_doc = checks.fit_file(fit)
        raise UserError(f"fit {fit}: no entry for the study's axes ({', '.join(res.axes)}); "
                        f"it has {', '.join(fit_doc.get('backends') or {}) or 'none'}")
    try:
        return _write(res, recs, read, runs, out, plots, _command(
            recs.about, runs, res.provenance.mixed, given))
    except OSError as exc:     # a file of the report that cannot be written, named
        raise UserError(f"{exc.filename or out}: cannot be written ({exc.strerror or exc}); "
                        f"the report in {out} is incomplete") from None


def _write(res, recs, read, runs: Path, out: Path, plots: bool, command: str) -> Dict:
    """The report's plots, tables, report.md and report.json in ``out``."""
    report, js = out / "report.md", out / "report.json"
    _can_replace([report, js])
    pngs = draw_plots(res, out) if plots else []
    tables, lines, extra = sections.render(sections.Context(res, recs.about, runs, pngs))
    _can_replace([out / f"{t.name}.csv" for t in tables])
    files: List[Path] = []
    for t in tables:
        path = out / f"{t.name}.csv"
        records.write_atomic(path, t.csv_text(command))
        files.append(path)
    files += pngs
    text = "\n".join(_opening(res, runs, recs.about.study_file) + _left_out(read) + lines + [
        "Files: " + ", ".join(f"`{t.name}.csv`" for t in tables) + ", `report.json`.", ""])
    while "\n\n\n" in text:                 # one blank line between blocks, never more
        text = text.replace("\n\n\n", "\n\n")
    records.write_atomic(report, f"<!-- command: {command} -->\n" + text)
    _write_json(js, {**res.as_dict(), **extra, "left_out": _left_out_json(read)})
    files += [report, js]
    return {"report": report, "json": js, "files": files}


def _can_replace(paths: List[Path]) -> None:
    """Raise (naming it) where a file of the report exists and cannot be replaced (read-only,
    immutable): checked before any is written, so that the files written never disagree."""
    for path in paths:
        if path.exists() and not os.access(path, os.W_OK):
            raise UserError(f"{path}: cannot be written (read-only or immutable); nothing of "
                            "the report was written, so its files still agree")


def _write_json(path: Path, doc: dict) -> None:
    """``doc`` as JSON (what json cannot say, said by :func:`_jsonable`; floats kept to 10
    digits), one copy of it in memory at a time and the text written as it is made."""
    text = json.dumps(doc, default=_jsonable)
    del doc
    plain = json.loads(text)
    del text
    plain = stable(plain)
    records.write_atomic(path, json.dumps(plain, indent=1, sort_keys=True))


def _command(about, runs, mixed: bool = False, given: Inputs = Inputs()) -> str:
    """The commands that regenerate this report: the study's runs (when a study made them: on
    this machine, through a scheduler, or on a machine set up as the records' were) into the
    results root the records are in, named explicitly (points already recorded there are
    skipped; another root measures afresh), then the report itself with the inputs the user
    gave. ``about``: what :class:`analysis.reading.Runs` gathered of the records."""
    forecast, networks = given.forecast, given.networks
    study_file = about.study_file
    report = (f"hpcdl study report {_shown(runs.parent)}" + (" --allow-mixed" if mixed else "")
              + (f" --fit {given.fit}" if given.fit else "")
              + (f" --exchange-bench '{given.exchange}'" if given.exchange else "")
              + (f" --loop-bench {given.loop}" if given.loop else "")
              + (f" --spread-bench {given.spread}" if given.spread else "")
              + ("" if forecast is None else
                 f" --forecast {','.join(map(str, forecast)) if forecast else 'none'}")
              + ("" if networks is None else f" --networks {','.join(networks) or 'none'}")
              + (f" --residuals {given.residuals}" if given.residuals else ""))
    if not study_file:
        return report
    root = f"--results-root {_shown(runs.parent.parent)}"
    submit = (f"hpcdl study submit {study_file} {root} && "
              f"hpcdl study status {study_file} {root} --wait 14400")
    again = about.machines.rerun(submit, "gridengine" in about.schedulers)
    if again:
        return f"{again}; {report}"
    if about.jobs:
        return f"{submit} && {report}"
    return f"hpcdl study run {study_file} {root} && {report}"


def write_residuals(folders, out) -> dict:
    """The residuals file (:func:`hpcdl.model.bands.collect`) of these studies' report.json,
    written to ``out`` headed by the command that makes it again; the document."""
    reports = {}
    for folder in folders:
        path = Path(folder) / "report.json"
        try:
            reports[str(Path(folder))] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: cannot be read ({exc}); make it with "
                            f"'hpcdl study report {folder}'") from None
    doc = {"command": "hpcdl study residuals " + " ".join(shlex.quote(str(f)) for f in folders)
           + f" --out {shlex.quote(str(out))}", **bands.collect(reports)}
    records.write_atomic(Path(out), json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def rendered_with(folder) -> dict:
    """The options a committed report was rendered with, read back from the command that heads
    its ``report.md`` (:func:`_command` wrote it) as :func:`write_report`'s keywords: so that a
    report can be rendered again with nothing but its records and its own first line."""
    head = (Path(folder) / "report.md").read_text().splitlines()[0]
    if "hpcdl study report" not in head:
        raise UserError(f"{folder}/report.md does not start with the command that made it")
    words = shlex.split(head.split("hpcdl study report", 1)[1].removesuffix("-->"))
    named = {key: words[words.index(flag) + 1] if flag in words else None
             for flag, key in (("--fit", "fit"), ("--exchange-bench", "exchange"),
                               ("--loop-bench", "loop"), ("--spread-bench", "spread"),
                               ("--residuals", "residuals"))}
    if "--forecast" in words:
        given = words[words.index("--forecast") + 1]
        named["forecast"] = () if given == "none" else tuple(int(x) for x in given.split(","))
    if "--networks" in words:
        given = words[words.index("--networks") + 1]
        named["networks"] = () if given == "none" else tuple(given.split(","))
    return {"given": Inputs(**named), "how": Reading(allow_mixed="--allow-mixed" in words)}


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


def _opening(res, runs, study_file: str = "") -> List[str]:
    """The title, the answer (:mod:`.summary`), then what the figures are of."""
    return [f"# Scaling study `{res.study}`", ""] + _inputs_left_out(res) + summary(
        res, study_file, _shown(runs.parent.parent)) + [
            f"{res.scaling.capitalize()} scaling ({res.scaling_source}) of `{res.workload}` "
            f"from `{runs}`: {res.records} record(s), {len(res.rows)} configuration(s); how "
            "each figure is made: docs/reading-a-report.md.", ""] + _caution(res.provenance)


def _inputs_left_out(res) -> List[str]:
    """The allocation files the study names that the input files' rule left out
    (:func:`hpcdl.checks.input_problem`): first, since the figures below were made without them."""
    said = [why for kind in ("exchange_bench", "loop_bench", "spread_bench")
            for why in ((res.prediction or {}).get(kind) or {}).get("rejected") or []]
    return (["**Input files left out** (the figures below are made without them): "
             + " ".join(f"{why}." for why in said), ""] if said else [])


def _left_out(read) -> List[str]:
    """What of the results file is not in the report, and why (nothing when all of it is)."""
    notes = read.notes()
    return (["**Left out of this report:** " + " ".join(f"{n}." for n in notes), ""]
            if notes else [])


def _left_out_json(read) -> dict:
    """Every line of the results file the report left out: torn, repeated, no measurement."""
    return {"torn_lines": read.torn, "duplicate_lines": read.duplicates,
            "excluded": read.excluded, "repeated_points": read.repeated}


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
