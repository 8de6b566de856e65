"""The named networks' exchange, priced from SimGrid SMPI runs on a platform of each network.

Each named network (:data:`hpcdl.costmodel.PRESETS`) is a two-level fat tree of full bisection
with the network's published link rate and latency. ``networks.json`` holds, per network, what
one more step of m bytes adds to an MPI ring on it (SMPI's simulated time over rings of 2, 4
and 8 ranks): within a leaf switch ("near") and in a ring over two leaves ("far"), linear in m
between the sizes where SMPI's network model changes its latency and bandwidth factors, plus a
fixed cost a call. An exchange is :func:`.allreduce.exchange_time` over those prices: the
algorithm's messages, each at its span's price. ``python -m benchmarks.network_prices`` makes
the table; ``python -m benchmarks.network_check`` measures its error against SMPI at 16-1024
ranks (``results/network-check.txt``). SMPI itself is not needed to read it. Numpy-free."""
from __future__ import annotations

import bisect
import json
from functools import lru_cache
from pathlib import Path
from typing import Callable, Dict, List, Optional

from .allreduce import exchange_time

TABLE = Path(__file__).with_name("networks.json")


class Prices:
    """One network's prices: ``near(m)`` and ``far(m)`` (s a ring step of m bytes adds), the
    nodes a leaf switch holds, the fixed cost of a call."""

    def __init__(self, doc: dict):
        self.leaf = int(doc["leaf"])
        self.fixed = float(doc["fixed_s"])
        self.platform = doc.get("platform", "")
        self.near = _piecewise(doc["near"])
        self.far = _piecewise(doc["far"])


def _piecewise(rows: List[List[float]]) -> Callable[[float], float]:
    """``rows`` as [[from bytes, a, b], ...] ascending: a + b·m on [from, next from)."""
    starts = [r[0] for r in rows]

    def price(m: float) -> float:
        _, a, b = rows[max(0, bisect.bisect_right(starts, m) - 1)]
        return a + b * m
    return price


@lru_cache(maxsize=1)
def _doc() -> dict:
    return json.loads(TABLE.read_text()) if TABLE.exists() else {}


def _table() -> Dict[str, dict]:
    return _doc().get("networks", {})


def prices(key: str) -> Optional[Prices]:
    """The SMPI prices of the named network ``key``, None where the table has none."""
    doc = _table().get(key)
    return Prices(doc) if doc else None


def exchange(key: str, algorithm: str, nbytes: float, p: int) -> Optional[float]:
    """Seconds of one allreduce of ``nbytes`` on ``p`` nodes (one rank each, ranks in order over
    the leaves) of the named network ``key``, None where the table has no prices for it."""
    pr = prices(key)
    if pr is None or p <= 1:
        return None if pr is None else 0.0
    return exchange_time(algorithm, nbytes, p, pr.near, pr.far, pr.leaf, pr.fixed)


def source() -> str:
    """Where the prices came from, in a few words (the table's own line)."""
    return str(_doc().get("source", ""))
