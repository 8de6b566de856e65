"""How far apart the nodes of an allocation compute, by node count, from a short benchmark on it
(``hpcdl bench allocation``, :mod:`hpcdl.bench.allocation`; schema ``hpcdl.host-spread/1``).

A synchronous step waits for its slowest rank, so a held-out point's compute is the ranks'
center times the expected maximum over its p ranks of their spread around it
(:func:`.predict.expected_max`). The spread of the calibration runs (at most 2 nodes: two ranks
about their own mean) does not show how wide the nodes of a larger allocation lie: on the box,
eight nodes computing at once put the slowest 1.03–1.13× over the median node (three rounds),
two nodes 1.02× (``results/box-contention.txt``). The benchmark runs the workload's compute on k
nodes at once, each alone (no exchange between them), and records each node's median probe over
the round's center exactly as a record's ranks are centred (:func:`.measured.centred`); a
held-out point at p nodes then draws from the spread measured at the largest k <= p (beyond the
largest k, that k's: the expected maximum still grows with p, but only up to the widest node
measured).

Independent nodes show the host's part of the spread only. With ``--coupled`` the benchmark runs
one k-rank training per k instead (the study's first point, its ranks exchanging), so each rank's
probes time its compute beside Horovod's loop agreeing with the k-1 others and Open MPI waiting,
as a held-out point's do; the file says which it measured (``made_for.coupled``) and the report
says which it drew from. On the box's 0.2-core nodes the training's own ranks lie wider apart:
the slowest rank's median 1.12x the median rank's at 8 nodes in the studies' records, against
1.03-1.05x for eight independent nodes.

The file names the machine it measured (processor and box settings, as records carry them); it
is used only for records of that machine, and :meth:`HostSpread.misses` says why it was not.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from .loop_share import MachineFile
from .measured import centred

SCHEMA = "hpcdl.host-spread/1"


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

    def round_factors(self, expected_max: Callable[[Sequence[float], int], float]
                      ) -> Dict[str, List[float]]:
        """{k: each round's own expected maximum over k draws} for k > 1, so that a report
        shows a round far from the others (the model pools every round's deviations)."""
        return {str(k): [expected_max(run, k) for run in runs]
                for k, runs in self._rounds().items()}


def at(spreads: Optional[Dict[int, np.ndarray]], p: int) -> Optional[np.ndarray]:
    """The deviations to draw p ranks from: measured at the largest k <= p, None where no k > 1
    is <= p (or no spreads)."""
    ks = [k for k in (spreads or {}) if k <= p]
    return spreads[max(ks)] if ks else None
