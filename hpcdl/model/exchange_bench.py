"""The exchange at a node count from a short benchmark on that allocation, instead of the model:
``hpcdl tune``'s files (``hpcdl.tuning/1``), which time the workload's own gradient tensors
through the path a training step calls, for each candidate setting of the exchange, at the node
count they were made on.

A study names them by a path with placeholders (``{nodes}``, ``{ranks}``, ``{ranks_per_node}``,
``{network}``, as ``[run] tuning`` does): ``[model] calibrate = {nodes_max = 2, exchange =
"results/tuning/{nodes}n-{network}.json"}``, or ``hpcdl study report --exchange-bench``. A
held-out point takes the median of the candidate its runs ran (the same algorithm, cycle time,
fusion threshold and compression), where the file was made for its node and rank count and the
same gradient bytes, on the processor the records ran on (where both name it); every other
point keeps the model's exchange, and :meth:`Bench.misses` says why.
"""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Dict, Optional, Tuple

from .allreduce import OMPI_ALLREDUCE
from .files import Misses
from ..machine import cpu_of
from .. import checks, costmodel
from ..costmodel import OMPI_ALLREDUCE_NAMES

# the algorithms a tuning file times, Open MPI's number -> the name :mod:`.allreduce` models it by
TIMED = {n: OMPI_ALLREDUCE[n] for n in (3, 4, 6)}

SCHEMA = "hpcdl.tuning/1"
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


class Bench(Misses):
    """The exchange a tuning file measured for a point, looked up by the study's path pattern;
    its misses say why points kept the model's exchange."""

    def __init__(self, pattern: str, root: Optional[Path] = None, machine: Optional[str] = None):
        super().__init__()
        self.pattern = pattern
        self.machine = machine          # the records' (provenance.machine_setting), when one
        self.root = Path(root) if root is not None else Path(".")
        self._files: Dict[Path, Optional[dict]] = {}

    def path(self, nodes: int, network: str) -> Path:
        values = {"nodes": nodes, "ranks": nodes, "ranks_per_node": 1, "network": network}
        p = Path(_PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))),
                                  self.pattern))
        return p if p.is_absolute() else self.root / p

    def _load(self, path: Path) -> Optional[dict]:
        if path not in self._files:
            doc = None
            try:
                doc = json.loads(path.read_text())
            except FileNotFoundError:
                self._miss(f"{path}: no such file")
            except (OSError, ValueError) as exc:
                self._miss(f"{path}: unreadable ({exc})")
            if doc is not None and (not isinstance(doc, dict) or doc.get("schema") != SCHEMA):
                self._miss(f"{path}: not a tuning file ({SCHEMA})")
                doc = None
            why = doc is not None and checks.input_problem(doc, SCHEMA)
            if why:
                self._reject(path, why)
                doc = None
            self._files[path] = doc
        return self._files[path]

    def exchange(self, nodes: int, network: str, compression: str, setting: str,
                 wire: float) -> Optional[Tuple[float, str]]:
        """(seconds, where from) of the candidate ``setting`` for ``compression`` in the file for
        ``nodes`` one-rank nodes at ``network``, whose runs put ``wire`` bytes on the wire; None
        (and a miss noted) where there is none."""
        path = self.path(nodes, network)
        doc = self._matching(path, nodes, compression, wire, network)
        if doc is None:
            return None
        got = _timed(doc, path, compression, setting)
        if got is None:
            self._miss(f"{path}: no candidate '{setting}' for {compression}")
        return got

    def algorithms(self, nodes: int, network: str, compression: str, setting: str,
                   wire: float) -> Dict[str, Tuple[float, str]]:
        """Each allreduce algorithm's (seconds, where from) in the same file, timed with the
        Horovod settings of ``setting`` (its cycle time and fusion), by the name
        :mod:`.allreduce` gives it; the library's choice is not among them."""
        path = self.path(nodes, network)
        doc = self._matching(path, nodes, compression, wire, network)
        rest = setting.split(", ", 1)[1] if ", " in setting else ""
        out = {}
        for number, name in TIMED.items():
            got = None if doc is None else _timed(doc, path, compression,
                                                  f"{OMPI_ALLREDUCE_NAMES[number]}, {rest}")
            if got is not None:
                out[name] = got
        return out

    def small(self, nodes: int, network: str, compression: str, setting: str, wire: float,
              runs: str) -> Dict[str, Tuple[float, str]]:
        """What a small allocation's file measured, as a forecast takes it: each algorithm
        (:meth:`algorithms`), and the candidate ``setting`` itself (:meth:`exchange`) under the
        name of the algorithm ``runs`` that it runs at ``nodes``."""
        got = self.algorithms(nodes, network, compression, setting, wire)
        own = self.exchange(nodes, network, compression, setting, wire)
        if own is not None:
            got[runs] = own
        return got

    def _matching(self, path: Path, nodes: int, compression: str, wire: float,
                  network: str) -> Optional[dict]:
        """The file at ``path`` where it was made for ``nodes`` one-rank nodes, on the records'
        processor, at the point's links ``network``, for gradients of ``wire`` bytes; else None
        and the miss noted."""
        doc = self._load(path)
        if doc is None:
            return None
        made = doc.get("made_for") or {}
        other = checks.made_for_problem(made, [network])
        if other:
            self._reject(path, other)
            return None
        if made.get("nodes") != nodes or made.get("ranks") != nodes:
            self._miss(f"{path}: made for {made.get('nodes')} node(s) and {made.get('ranks')} "
                       f"rank(s), not {nodes} and {nodes}")
            return None
        cpu = made.get("cpu")
        theirs_cpu = cpu_of(self.machine or "")
        if cpu and theirs_cpu and theirs_cpu != cpu:
            self._miss(f"{path}: made on processor '{cpu}', the records ran on '{theirs_cpu}'")
            return None
        theirs = costmodel.wire_bytes(int(doc.get("bytes") or 0) // 4, compression)
        if abs(theirs - wire) > 0.5:
            self._miss(f"{path}: another model's gradients ({theirs:.0f} bytes on the wire for "
                       f"{compression}, the runs' {wire:.0f})")
            return None
        return doc


def _timed(doc: dict, path: Path, compression: str, setting: str) -> Optional[Tuple[float, str]]:
    """(median seconds, where from) of one candidate of a tuning file, None where it has none."""
    times = [t for c in doc.get("candidates") or []
             if c.get("compression") == compression and c.get("name") == setting
             for t in c.get("times_s") or []]
    if not times:
        return None
    rounds = len(times)
    return (statistics.median(times),
            f"{path} ({setting}, {compression}, median of {rounds} round"
            f"{'s' if rounds != 1 else ''}, made {str(doc.get('time', '?'))[:16]})")

