"""Where a study's records come from, whether they may be pooled, and whether runs overlapped.

A figure pooled over records is one measurement only when the records were made by the same code
(git's tree of ``hpcdl/``; older records name only their commit) on the same software under it
(TensorFlow, Horovod with its patches, the MPI library: a study continued after a change of
stack would otherwise pool two), from the same study file (its SHA-256, which the study
declares in every record), on the same processor (its model and vector units, which the
manifest names: one host name can stand for machines several times apart in speed) and on a
machine of the same settings where it sets them (:func:`hpcdl.machine.setting`; its link rate is
the study's network axis, so it may differ between points, never within one). :func:`check`
groups the records by that key and refuses more than one group
unless told to pool them anyway (``--allow-mixed``); either way :attr:`Provenance.lines` says
what was pooled.

Runs that share a machine (the nodes of an instance on one host share its cores; local runs
share the host) must not run at the same time, or each slows the other. A run's interval is the
record's
``manifest.started`` (the job attempt's or the process's start) to the record's ``time``; a record
without ``started`` gives only its timed training (``time`` − ``wall_time_s``), a lower bound.
:attr:`Provenance.overlaps` lists the pairs whose intervals intersect. Standard library only.
"""
from __future__ import annotations

import datetime as _dt
import functools
import re
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["Provenance", "Origin", "check", "code_of", "software_of", "machine_setting", "cpu_of",
           "interval", "MixedRecords"]

# the one string of the processor and the machine's settings: the machine's interface owns it
from .. import machine as _machine
from ..machine import cpu_of, setting as machine_setting  # noqa: F401


class MixedRecords(ValueError):
    """The records come from different code, software, study files, processors or machine
    settings."""


def code_of(rec: dict) -> str:
    """The code that made a record: hpcdl/'s tree, else (older records) the whole commit."""
    man = rec.get("manifest") or {}
    if man.get("code_tree"):
        return f"hpcdl/ tree {man['code_tree'][:12]}" + (
            "-dirty" if str(man["code_tree"]).endswith("-dirty") else "")
    if man.get("git_commit"):
        return f"commit {str(man['git_commit'])[:12]}" + (
            "-dirty" if str(man["git_commit"]).endswith("-dirty") else "")
    return "unknown code"


# the MPI library's name and version in either form a record gives (mpi4py's library version
# line, "Open MPI v4.1.4, package: ...", or mpirun's, "mpirun (Open MPI) 4.1.4")
_MPI = re.compile(r"(Open MPI|MPICH|Intel\(R\) MPI Library|MVAPICH2?)\D*?(\d+(?:\.\d+)*)")


def software_of(rec: dict) -> str:
    """The software under hpcdl/ that made a record, by version: TensorFlow, Horovod (with the
    patches it was built with) and the MPI library ("" where the record names none)."""
    v = (rec.get("manifest") or {}).get("versions") or {}
    return _software(*(str(v[k]) if v.get(k) else "" for k in
                       ("tensorflow", "horovod", "horovod_patches", "mpi")))


@functools.lru_cache(maxsize=64)       # a report's records name a few stacks, thousands of times
def _software(tf: str, horovod: str, patches: str, mpi_line: str) -> str:
    parts = [f"TensorFlow {tf}"] if tf else []
    if horovod:
        parts.append(f"Horovod {horovod}" + (f" + {patches}" if patches else ""))
    mpi = _MPI.search(mpi_line)
    if mpi:
        parts.append(f"{mpi.group(1)} {mpi.group(2)}")
    return ", ".join(parts)


def study_hash(rec: dict) -> str:
    h = (rec.get("declared") or {}).get("study_sha256")
    return f"study file {h[:12]}" if h else "no study file"


def _parse(stamp) -> Optional[_dt.datetime]:
    try:
        t = _dt.datetime.fromisoformat(str(stamp))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def interval(rec: dict) -> Optional[Tuple[_dt.datetime, _dt.datetime, bool]]:
    """(start, end, whole) of a run: ``whole`` False when only its timed training is known."""
    end = _parse(rec.get("time"))
    if end is None:
        return None
    start = _parse((rec.get("manifest") or {}).get("started"))
    if start is not None:
        return start, end, True
    wall = (rec.get("metrics") or {}).get("wall_time_s")
    if not isinstance(wall, (int, float)):
        return None
    return end - _dt.timedelta(seconds=float(wall)), end, False


def _point_id(rec: dict) -> str:
    return str((rec.get("point") or {}).get("id") or rec.get("tag") or "?")


@dataclass
class Provenance:
    """What a report pooled: its groups (code, study file, machine, software → records), the
    machine instances, and the runs that overlapped in time."""

    groups: Dict[Tuple[str, str, str, str], int]
    instances: Dict[str, int] = field(default_factory=dict)
    overlaps: List[dict] = field(default_factory=list)
    estimated: int = 0                # records whose start is only their timed training's
    allowed: bool = False             # several groups pooled because the user said so

    @property
    def mixed(self) -> bool:
        return len(self.groups) > 1

    def differences(self) -> List[str]:
        """What differs between the groups: one phrase per part of the key that differs."""
        out = []
        unnamed = ("", "", "unnamed processor", "software not named")
        for i, what in enumerate(("code", "study file", "machine", "software")):
            values = Counter()
            for key, n in self.groups.items():
                values[key[i] or unnamed[i]] += n
            if len(values) > 1:
                out.append(f"{what}: " + "; ".join(f"{v} ({n} record(s))"
                                                   for v, n in sorted(values.items())))
        return out

    def lines(self) -> List[str]:
        """The report's words: what was pooled, and what overlapped."""
        out = []
        if self.mixed:
            out.append("- **mixed records** (pooled because --allow-mixed was given): "
                       + " / ".join(self.differences()))
        # the versions are listed with the report's other facts; here only when they differ
        several = len({key[3] for key in self.groups}) > 1
        for (code, study, setting, software), n in sorted(self.groups.items()):
            out.append(f"- {n} record(s): {code}, {study}" + (f", {setting}" if setting else "")
                       + (f", {software or 'software not named'}" if several else ""))
        if self.instances:
            out.append(f"- {len(self.instances)} machine instance(s): " + ", ".join(
                f"{b} ({n})" for b, n in sorted(self.instances.items())))
        if self.overlaps:
            shown = ", ".join(f"{o['a']} and {o['b']} ({o['seconds']:.0f} s)"
                              for o in self.overlaps[:4])
            more = f", and {len(self.overlaps) - 4} more" if len(self.overlaps) > 4 else ""
            out.append(f"- **{len(self.overlaps)} pair(s) of runs overlapped in time** on a "
                       f"machine they shared, so each may have slowed the other: {shown}{more}")
        else:
            out.append("- no two runs overlapped in time on a machine they shared"
                       + (f" ({self.estimated} record(s) give only their timed training, so an "
                          "overlap of their start-up would not show)" if self.estimated else ""))
        return out

    def as_dict(self) -> dict:
        return {"groups": [{"code": k[0], "study_file": k[1], "machine": k[2], "software": k[3],
                            "records": n}
                           for k, n in sorted(self.groups.items())],
                "mixed": self.mixed, "allowed": self.allowed, "differences": self.differences(),
                "instances": dict(sorted(self.instances.items())), "overlaps": self.overlaps,
                "estimated_intervals": self.estimated}


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_US = _dt.timedelta(microseconds=1)


class Origin:
    """What :func:`check` needs of each record, gathered as records are read: the count of each
    (code, study file, machine), of each machine instance, and each run's interval (µs since
    1970, and the start's UTC offset), machine and point."""

    def __init__(self):
        self.groups: Counter = Counter()
        self.instances: Counter = Counter()
        self.starts, self.ends = array("q"), array("q")
        self.offsets, self.on = array("i"), array("i")   # start's UTC offset (s), machine
        self.ids: List[str] = []
        self.machines: List[tuple] = []
        self.estimated = 0
        self._machine: Dict[tuple, int] = {}

    def add(self, r: dict) -> None:
        self.groups[(code_of(r), study_hash(r), machine_setting(r), software_of(r))] += 1
        inst = _machine.instance(r)
        if inst is not None:
            self.instances[inst] += 1
        iv = interval(r)
        if iv is None:
            return
        self.estimated += not iv[2]
        self.starts.append((iv[0] - _EPOCH) // _US)
        self.ends.append((iv[1] - _EPOCH) // _US)
        self.offsets.append(int(iv[0].utcoffset().total_seconds()))
        self.on.append(self._index(_machine.shared(r)))
        self.ids.append(_point_id(r))

    def _index(self, m: tuple) -> int:
        """The number of machine ``m`` (each kept once)."""
        if m not in self._machine:
            self._machine[m] = len(self.machines)
            self.machines.append(m)
        return self._machine[m]

    def merge(self, other: "Origin") -> None:
        self.groups.update(other.groups)
        self.instances.update(other.instances)
        self.on.extend(self._index(other.machines[i]) for i in other.on)
        self.starts.extend(other.starts)
        self.ends.extend(other.ends)
        self.offsets.extend(other.offsets)
        self.ids += other.ids
        self.estimated += other.estimated

    def overlaps(self) -> Tuple[List[dict], int]:
        order = sorted(range(len(self.starts)), key=self.starts.__getitem__)
        out = []
        for i, a in enumerate(order):
            e0, m0 = self.ends[a], self.machines[self.on[a]]
            for j in range(i + 1, len(order)):
                b = order[j]
                s1 = self.starts[b]
                if s1 >= e0:
                    break
                m1 = self.machines[self.on[b]]
                if m0[0] == m1[0] and m0[1] & m1[1]:
                    when = (_EPOCH + s1 * _US).astimezone(
                        _dt.timezone(_dt.timedelta(seconds=self.offsets[b])))
                    out.append({"a": self.ids[a], "b": self.ids[b],
                                "seconds": (min(e0, self.ends[b]) - s1) / 1e6,
                                "from": when.isoformat()})
        return out, self.estimated

    def result(self, allow_mixed: bool = False) -> "Provenance":
        """The records' provenance; raises :class:`MixedRecords`, saying what differs, when
        they are not alike and ``allow_mixed`` is False."""
        pairs, estimated = self.overlaps()
        prov = Provenance(dict(self.groups), dict(self.instances), pairs, estimated,
                          allowed=allow_mixed)
        if prov.mixed and not allow_mixed:
            raise MixedRecords("the records were not made alike, so pooling them would mix "
                               "measurements: " + " / ".join(prov.differences())
                               + ". Report one kind at a time (move the others to another "
                               "file), or pass --allow-mixed and the report lists what it mixed")
        return prov


def check(recs: Sequence[dict], allow_mixed: bool = False) -> Provenance:
    """The records' provenance; raises :class:`MixedRecords`, saying what differs, when they
    come from different code, software, study files, processors or machine settings and
    ``allow_mixed`` is False."""
    origin = Origin()
    for r in recs:
        origin.add(r)
    return origin.result(allow_mixed)
