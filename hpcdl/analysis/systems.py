"""The asynchronous and pipeline runs' own figures, per configuration."""
from __future__ import annotations

import math
from typing import Dict, List

import numpy as np

from .reading import Systems


def systems_of(acc: Systems) -> List[dict]:
    """Per configuration of asynchronous or pipeline runs, their own figures pooled over the
    repeats: updates per second, the staleness histogram and its mean, p95 and max, the largest
    lead and the time held by the bound; the bubble against GPipe's and the bytes per step."""
    out = []
    for (axis, ranks), g in sorted(acc.groups.items()):
        row = {"axis": axis, "ranks": ranks, "runs": g["runs"]}
        asy = g["async"]
        if asy:
            hist: Dict[str, int] = {}
            for a in asy:
                for k, n in a["hist"].items():
                    hist[k] = hist.get(k, 0) + int(n)
            vals = sorted(int(k) for k, n in hist.items() for _ in range(n))
            row.update(kind="async", staleness_bound=asy[0]["staleness_bound"],
                       workers=asy[0]["workers"],
                       updates_per_s=float(np.median([a["updates_per_s"] for a in asy])),
                       staleness_hist=dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
                       staleness_mean=float(np.mean(vals)) if vals else None,
                       staleness_p95=vals[min(len(vals) - 1, max(0, math.ceil(0.95 * len(vals))
                                                                 - 1))] if vals else None,
                       staleness_max=vals[-1] if vals else None,
                       lead_max=max(a["lead_max"] for a in asy),
                       held_s=float(np.median([a["held_s"] for a in asy])))
        pipe = g["pipeline"]
        if pipe:
            exp = [p["bubble_expected"] for p in pipe if p.get("bubble_expected") is not None]
            row.update(kind="pipeline", stages=pipe[0]["stages"],
                       micro_batches=pipe[0]["micro_batches"],
                       bubble=float(np.median([p["bubble"] for p in pipe])),
                       bubble_theory=pipe[0]["bubble_theory"],
                       bubble_expected=float(np.median(exp)) if exp else None,
                       bytes_per_step=int(np.median([p["bytes_per_step"] for p in pipe])),
                       ring_bytes_per_rank=pipe[0]["ring_bytes_per_rank_at_k"])
        out.append(row)
    return out

