"""Figures as a person reads them: a time with its unit and three significant digits."""
from __future__ import annotations

import math
from typing import Optional


def seconds(s: Optional[float]) -> str:
    """A time with its unit and three significant digits: '0.530 ms', '891 ms', '14.3 s'."""
    if s is None or not math.isfinite(s):
        return "-"
    if s == 0:
        return "0 s"
    for unit, scale in (("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        v = abs(s) / scale
        if v >= 1 or unit == "µs" and v < 1:
            if v < 1000 or unit == "s":
                text = f"{v:.0f}" if v >= 100 else f"{v:#.3g}"
                return f"{'-' if s < 0 else ''}{text} {unit}"
    return f"{s:#.3g} s"
