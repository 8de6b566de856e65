"""What a way of training provides (:class:`Mode`), and the resume dance they all share.

A mode is in the spirit of ``tf.distribute.Strategy``: the run (:mod:`hpcdl.train.run`) holds one
and never branches on which. It says which options are its own and checks them, which ranks
train, builds this rank's replica, trains it (checkpointing as asked, and writing one when the
ranks agree to stop), turns what the ranks measured into the run's figures, and gives its part of
the record. Every mode resumes through :func:`find_checkpoint`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

from . import checkpoint
from .. import cluster
from ..errors import UserError


@dataclass
class Found:
    """A checkpoint to resume: where and at which step on every rank; its header and arrays on
    rank 0 only (None elsewhere)."""

    path: str
    step: int
    header: Optional[dict] = None
    arrays: Optional[dict] = None
    mismatch: Tuple[str, ...] = ()   # what differs from the run that wrote it (--resume-mismatch)

    @property
    def meta(self) -> dict:
        return (self.header or {}).get("meta", {})

    def as_record(self) -> dict:
        return {"path": self.path, "step": self.step,
                **({"mismatch": list(self.mismatch)} if self.mismatch else {})}


class Mode:
    """One way of training. Subclasses set the class attributes and override what differs."""

    name = ""                 # how the record's params and checkpoints name it
    backend: Optional[str] = None    # the --backend that selects it, if one does
    parallel = "data"         # the --parallel that selects it
    unit = "step"             # what its progress counts: "step", or "update" for a server
    help = ""

    # --- options ------------------------------------------------------------------------------
    def add_arguments(self, group) -> None:
        """The mode's own options (in ``hpcdl train --help``)."""

    def chosen(self, opts) -> bool:
        return opts.parallel == self.parallel and (self.backend is None or
                                                   opts.backend == self.backend)

    def validate(self, opts) -> None:
        """Raise UserError for options that do not fit this mode (it is the chosen one)."""

    def refuse_others(self, opts) -> None:
        """Raise UserError when this mode's own options are given and another mode was chosen."""

    # --- the run ------------------------------------------------------------------------------
    def needs_horovod(self, opts) -> bool:
        """Whether the run starts Horovod (:mod:`.collectives`); the modes built on it do."""
        return True

    def trainers(self, opts, size: int) -> List[int]:
        """The ranks that do a step's work (every rank but a dedicated server)."""
        return list(range(size))

    def replica(self, rt, wl, opts):
        """This rank's replica, its data positioned at the first step."""
        raise NotImplementedError

    def header(self, rt, plan, opts) -> List[str]:
        """Lines the run prints under its first line."""
        return []

    def refuse(self, found: Found, opts, size: int) -> Optional[str]:
        """Why rank 0's checkpoint cannot be resumed by this mode, or None."""
        return None

    def train(self, rep, opts, watch, ckpt_dir, found: Optional[Found]):
        """Train (a collective); a loop result whose ``stopped`` says why it ended early and whose
        ``checkpoint`` is where it then saved (or None), and whose ``step`` is how far it got."""
        raise NotImplementedError

    def summarize(self, rep, loop, opts) -> dict:
        """The run's figures (a collective): on rank 0 every metric of the record, and
        ``digests``, ``hosts``, ``net``."""
        raise NotImplementedError

    def progress(self, loop, plan) -> str:
        return f"at step {loop.step}/{plan.steps}"

    def params(self, opts, rt) -> dict:
        """The mode's part of the record's params."""
        return {}

    def replicas(self) -> bool:
        """Whether every rank holds the whole model (and so may save its weights)."""
        return True


def continuity(meta: dict, opts, plan, size: int) -> List[str]:
    """What of this run differs from the run that wrote a checkpoint (its metadata): workload,
    seed (its data order), batch per rank, ranks, learning rate, its warm-up. A figure the checkpoint does not carry
    (written by an older hpcdl) is not compared."""
    out = []
    batch, lr = (plan.batch, plan.lr) if plan else (None, None)
    for name, then, now in (("workload", meta.get("workload"), opts.workload),
                            ("seed", meta.get("seed"), getattr(opts, "seed", None)),
                            ("batch per rank", meta.get("batch_size"), batch),
                            ("ranks", meta.get("size"), size),
                            ("learning rate", meta.get("lr"), lr),
                            ("learning-rate warm-up steps", meta.get("lr_warmup_steps"),
                             opts.lr_warmup_steps)):
        if then is None or now is None:
            continue
        same = (math.isclose(float(then), float(now), rel_tol=1e-9)
                if isinstance(now, float) else then == now)
        if not same:
            out.append(f"{name} {then} (now {now})")
    return out


def find_checkpoint(rt, opts, ckpt_dir, mode: Mode, plan=None) -> Optional[Found]:
    """With ``--resume``, the checkpoint every rank continues from, or None (a collective).

    Rank 0 finds it (:func:`hpcdl.train.checkpoint.find`) and asks the mode whether it can
    continue it; every rank raises the same UserError when it cannot, and every rank learns the
    path and step. The header and arrays stay on rank 0, which hands the mode what it needs.
    """
    if not opts.resume:
        return None
    found = error = None
    differs: List[str] = []
    if rt.root:
        found, error = checkpoint.find(opts.resume, ckpt_dir,
                                       warn=lambda m: cluster.log(m, rt.layout))
        if found and not error:
            error = mode.refuse(Found(str(found[0]), found[1]["step"], found[1], found[2]), opts,
                                rt.size)
        at = found[1]["step"] if found and not error else None
        if at is not None and plan is not None and isinstance(at, int) and at >= plan.steps:
            error = (f"checkpoint {found[0]} is at {mode.unit} {at} and this run trains "
                     f"{plan.steps}: nothing is left to train; give --steps above {at} to "
                     "continue it")
        if found and not error:
            differs = continuity(found[1].get("meta", {}), opts, plan, rt.size)
            if differs and not opts.resume_mismatch:
                error = (f"checkpoint {found[0]} was written by a run with another "
                         f"{'; '.join(differs)}: its data order and learning rate would not "
                         "continue; resume with the settings it was written with, or give "
                         "--resume-mismatch to continue anyway (the record says so)")
    where = rt.coll.broadcast_object((error, (str(found[0]), found[1]["step"]) if found else None),
                                     0, "hpcdl.resume")
    if where[0]:
        raise UserError(where[0])
    if where[1] is None:
        rt.say(f"No checkpoint in {ckpt_dir}: starting from {mode.unit} 0")
        return None
    rt.say(f"Resumed from {where[1][0]} at {mode.unit} {where[1][1]}"
           + (f" (--resume-mismatch: {'; '.join(differs)})" if differs else ""))
    return Found(where[1][0], where[1][1], *(found[1:3] if rt.root else (None, None)),
                 mismatch=tuple(differs))


def written_by(meta: dict) -> str:
    """The mode that wrote a checkpoint, from its metadata (older ones name it less directly)."""
    if meta.get("mode"):
        return meta["mode"]
    if meta.get("parallel") == "pipeline":
        return "pipeline"
    return "ps-async" if meta.get("backend") == "ps-async" else "sync"
