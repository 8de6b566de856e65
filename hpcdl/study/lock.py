"""One writer of a results root at a time: `study run`, `study submit` and `study report` each hold
the root's lock while they write into it, so two runs of a study never measure side by side.

The lock is an exclusive ``flock`` on ``<root>/.hpcdl-lock``, which the kernel drops when its
holder dies; the file names the holder (PID, host, command, since when) for the one-line refusal.
A holder that died without clearing the file left a stale lock, taken over with a note.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, Optional

from ..errors import UserError

NAME = ".hpcdl-lock"
_held: Dict[str, int] = {}        # root -> how deep this process holds it (it may again)


def _holder_text(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode(errors="replace").strip()


def _describe(text: str) -> str:
    try:
        h = json.loads(text)
        return (f"'{h['command']}' (PID {h['pid']} on {h['host']}, since {h['since']})")
    except (ValueError, KeyError, TypeError):
        return "another process (its lock file names none)"


@contextmanager
def hold(root, command: str, wait: Optional[float] = None) -> Iterator[None]:
    """Hold ``root``'s lock for the block. Held elsewhere: refuse at once naming the holder, or,
    with ``wait`` seconds, wait that long for it first."""
    root = Path(root)
    key = str(root.resolve())
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    root.mkdir(parents=True, exist_ok=True)
    path = root / NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UserError(f"{path}: cannot take the results root's lock ({exc.strerror})") from None
    try:
        _acquire(fd, root, wait)
        stale = _holder_text(fd)
        if stale:
            sys.stderr.write(f"hpcdl: {root}: took over the lock of {_describe(stale)}, which "
                             "ended without releasing it\n")
        me = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
              "since": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]
            os.ftruncate(fd, 0)           # released cleanly: the next holder sees no stale note
    finally:
        os.close(fd)                      # closing drops the flock


def _acquire(fd: int, root: Path, wait: Optional[float]) -> None:
    deadline = time.monotonic() + (wait or 0)
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        who = _describe(_holder_text(fd))
        if time.monotonic() >= deadline:
            waited = f"waited {wait:g} s; " if wait else ""
            raise UserError(f"{root} is in use by {who}: one study run, submit or report at a "
                            f"time writes a results root ({waited}--wait SECONDS waits for it)")
        if not said:
            sys.stderr.write(f"hpcdl: {root} is in use by {who}; waiting up to {wait:g} s\n")
            said = True
        time.sleep(0.5)
