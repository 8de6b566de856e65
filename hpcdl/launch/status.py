"""What became of a study's submitted jobs (``hpcdl study status``): per point, its latest job's
state, asked of the scheduler that runs it, and whether the point is recorded; for a point that
did not run for want of its tuning file, why, in one line. Reads the submission log
(``jobs/submitted.jsonl``) that :mod:`hpcdl.launch.submit` and a Grid Engine tune job write.
Standard library only.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from . import batch
from .scheduler import ACTIVE_STATES
from .prep import ALLOCATION_PREFIX, TUNE_PREFIX
from .. import records
from ..errors import UserError
from ..records import recorded_point

__all__ = ["study_status", "latest_jobs", "unfinished"]


def _submissions(jobs_dir: Path) -> List[dict]:
    log = jobs_dir / "submitted.jsonl"
    if not log.is_file():
        return []
    subs = []
    try:
        text = log.read_text()
    except OSError as exc:
        raise UserError(f"{log}: cannot be read ({exc.strerror or exc})") from None
    for n, line in enumerate(text.splitlines(), 1):
        try:
            sub = json.loads(line)
        except ValueError:
            continue                    # a line torn by a crash while it was written
        if not (isinstance(sub, dict) and isinstance(sub.get("steps", []), list)
                and all(isinstance(st, dict) for st in sub.get("steps", []))):
            raise UserError(f"{log}, line {n}: not a submission (a JSON object whose steps are "
                            "objects, as 'hpcdl study submit' writes it); remove the line")
        subs.append(sub)
    return subs


def latest_jobs(jobs_dir: Path, files: Optional[Dict[str, str]] = None,
                deleted: Optional[set] = None):
    """The latest job submitted for each point, and for the report; into ``files`` the
    tuning file each one's latest job reads (a point) or makes (a tune job); into ``deleted``
    the jobs a Grid Engine tune job deleted before they started (it made no file for them)."""
    latest: Dict[str, tuple] = {}
    report_id = None
    for sub in _submissions(jobs_dir):
        sched = sub.get("scheduler") or "slurm"       # logs written before Grid Engine: Slurm's
        gone = sub.get("deleted")
        if deleted is not None and isinstance(gone, dict) and isinstance(gone.get("jobs"), list):
            deleted.update((sched, str(j)) for j in gone["jobs"])
        for st in sub.get("steps", []):
            if st.get("job_id"):
                latest[str(st["point"])] = (sched, str(st["job_id"]))
                if files is not None:
                    files[str(st["point"])] = str(st.get("tuning") or "")
        if (sub.get("report") or {}).get("job_id"):
            report_id = (sched, str(sub["report"]["job_id"]))
    return latest, report_id


def _missing_file(pid: str, row: dict, files: Dict[str, str], rows: Dict[str, dict],
                  jobs_dir: Path) -> Optional[str]:
    """Why a point that read a tuning file did not run, in one line with the fix: the file is
    missing and the job that was to make it ended without it."""
    path = files.get(pid) or ""
    if row["state"] not in ("CANCELLED", "FAILED", "DELETED") or not path \
            or path.startswith("allocation:") or Path(path).is_file():
        return None
    maker = next((rows[t] for t, f in files.items() if f == path and t.startswith(TUNE_PREFIX)
                  and t in rows), None)
    by = (f"its job {maker['job_id']} ({maker['point']}) ended {maker['state']} without it"
          if maker else "no job of this study makes it")
    return (f"not run: its tuning file {path} is missing ({by}); see the job's output in "
            f"{jobs_dir}, then 'hpcdl study submit' again")


def study_status(results_dir: Path, point_ids: Optional[Sequence[str]] = None,
                 study_name: Optional[str] = None) -> List[dict]:
    """One row per tuning job (``--tune``), per point (latest submission of each) and one for
    the report; a tuning job's ``recorded`` is None (it makes a file, not a record)."""
    results_dir = Path(results_dir)
    files: Dict[str, str] = {}
    deleted: set = set()
    latest, report_id = latest_jobs(results_dir / "jobs", files, deleted)
    recorded = {recorded_point(rec, study_name or rec.get("study"))
                for rec in records.iter_records(results_dir / "runs.jsonl")} - {None}
    tunes = sorted(p for p in latest if p.startswith((TUNE_PREFIX, ALLOCATION_PREFIX)))
    order = tunes + (list(point_ids) if point_ids is not None
                     else sorted(p for p in latest if p not in tunes))
    ids = [latest[p] for p in order if p in latest] + ([report_id] if report_id else [])
    states = batch.job_states(ids) if ids else {}
    rows = []
    for pid in order + (["report"] if report_id else []):
        jid = report_id if pid == "report" else latest.get(pid)
        st = states.get(jid) if jid else None
        rows.append({"point": pid, "job_id": jid[1] if jid else None,
                     "scheduler": jid[0] if jid else None,
                     "state": st.state if st else ("NOT SUBMITTED" if not jid else
                                                   "DELETED" if jid in deleted else "UNKNOWN"),
                     "exit_code": st.exit_code if st else None,
                     "reason": st.reason if st else None,
                     "attempts": st.attempts if st else 0,
                     "history": st.history if st else [],
                     "source": st.source if st else None,
                     "recorded": None if pid in tunes else (results_dir / "report.md").is_file()
                                 if pid == "report" else pid in recorded})
    by_id = {r["point"]: r for r in rows}
    for r in rows:
        if r["point"] not in tunes:
            r["reason"] = _missing_file(r["point"], r, files, by_id,
                                        results_dir / "jobs") or r["reason"]
    return rows


def unfinished(results_dir: Path) -> List[tuple]:
    """The study's latest jobs (each point's, each tune's, the report's) that have not ended:
    neither ended as their scheduler tells nor deleted unstarted by a tune job. Reads the
    submission log and the schedulers only, not the records: cheap to poll."""
    deleted: set = set()
    latest, report_id = latest_jobs(Path(results_dir) / "jobs", None, deleted)
    ids = [j for j in list(latest.values()) + [report_id] if j and j not in deleted]
    states = batch.job_states(ids) if ids else {}
    return [j for j in ids if j not in states or states[j].state in ACTIVE_STATES]
