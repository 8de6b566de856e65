"""Checks on results files: whether a path can take a record (checked before a run spends its
allocation, not after it), and which lines of a results file are no measurement (torn, repeated,
or a record whose figures a report cannot compute with), counted and named when a report reads;
whether a file is a bench fit (when a study names it and when a report reads it)."""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

from . import records
from .errors import UserError
from .records import lookup


def check_writable(path, what: str = "results file") -> None:
    """Raise UserError (one line) unless ``path`` can be appended to, creating its directory as
    :func:`append` would: checked before a run spends its allocation, not after."""
    path = Path(path)
    _check_dir(path.parent, f"{what} {path}: its directory")
    if path.is_dir():
        raise UserError(f"{what} {path} is a directory: give the path of a file")
    if path.exists():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            raise UserError(f"{what} {path} cannot be written: {exc.strerror}") from None


def check_writable_dir(path, what: str = "directory") -> None:
    """Raise UserError (one line) unless ``path`` is, or can be made, a writable directory."""
    _check_dir(Path(path), f"{what} {path}")


def _check_dir(path: Path, what: str) -> None:
    above = path
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise UserError(f"{what} cannot be made: {above} is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{what} cannot be made: {exc.strerror}") from None
    probe = path / f".hpcdl-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise UserError(f"{what} cannot be written: {exc.strerror}") from None


@dataclass
class Scan:
    """A results file read once: its good records, and what was left out and why."""
    path: Path
    records: List[dict] = field(default_factory=list)
    torn: List[int] = field(default_factory=list)        # lines skipped: torn or not JSON
    duplicates: List[int] = field(default_factory=list)  # lines repeating an earlier one exactly
    excluded: List[str] = field(default_factory=list)    # "file:line: field: why"
    repeated: List[str] = field(default_factory=list)    # "file:line: point" recorded before
    hashes: set = field(default_factory=set, repr=False)  # every distinct line's, as read
    points: set = field(default_factory=set, repr=False)  # every (study, point id), as read

    def notes(self) -> List[str]:
        """One line for each kind of line left out (none when nothing was)."""
        out = []
        if self.torn:
            out.append(f"{len(self.torn)} torn or corrupt line(s) of {self.path} skipped "
                       f"(line {_lines(self.torn)})")
        if self.duplicates:
            out.append(f"{len(self.duplicates)} line(s) of {self.path} repeat an earlier record "
                       f"exactly and were counted once (line {_lines(self.duplicates)})")
        if self.excluded:
            out.append(f"{len(self.excluded)} record(s) left out as not measurements: "
                       + "; ".join(self.excluded[:5]) + ("; …" if len(self.excluded) > 5 else ""))
        if self.repeated:
            out.append(f"{len(self.repeated)} record(s) of a study's point recorded before (the "
                       "same point id) left out, not pooled as more repeats; the first of each "
                       "is kept: " + "; ".join(self.repeated[:5])
                       + ("; …" if len(self.repeated) > 5 else ""))
        return out


def _lines(numbers: List[int]) -> str:
    return ", ".join(map(str, numbers[:8])) + (", …" if len(numbers) > 8 else "")


def point_of(rec: dict) -> Optional[Tuple[str, str]]:
    """(study, point id) of a study's record, None for a record of no study's point."""
    pid = (rec.get("point") or {}).get("id") if isinstance(rec.get("point"), dict) else None
    return (str(rec.get("study")), str(pid)) if pid else None


def scan(path, check: Optional[Callable[[dict], Optional[str]]] = None,
         keep: Optional[Callable[[dict], None]] = None, decode=None,
         part: Optional[Tuple[int, int]] = None,
         point: Optional[Callable[[dict], Optional[tuple]]] = None) -> Scan:
    """Read ``path`` once, without a warning per line: torn lines and exact repeats are counted,
    and a record for which ``check`` names a problem ("field: why") is left out and named with its
    file and line. The good records are handed to ``keep`` as they are read (and then dropped),
    else kept in :attr:`Scan.records`. ``decode``: see :func:`records.lines`. ``part``: read only
    the lines starting in these bytes (:func:`parts`); a repeat of a line before the part is not
    seen here: :attr:`Scan.hashes` holds the part's lines for the caller to compare.
    ``point``: a record's point (:func:`point_of`); a record of a point read before is left out
    and named (:attr:`Scan.repeated`; :attr:`Scan.points` holds the part's points likewise)."""
    out = Scan(Path(path))
    start, stop = part or (0, None)
    seen = out.hashes
    keep = keep or out.records.append
    before = [0 if start <= 0 else None]     # the lines before the part: counted when first named

    def number(lineno: int) -> int:
        if before[0] is None:
            before[0] = _line_at(out.path, start) - 1
        return before[0] + lineno
    for lineno, text, rec, _ in records.lines(out.path, decode, start, stop):
        digest = _hash(text)
        if digest in seen:
            out.duplicates.append(number(lineno))
            continue
        seen.add(digest)
        if rec is None:
            out.torn.append(number(lineno))
            continue
        why = check(rec) if check else None
        if why:
            out.excluded.append(f"{out.path}:{number(lineno)}: {why}")
            continue
        key = point(rec) if point else None
        if key is not None:
            if key in out.points:
                out.repeated.append(f"{out.path}:{number(lineno)}: {key[1]}")
                continue
            out.points.add(key)
        keep(rec)
    return out


def fit_file(path, prefix: str = "fit ") -> dict:
    """The ``hpcdl bench fit`` file at ``path``, or UserError (one line) naming why it is not
    one: absent, unreadable, not JSON, or of another schema."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{prefix}{path}: no such file (make one with 'hpcdl bench fit')")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{prefix}{path}: cannot be read: "
                        f"{getattr(exc, 'strerror', None) or exc}") from None
    except ValueError as exc:
        raise UserError(f"{prefix}{path}: not JSON ({exc}); make one with "
                        "'hpcdl bench fit'") from None
    schema = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
    if schema != "hpcdl.fit/1":
        raise UserError(f"{prefix}{path}: schema is {schema!r}, expected 'hpcdl.fit/1' "
                        "(a 'hpcdl bench fit' file)")
    backends = doc.get("backends")
    if not isinstance(backends, dict):
        raise UserError(f"{prefix}{path}: no 'backends' table (a 'hpcdl bench fit' file has one)")
    for name, entry in backends.items():
        for where, fit in [(name, entry)] + [(f"{name} regime {k + 1}", r) for k, r in enumerate(
                (entry or {}).get("regimes") or [] if isinstance(entry, dict) else [])]:
            if not isinstance(fit, dict) or "alpha_s" not in fit or "beta_s_per_byte" not in fit:
                raise UserError(f"{prefix}{path}: {where} is not a table of alpha_s and "
                                "beta_s_per_byte")
    _in_range(doc, "hpcdl.fit/1", f"{prefix}{path}", "hpcdl bench fit")
    return doc


def _in_range(doc: dict, schema: str, what: str, maker: str) -> None:
    """UserError (one line) where a figure of ``doc`` breaks the input files' rule
    (:func:`input_problem`)."""
    why = input_problem(doc, schema)
    if why:
        raise UserError(f"{what}: {why}; make the file again with '{maker}'")


def schema_file(path, schema: str, what: str, maker: str) -> dict:
    """The JSON file at ``path`` of ``schema``, or UserError (one line) naming ``what`` gave it
    and why it is not one, and ``maker``, the command that makes one."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{what} {path}: no such file (make one with '{maker}')") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{what} {path}: not a JSON file of {schema} "
                        f"({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        raise UserError(f"{what} {path}: not a {schema} file (make one with '{maker}')")
    _in_range(doc, schema, f"{what} {path}", maker)
    return doc


def _hash(text: bytes) -> bytes:
    """A line's digest, to count exact repeats (SHA-1: twice BLAKE2's speed where the CPU hashes
    it, and no security rests on it)."""
    return hashlib.sha1(text, usedforsecurity=False).digest()


def _line_at(path: Path, start: int) -> int:
    """The number of the line that starts at byte ``start``."""
    n, left = 1, start
    if left <= 0:
        return n                              # (the file may not exist: it has no lines)
    with open(path, "rb") as fh:
        while left > 0:
            chunk = fh.read(min(left, 1 << 22))
            if not chunk:
                break
            n += chunk.count(b"\n")
            left -= len(chunk)
    return n


def parts(path, count: int) -> List[Tuple[int, int]]:
    """``path`` cut into ``count`` byte ranges of about equal size, each at a line's start."""
    size = Path(path).stat().st_size
    cuts = [0]
    with open(path, "rb") as fh:
        for k in range(1, count):
            fh.seek(max(cuts[-1], size * k // count))
            if fh.tell():
                fh.seek(fh.tell() - 1)
                fh.readline()                 # to the start of the next line
            cuts.append(min(fh.tell(), size))
    cuts.append(size)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _number_problem(value, what: str, zero: bool = False) -> Optional[str]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{what}: {value!r} is not a number"
    if not math.isfinite(value):
        return f"{what}: {value} is not finite"
    if value < 0 or (value == 0 and not zero):
        return f"{what}: {value} is not {'at least 0' if zero else 'positive'}"
    return None


# the figures of a train record a report computes with: (keys, may it be 0, must it be there)
_MEASURED = ((("metrics", "throughput", "mean"), False, True),
             (("metrics", "throughput", "std"), True, False),
             (("metrics", "throughput", "n"), False, False),
             (("metrics", "step_time", "median"), False, False),
             (("layout", "size"), False, False), (("layout", "nodes"), False, False),
             (("layout", "ranks_per_node"), False, False), (("point", "ranks"), False, False),
             (("params", "batch_size"), False, False), (("params", "global_batch"), False, False))


def train_record_problem(rec: dict) -> Optional[str]:
    """What makes an ok train record no measurement ("field: why"), else None: a throughput,
    step time, size or count that is missing (throughput), not a number, not finite, zero or
    negative. Records of other kinds, and failed runs, are not judged here."""
    if not records.ok_train(rec):
        return None
    for keys, zero, required in _MEASURED:
        value = lookup(rec, *keys)
        if value is None:
            if required:
                return f"{'.'.join(keys)}: missing"
            continue
        why = _number_problem(value, ".".join(keys), zero)
        if why:
            return why
    return _throughput_problem(rec)


MOST = 1e12     # samples a second: no training measures more (a 1e308 overflows a report's sums)


def _throughput_problem(rec: dict) -> Optional[str]:
    """A finite throughput past :data:`MOST` samples a second, else None."""
    t = lookup(rec, "metrics", "throughput", "mean")
    if isinstance(t, (int, float)) and t > MOST:
        return f"metrics.throughput.mean: {t:g} samples a second is no measurement (over {MOST:g})"
    return None

# --- the one rule for the files read beside the records ---------------------------------------
# The figures of a fit (hpcdl.fit/1), a tuning or exchange file (hpcdl.tuning/1), a loop file
# (hpcdl.loop-cpu/1) and a spread file (hpcdl.host-spread/1) are finite and in range, and an
# exchange file's made_for names the link rate of the points it serves (a loop or spread file
# times compute: its machine, every setting but the links, is compared where it is read).
# Each reader calls input_problem where it reads the file, and either refuses in one line (a
# file named on a command line, a tuning file a run takes) or leaves the file out with the
# sentence as a note (a study's allocation files, which the report names in its first lines).

DAY = 86400.0
# (path, low, high, which ends are in: "[)" low only, "()" neither, "[]" both, what a value must
# be); a path's "*" is any key or index
_SECONDS = "a time in seconds (> 0, under a day)"
_COST = "a finite number >= 0"
INPUT_RANGES = {
    "hpcdl.fit/1": tuple(
        (f"backends.*.{part}{term}", 0.0, math.inf, "[)", _COST)
        for part in ("", "regimes.*.")
        for term in ("alpha_s", "beta_s_per_byte", "gamma_s_per_byte")),
    "hpcdl.tuning/1": (
        ("bytes", 0.0, 1e13, "()", "a gradient size in bytes (> 0)"),
        ("candidates.*.times_s.*", 0.0, DAY, "()", _SECONDS),
        ("picks.*.default_s", 0.0, DAY, "()", _SECONDS),
        ("picks.*.confirm_times_s.*.*", 0.0, DAY, "()", _SECONDS),
    ),
    "hpcdl.loop-cpu/1": (
        ("shares.*.*.median", 0.0, 1.0, "[)", "a share of a CPU, in [0, 1)"),
        ("shares.*.*.busiest", 0.0, 1.0, "[)", "a share of a CPU, in [0, 1)"),
        ("shares.*.*.idle_cpu_s_per_s", 0.0, 1e3, "[)", "CPU seconds per second (>= 0)"),
        ("window.*.*.share", 0.0, 1.0, "[]", "a share of the pass, in [0, 1]"),
    ),
    "hpcdl.host-spread/1": (
        ("spread.*.*.*", 0.0, 100.0, "()", "a node's compute over the center (> 0, < 100)"),
        ("center.*.*", 0.0, DAY, "()", _SECONDS),
        ("crowd.*.*", 0.0, 100.0, "()", "a slowdown computing together (> 0, < 100)"),
    ),
}


def _input_at(doc, parts: Sequence[str], where: str = "") -> Iterator[Tuple[str, object]]:
    """Every (dotted path, value) of ``doc`` that the path ``parts`` reaches."""
    if not parts:
        yield where, doc
        return
    head, rest = parts[0], parts[1:]
    if isinstance(doc, dict):
        items = doc.items() if head == "*" else ([(head, doc[head])] if head in doc else [])
    elif isinstance(doc, list) and head == "*":
        items = enumerate(doc)
    else:
        return
    for key, value in items:
        yield from _input_at(value, rest, f"{where}.{key}" if where else str(key))


def _input_bad(value, low: float, high: float, ends: str) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return True
    if math.isfinite(high) and (value > high if ends[1] == "]" else value >= high):
        return True
    return value < low if ends[0] == "[" else value <= low


def input_problem(doc: dict, schema: str) -> Optional[str]:
    """The first figure of ``doc`` (a file of ``schema``) that is not finite or not in its range,
    as "KEY = VALUE is not WHAT"; None where every figure is."""
    for path, low, high, ends, what in INPUT_RANGES.get(schema, ()):
        for where, value in _input_at(doc, path.split(".")):
            if _input_bad(value, low, high, ends):
                return f"{where} = {value!r} is not {what}"
    return None


def made_for_problem(made: dict, link_rates: Sequence[str] = ()) -> Optional[str]:
    """Why a file made for ``made`` (its ``made_for``) does not serve records made at links of
    ``link_rates``; None where it does or where either side does not say. (The workload is
    checked by what each file measured of it: an exchange file by its gradient bytes.)"""
    machine = made.get("machine")
    rate = made.get("link_rate") or (machine.get("link_rate") if isinstance(machine, dict) else None)
    rates = sorted({r for r in link_rates if r})
    if rate and rates and rate not in rates:
        return f"made at links of {rate}, the records' are {', '.join(rates)}"
    return None
