"""Reading a results file for a report: the records of the one study asked for (or the one the
file names), each folded into its study's :class:`hpcdl.analysis.Digest` as it is read; a large
file is read in parts by one process per core and the parts merged."""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from collections import Counter
from pathlib import Path
from typing import Dict, Optional

from .. import analysis, checks, records
from ..errors import UserError


def _resolve(src) -> Path:
    src = Path(src)
    return src / "runs.jsonl" if src.is_dir() else src


def _pick_study(names: Counter, study_name: Optional[str]) -> Optional[str]:
    """The study a report is of: the one asked for, else the one study the records name."""
    if study_name is None:
        named = [n for n in names if n]
        if len(named) > 1:
            raise UserError(f"records of several studies ({', '.join(sorted(named))}): "
                            "pick one with --study NAME")
        study_name = named[0] if named else None
    return study_name


class _Studies:
    """The train records of a results file as they are read, one :class:`analysis.Digest`
    per study they name (a report is of one)."""

    def __init__(self, study_name: Optional[str]):
        self.study_name = study_name
        self.digests: Dict[Optional[str], analysis.Digest] = {}

    def add(self, rec: dict) -> None:
        if rec.get("kind", "train") != "train":
            return
        name = rec.get("study")
        if self.study_name is not None and name != self.study_name:
            return
        digest = self.digests.get(name)
        if digest is None:
            digest = self.digests[name] = analysis.Digest()
        digest.add(rec)

    def merge(self, other: "_Studies") -> None:
        for name, d in other.digests.items():
            if name in self.digests:
                self.digests[name].merge(d)
            else:
                self.digests[name] = d

    def pick(self) -> Optional[analysis.Digest]:
        names = Counter({n: d.records for n, d in self.digests.items()})
        picked = _pick_study(names, self.study_name)
        if picked is None and len(self.digests) == 1:
            return next(iter(self.digests.values()))
        return self.digests.get(picked)


PARALLEL_BYTES = 32 << 20   # a results file this large is read by one process per core


def _workers(runs: Path, given: Optional[int]) -> int:
    """How many processes read ``runs``: as given, else one per core (at most 4) for a large
    file, else one."""
    if given:
        return max(1, given)
    if runs.stat().st_size < PARALLEL_BYTES:
        return 1
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _read_part(runs: Path, study_name: Optional[str], part) -> tuple:
    studies = _Studies(study_name)
    read = checks.scan(runs, checks.train_record_problem, studies.add, records.slim_decoder(),
                       part, point=checks.point_of)
    return read, studies


def _read(runs: Path, study_name: Optional[str], workers: Optional[int] = None):
    """(what was left out, the records as :class:`_Studies`), read once: by one process, or
    for a large file by several, each over a part and all merged in the file's order."""
    workers = _workers(runs, workers)
    read, studies = (_read_parts(runs, study_name, workers) if workers > 1 else
                     _read_part(runs, study_name, None))
    read.hashes = read.points = set()        # needed only while reading
    return read, studies


def _read_parts(runs: Path, study_name: Optional[str], workers: int):
    cuts = checks.parts(runs, workers)
    with ProcessPoolExecutor(len(cuts), mp_context=multiprocessing.get_context("fork")) as ex:
        done = list(ex.map(_read_part, [runs] * len(cuts), [study_name] * len(cuts), cuts))
    read, studies = done[0]
    for more, theirs in done[1:]:
        if not (read.hashes.isdisjoint(more.hashes) and read.points.isdisjoint(more.points)):
            # a line, or a point, repeats one of an earlier part (a file appended to itself):
            # read it whole, so that the repeat counts once, as one reader counts it
            return _read_part(runs, study_name, None)
        read.hashes |= more.hashes
        read.points |= more.points
        read.repeated += more.repeated
        read.torn += more.torn
        read.duplicates += more.duplicates
        read.excluded += more.excluded
        studies.merge(theirs)
    return read, studies
