"""How far apart the nodes of an allocation compute, by node count, from a short benchmark on it
(``hpcdl bench allocation``, :mod:`hpcdl.bench.allocation`; schema ``hpcdl.host-spread/1``).

A synchronous step waits for its slowest rank, so a held-out point's compute is the ranks'
center times the expected maximum over its p ranks of their spread around it
(:func:`.parts.expected_max`). Two ranks of the calibration runs show less of that spread than
a larger allocation's nodes do (docs/decisions.md), so the benchmark runs the workload's compute
on k nodes at once, each alone, and records each node's median probe over the round's center
exactly as a record's ranks are centred (:func:`.measured.centred`). A held-out point at p nodes
draws from the spread measured at the largest k below p of at most 4 nodes, or of the
calibration's (:func:`at`): what a small allocation measures, held beyond it.

After each pass the first node times one alone, the others idle: how much longer a node
computes while k nodes compute at once than alone is the file's crowd at k (nodes that share a
host's cores, memory or power compute slower together). A held-out point's compute is then
``crowd(p) / crowd(p_cal)`` as long as at the calibration, at least 1 (:func:`crowd_factor`).

Independent nodes show the host's part of the spread only; a coupled file (``made_for.coupled``)
times the ranks of one k-rank training instead, and the report says which kind it drew from.
The file names the machine it measured (processor and machine settings, as records carry them); it
is used only for records of that machine, and :meth:`HostSpread.misses` says why it was not.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, TypeVar

import numpy as np

from .files import MachineFile, small_allocation
from .measured import centred

SCHEMA = "hpcdl.host-spread/1"
T = TypeVar("T")


def deviations(probes: Sequence[Sequence[float]]) -> List[float]:
    """Each node's median probe over the center of all of them (a record's ``rank_dev``)."""
    center, medians = centred(probes)
    return [m / center for m in medians]


class HostSpread(MachineFile):
    """The nodes' spread around their center, by the number of nodes computing at once."""

    schema, kind = SCHEMA, "spread file"

    @property
    def coupled(self) -> bool:
        """Whether the k nodes ran one k-rank training (else k independent one-node ones)."""
        return bool(((self.doc or {}).get("made_for") or {}).get("coupled"))

    def _rounds(self) -> Dict[int, List[Sequence[float]]]:
        """{k: each round's deviations at k nodes} for k > 1 with any round (empty without a
        file)."""
        return {int(k): runs for k, runs in ((self.doc or {}).get("spread") or {}).items()
                if int(k) > 1 and runs}

    def spreads(self) -> Optional[Dict[int, np.ndarray]]:
        """{k: every round's deviations at k nodes} for k > 1, None without a usable file."""
        if self.doc is None:
            return None
        out = {k: np.asarray([d for run in runs for d in run], dtype=float)
               for k, runs in self._rounds().items()}
        if not out:
            self._miss(f"{self.path}: no spread at more than one node")
            return None
        return out

    def crowds(self) -> Optional[Dict[int, float]]:
        """{k: how much longer the first node computed with k nodes computing at once than alone,
        the median over rounds} for k > 1; None where the file did not measure it (files made
        before it did)."""
        got = {int(k): float(np.median(v)) for k, v in
               ((self.doc or {}).get("crowd") or {}).items() if int(k) > 1 and v}
        return got or None

    def round_factors(self, expected_max: Callable[[Sequence[float], int], float]
                      ) -> Dict[str, List[float]]:
        """{k: each round's own expected maximum over k draws} for k > 1, so that a report
        shows a round far from the others (the model pools every round's deviations)."""
        return {str(k): [expected_max(run, k) for run in runs]
                for k, runs in self._rounds().items()}


def crowd_factor(crowds: Optional[Dict[int, float]], p: int, p_cal: int) -> float:
    """How much longer a node computes at ``p`` nodes than at the calibration's ``p_cal`` because
    more nodes compute at once: crowd(p) / crowd(p_cal), each the crowd measured at the largest
    node count k <= p (one node alone: 1), and at least 1: more nodes computing beside it do not
    speed a node up, so a ratio under 1 is the two crowds' noise (docs/decisions.md). 1 without
    crowds, where p <= p_cal, or where a multi-node calibration's count was not measured."""
    if not crowds or p <= p_cal or (p_cal > 1 and p_cal not in crowds):
        return 1.0
    return max(1.0, (at(crowds, p, p_cal) or 1.0)
               / (crowds[p_cal] if p_cal > 1 else 1.0))


def at(spreads: Optional[Dict[int, T]], p: int, p_cal: int = 1) -> Optional[T]:
    """A file's entry for p ranks (the deviations to draw them from, or the crowd) as a small
    allocation measures it (:func:`.files.small_allocation`): its largest count's, held beyond
    it. None where there is no such count (or no entries)."""
    small = small_allocation(spreads, p, p_cal)
    return small[max(small)] if small else None
