"""What Horovod's background loop takes from a rank's compute, by node count, from a short
benchmark on the allocation (``hpcdl bench allocation``, :mod:`hpcdl.bench.allocation`; schema
``hpcdl.loop-cpu/1``).

A rank's main thread computes while Horovod's loop wakes every cycle and, once the rank has
peers, agrees with them on what is ready, Open MPI spinning while it waits. On a node of a
fraction of a core that loop's CPU comes out of the compute, and it grows with the node count
(docs/decisions.md). The model's compute carries the
share of its largest calibrated node count in its k; a held-out point at p nodes is then
``(1 - s(p_cal)) / (1 - s(p))`` as long, at least 1, with s the median rank's share at the
axis's cycle time.

Between the node counts the file measured the share is interpolated in log2 p; beyond the
largest it is held at that count's (:func:`share_at`).

The file names the machine it measured (processor and machine settings, as records carry them); it
is used only for records of that machine, and :meth:`LoopShare.misses` says why it was not.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List, Optional

from .. import checks, costmodel

SCHEMA = "hpcdl.loop-cpu/1"


class Misses:
    """Why an allocation's file was not taken (each reason once, in order), and which files the
    input files' rule left out (:func:`hpcdl.checks.input_problem`): what a report says of it."""

    def __init__(self):
        self._misses: Dict[str, None] = {}
        self.rejected: List[str] = []

    def _miss(self, why: str) -> None:
        self._misses[why] = None

    def _reject(self, path, why: str) -> None:
        """Leave the file at ``path`` out for ``why``, said once among the misses too."""
        if f"{path}: {why}" not in self.rejected:
            self.rejected.append(f"{path}: {why}")
        self._miss(f"{path}: {why}; left out")

    def misses(self) -> List[str]:
        return list(self._misses)

    def notes(self) -> dict:
        """The misses, and the files the input files' rule left out where it left any."""
        return {"misses": self.misses(), **({"rejected": self.rejected} if self.rejected else {})}


class MachineFile(Misses):
    """A short benchmark's JSON file of ``schema``, made for one machine (processor and machine
    settings, ``made_for.machine``): ``doc`` only where the records ran on that machine, else
    None and a miss that says why. A subclass names its ``schema`` and ``kind`` (the words a miss
    uses for it)."""

    schema: str
    kind: str

    def __init__(self, path: str, machine: Optional[str]):
        super().__init__()
        self.path = path
        self.doc: Optional[dict] = None
        try:
            doc = json.loads(Path(path).read_text())
        except FileNotFoundError:
            self._miss(f"{path}: no such file")
            return
        except (OSError, ValueError) as exc:
            self._miss(f"{path}: unreadable ({exc})")
            return
        if not isinstance(doc, dict) or doc.get("schema") != self.schema:
            self._miss(f"{path}: not a {self.kind} ({self.schema})")
            return
        made = (doc.get("made_for") or {}).get("machine")
        if machine is None:
            self._miss(f"{path}: the records come from more than one machine")
            return
        if made != machine:
            self._miss(f"{path}: measured on '{made}', the records ran on '{machine}'")
            return
        # the links are not compared: the file times compute, which they do not set (the
        # machine string names every other setting)
        why = checks.input_problem(doc, self.schema)
        if why:
            self._reject(path, why)
            return
        self.doc = doc

    @property
    def source(self) -> str:
        made = (self.doc or {}).get("made_for") or {}
        return (f"{self.path} ({made.get('rounds', '?')} round(s), links "
                f"{made.get('link_rate', '?')}, made {str((self.doc or {}).get('time', '?'))[:16]})")


class LoopShare(MachineFile):
    """The loop's share of a computing rank's CPU, by cycle time and node count."""

    schema, kind = SCHEMA, "loop file"

    def shares(self, setting: str) -> Optional[Dict[int, float]]:
        """{nodes: the median rank's share} at the cycle time of ``setting`` (a name
        :func:`hpcdl.costmodel.setting_name` gave), None (and a miss) where the file has none."""
        if self.doc is None:
            return None
        cycle = costmodel.setting_cycle(setting)
        table = (self.doc.get("shares") or {}).get(cycle)
        if not table:
            self._miss(f"{self.path}: no shares at a {cycle} ms cycle")
            return None
        return {int(n): float(v["median"]) for n, v in table.items()}


def share_at(shares: Dict[int, float], p: int) -> float:
    """The loop's share at ``p`` nodes: measured, else linear in log2 p between the measured node
    counts either side, else (beyond them) the nearest measured one's: the share grows more
    slowly as p grows, and is not extrapolated."""
    if p in shares:
        return shares[p]
    ns = sorted(shares)
    if p < ns[0]:
        return shares[ns[0]]
    if p > ns[-1]:
        return shares[ns[-1]]
    hi = next(n for n in ns if n > p)
    lo = max(n for n in ns if n < p)
    w = (math.log2(p) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return shares[lo] + w * (shares[hi] - shares[lo])


def factor(shares: Optional[Dict[int, float]], p: int, p_cal: int) -> float:
    """How much longer a rank computes at ``p`` nodes than at the calibration's ``p_cal``
    because the loop takes more of its node (:func:`share_at` each), and at least 1: more peers
    do not make the loop take less, so a share under the calibration's is the two shares' noise
    (docs/decisions.md). 1 without shares, where the calibration's node count was not measured,
    or where p <= p_cal."""
    if not shares or p <= p_cal or p_cal not in shares:
        return 1.0
    return max(1.0, (1.0 - shares[p_cal]) / (1.0 - share_at(shares, p)))
