"""What the prediction passes between its modules, typed: the allocation files it reads
(:class:`Files`), an axis's runs by node count (:class:`AxisRuns`), and an axis the model
calibrated (:class:`Calibrated`: its model, its points' predictions, the exchange the tuning
files measured). Only :meth:`Calibrated.as_dict` leaves the model room, as report.json holds it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .bands import Pooled
from .exchange_bench import Bench
from .host_spread import HostSpread
from .loop_share import LoopShare
from .measured import Runs
from .parts import PartModel


@dataclass(frozen=True)
class Files:
    """The allocation's files a prediction draws on (None: not given)."""

    bench: Optional[Bench] = None            # the exchange hpcdl tune timed, by node count
    loop: Optional[LoopShare] = None         # the share of a node Horovod's loop takes
    spread: Optional[HostSpread] = None      # how far the nodes lie apart computing at once
    residuals: Optional[Pooled] = None       # other studies' held-out errors: the band


@dataclass
class AxisRuns:
    """One axis's runs, by node count."""

    axis: str
    by_p: Dict[int, Runs]


@dataclass
class Calibrated(AxisRuns):
    """An axis the model was calibrated on, with every point's prediction."""

    backend: str = ""
    model: Optional[PartModel] = None
    points: List[dict] = field(default_factory=list)
    bench: Dict[int, float] = field(default_factory=dict)   # exchange timed at a held-out count
    anchors: Dict[int, Dict[str, Tuple[float, str]]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"axis": self.axis, "backend": self.backend, "model": self.model.as_dict(),
                "points": self.points}
