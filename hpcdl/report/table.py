"""A table of the report: one row per line, its Markdown, and its CSV with a ``#`` header of
metadata (the command that regenerates it first); number formatting shared by every section."""
from __future__ import annotations

import csv
import io
import math
from typing import List, Optional, Sequence

HOW = "docs/reading-a-report.md"     # how each figure is made, section by section


# --- formatting -----------------------------------------------------------------------------------

def _f(x, digits=3, pct=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if pct:
        return f"{x * 100:.1f}%"
    if isinstance(x, int):
        return str(x)
    ax = abs(x)
    if ax != 0 and (ax >= 1e5 or ax < 1e-3):
        return f"{x:.{digits}g}"
    return f"{x:.{digits}f}" if ax < 10 else f"{x:.1f}"


def stable(x):
    """``x`` with every float kept to 10 significant digits (recursively through dicts, lists and
    tuples), for the CSV and JSON files: a least-squares fit's last bits differ between machines'
    numpy builds, and a committed report must render the same wherever it is rendered again.
    Below 1e-12 in magnitude a float is rounding left over from a difference that is zero (a
    fitted point's error: 2e-16 on one machine, -1e-16 on another; no time, byte count or ratio
    the report shows is that small), and is written as 0."""
    if isinstance(x, float):
        if abs(x) < 1e-12:
            return 0.0
        return float(f"{x:.10g}") if math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: stable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [stable(v) for v in x]
    return x


def _ms(x):
    """Seconds as milliseconds to four significant digits, never in e-notation."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    v = x * 1e3
    return (f"{v:.0f}" if abs(v) >= 1000 else f"{v:.1f}" if abs(v) >= 100 else
            f"{v:.2f}" if abs(v) >= 10 else f"{v:.3f}")


class Table:
    """Columns, rows and a metadata header; renders to Markdown and to CSV."""

    def __init__(self, name: str, title: str, columns: Sequence[str], meta: Optional[dict] = None):
        self.name, self.title, self.columns = name, title, list(columns)
        self.rows: List[list] = []       # formatted cells for Markdown
        self.raw: List[dict] = []        # full-precision values for CSV and JSON
        self.meta = meta or {}

    def add(self, cells: Sequence, raw: dict) -> None:
        self.rows.append([str(c) for c in cells])
        self.raw.append(raw)

    def markdown(self, keep=None, drop: Sequence[int] = ()) -> str:
        """The table in Markdown; ``keep(raw row)``: only the rows it keeps, ``drop``: without
        the columns at these places (the CSV has them all)."""
        cols = [i for i in range(len(self.columns)) if i not in drop]
        out = ["| " + " | ".join(self.columns[i] for i in cols) + " |",
               "|" + "|".join("---:" for _ in cols) + "|"]
        out += ["| " + " | ".join(r[i] for i in cols) + " |"
                for r, raw in zip(self.rows, self.raw) if keep is None or keep(raw)]
        return "\n".join(out)

    def csv_text(self, command: str = "") -> str:
        buf = io.StringIO()
        if command:
            buf.write(f"# command: {command}\n")
        for k, v in self.meta.items():
            buf.write(f"# {k}: {v}\n")
        keys = list(dict.fromkeys(k for r in self.raw for k in r))   # every row's, in order
        w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for r in self.raw:
            w.writerow({k: ("" if v is None else stable(v)) for k, v in r.items()})
        return buf.getvalue()

    def as_json(self) -> dict:
        return {"title": self.title, "meta": self.meta, "rows": self.raw}


def _axis_slug(axis: str) -> str:
    """An axis's name as a file name: horovod-none-200mbit-lr-linear-settings-tuned."""
    return (axis.replace("/", "-").replace("@", "-").replace(" lr:", "-lr-")
            .replace(" settings:", "-settings-").replace(" ", "-").replace(":", "-"))


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"
