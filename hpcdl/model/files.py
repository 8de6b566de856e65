"""The allocation's files the model reads beside the records (the exchange ``hpcdl tune`` timed,
the loop and spread files ``hpcdl bench allocation`` made): what they share. Each is taken only
where the records ran on the machine it measured and its figures pass the input files' rule
(:func:`hpcdl.checks.input_problem`); why not is kept, for the report to say."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, TypeVar

from .. import checks
from ..costmodel import SMALL

T = TypeVar("T")


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


def small_allocation(entries: Optional[Dict[int, T]], p: int, p_cal: int = 1) -> Dict[int, T]:
    """The entries of a by-node-count table a point at ``p`` nodes may draw on: what a small
    allocation measures, the counts below p and of at most :data:`hpcdl.costmodel.SMALL` nodes
    (or the calibration's ``p_cal``, where larger). Nothing measured at p or above enters p's
    prediction."""
    upto = max(SMALL, p_cal)
    return {k: v for k, v in (entries or {}).items() if k < p and k <= upto}
