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

Only what a small allocation measures enters a prediction (:func:`.files.small_allocation`):
between its counts the share is interpolated in log2 p, beyond the largest it is held at that
count's (:func:`share_at`).

The file names the machine it measured (processor and machine settings, as records carry them); it
is used only for records of that machine, and :meth:`LoopShare.misses` says why it was not.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

from .. import costmodel
from .files import MachineFile, small_allocation

SCHEMA = "hpcdl.loop-cpu/1"


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


    def growth(self, setting: str) -> Optional[Dict[int, float]]:
        """{nodes: how much longer a node's pass took beside a live exchange of that many nodes
        than alone} at the cycle time of ``setting``; None where the file did not measure it
        (files made before it did: the shares then stand in)."""
        if self.doc is None:
            return None
        table = (self.doc.get("growth") or {}).get(costmodel.setting_cycle(setting))
        return {int(n): float(v["ratio"]) for n, v in table.items()} if table else None

    def windows(self, setting: str) -> Optional[Dict[int, float]]:
        """{nodes: the share of a pass the allocation's training steps hid exchange behind} at
        the cycle time of ``setting``; None where the file did not measure it (files made
        before it did: the model's rule for the calibration's share then stands)."""
        if self.doc is None:
            return None
        table = (self.doc.get("window") or {}).get(costmodel.setting_cycle(setting))
        return {int(n): float(v["share"]) for n, v in table.items()} if table else None


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
    (docs/decisions.md); the shares at p or above, or beyond a small allocation and the
    calibration, are left out.
    1 without shares, where the calibration's node count was not measured, or where p <= p_cal."""
    small = small_allocation(shares, p, p_cal)
    if p <= p_cal or p_cal not in small:
        return 1.0
    return max(1.0, (1.0 - small[p_cal]) / (1.0 - share_at(small, p)))
