"""Atomic, verified checkpoints.

A checkpoint is one file ``ckpt-<step>.hpcdl``: a JSON header line (magic, step, payload length
and sha256, metadata) followed by an ``.npz`` payload of named arrays. It is written to a
temporary file in the same directory, fsynced, renamed into place, and the directory fsynced, so
a reader sees the old file or the new one, never half of one. Loading checks the magic, the
length and the hash: a truncated or foreign file raises ``CheckpointError`` and is never used.
Older checkpoints are pruned only after the new one is in place, so the previous good one survives
a crash during a save.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..errors import UserError

MAGIC = "hpcdl-checkpoint/1"
_NAME = re.compile(r"^ckpt-(\d{9})\.hpcdl$")
_TMP = re.compile(r"^\.ckpt-\d{9}\.hpcdl\.tmp-(\d+)$")
_MAX_HEADER = 1 << 20


class CheckpointError(UserError, RuntimeError):
    """A checkpoint is missing, truncated, corrupt or not an hpcdl checkpoint."""


def path_for(directory, step: int) -> Path:
    return Path(directory) / f"ckpt-{step:09d}.hpcdl"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(directory, step: int, arrays: Dict[str, np.ndarray], meta: Optional[dict] = None,
         keep: int = 2) -> Path:
    """Write a checkpoint atomically and keep the newest ``keep`` (at least 1)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    payload = buf.getvalue()
    header = {"magic": MAGIC, "step": int(step), "length": len(payload),
              "sha256": hashlib.sha256(payload).hexdigest(), "meta": meta or {},
              "arrays": sorted(arrays)}
    final = path_for(directory, step)
    tmp = directory / f".{final.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(json.dumps(header, sort_keys=True).encode() + b"\n")
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    # Only now that the new checkpoint is durable may older ones go.
    for old in list_checkpoints(directory)[:-max(1, keep)]:
        if old != final:
            old.unlink(missing_ok=True)
    _remove_stale_temporaries(directory)
    return final


def _remove_stale_temporaries(directory: Path) -> None:
    """Delete temporary files left by savers that died mid-write (their process is gone)."""
    for p in directory.iterdir():
        m = _TMP.match(p.name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue                      # that saver still runs
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        p.unlink(missing_ok=True)


INTERRUPTED = "INTERRUPTED"


def mark_interrupted(directory, step: int, reason: str) -> Path:
    """Record (atomically) that training stopped cleanly at ``step`` after checkpointing it."""
    directory = Path(directory)
    final = directory / INTERRUPTED
    tmp = directory / f".{INTERRUPTED}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(f"{step} {reason}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    _fsync_dir(directory)
    return final


def list_checkpoints(directory) -> List[Path]:
    """Checkpoint files in a directory, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if _NAME.match(p.name)]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def load(path) -> Tuple[dict, Dict[str, np.ndarray]]:
    """Read and verify one checkpoint; return (header, arrays)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            first = fh.readline(_MAX_HEADER)
            payload = fh.read()
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc.strerror}") from exc
    try:
        header = json.loads(first)
        ok = isinstance(header, dict) and header.get("magic") == MAGIC
    except (ValueError, UnicodeDecodeError):
        ok = False
    if not ok:
        raise CheckpointError(f"{path} is not an hpcdl checkpoint (no '{MAGIC}' header)")
    length, digest = header.get("length"), header.get("sha256")
    if not isinstance(length, int) or not isinstance(digest, str) or "step" not in header:
        raise CheckpointError(f"checkpoint {path} has a damaged header (length, sha256 or step missing)")
    if len(payload) < length:
        raise CheckpointError(f"checkpoint {path} is truncated: {len(payload)} of {length} payload bytes")
    if len(payload) > length:
        raise CheckpointError(f"checkpoint {path} is corrupt: {len(payload) - length} bytes after the payload")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise CheckpointError(f"checkpoint {path} is corrupt: sha256 mismatch")
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (ValueError, OSError, EOFError) as exc:   # a consistent header over a foreign payload
        raise CheckpointError(f"checkpoint {path}: the payload is not an array archive ({exc})") from exc
    return header, arrays


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped because it does not verify."""


def latest(directory, warn=None) -> Optional[Tuple[Path, dict, Dict[str, np.ndarray]]]:
    """The newest checkpoint that verifies; each bad one newer than it is reported to ``warn``
    (a callable taking the message; by default a ``CheckpointWarning``). Bad files are left in
    place for inspection and never deleted here."""
    for path in reversed(list_checkpoints(directory)):
        try:
            header, arrays = load(path)
        except CheckpointError as exc:
            message = f"skipping bad checkpoint: {exc}"
            if warn:
                warn(message)
            else:
                warnings.warn(message, CheckpointWarning, stacklevel=2)
            continue
        return path, header, arrays
    return None


def find(resume: str, directory, warn=None) -> Tuple[Optional[tuple], Optional[str]]:
    """The checkpoint ``--resume`` names, on the rank that reads it: ``(found, error)``.
    ``found`` is (path, header, arrays), or None where ``"latest"`` finds none in ``directory``
    yet; ``error`` is the message of a named checkpoint that does not verify (the caller
    hands it to every rank, which all stop with it)."""
    try:
        if resume == "latest":
            return latest(directory, warn=warn), None
        return (Path(resume),) + load(resume), None
    except CheckpointError as exc:
        return None, str(exc)
