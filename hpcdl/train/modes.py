"""The ways of training, registered once: ``hpcdl train --help``, its checks, the study validator
and the launcher take their lists from here.

A new way of training is a :class:`~hpcdl.train.interface.Mode` subclass in its own module and
one entry in :data:`MODES`.
"""
from __future__ import annotations

from typing import Tuple

from .asyncps import AsyncPS
from .interface import Mode
from .pipeline import Pipeline
from .sync import Sync
from ..comm import BACKENDS
from ..errors import UserError

MODES: Tuple[Mode, ...] = (Sync(), AsyncPS(), Pipeline())

# --backend: the exchanges of synchronous training, then the modes a backend name selects
TRAIN_BACKENDS = BACKENDS + tuple(m.backend for m in MODES if m.backend)
# --parallel: data (every rank a replica) and the modes that cut the model
PARALLEL = ("data",) + tuple(m.parallel for m in MODES if m.parallel != "data")


def select(opts) -> Mode:
    """The mode the options choose; UserError when none does, or when another mode's own options
    are given."""
    if opts.backend not in TRAIN_BACKENDS:
        raise UserError(f"unknown --backend '{opts.backend}': choose one of "
                        f"{', '.join(TRAIN_BACKENDS)}")
    mode = next((m for m in MODES if m.chosen(opts)), None)    # the modes' rules do not overlap
    if mode is None:
        raise UserError(f"--backend {opts.backend} and --parallel {opts.parallel} do not go "
                        "together")
    for other in MODES:
        if other is not mode:
            other.refuse_others(opts)
    mode.validate(opts)
    return mode


def by_name(name: str) -> Mode:
    for m in MODES:
        if m.name == name:
            return m
    raise KeyError(name)
