"""Analyse a scaling study: records in, one :class:`StudyAnalysis` out (the report only renders it).

Scaling: speedup S(N) = X(N)/X(N0), efficiency E = S/(N/N0) and the Karp-Flatt serial fraction
e = (1/S - 1/p)/(1 - 1/p) with p = N/N0, for throughput X (samples or images per second, all
ranks together); ideal strong and weak scaling both have S = N/N0. Every figure outside its
meaningful range, or not resolved by the spread of the repeats, carries a flag naming why.

The one model, its check on held-out points and its forecast are :mod:`hpcdl.model`; the
analysis calls it. numpy only: a report is made without TensorFlow, Horovod or mpi4py.
"""
from __future__ import annotations

from . import provenance
from .reading import Digest
from .published import PUBLISHED, PUBLISHED_INPUTS, PUBLISHED_SETUP, published_comparison
from .scaling import (Row, add_scaling, axes, efficiency, flag_rows, group_records,
                      karp_flatt, pooled, rows_of, speedup)
from .study import StudyAnalysis, analyse, declared_scaling, load_fit
from .systems import systems_of
from ..records import SCALINGS

# re-exported: the package's names as its users import them
__all__ = ["Digest", "PUBLISHED", "PUBLISHED_INPUTS", "PUBLISHED_SETUP", "SCALINGS", "Row", "StudyAnalysis",
           "add_scaling", "analyse", "axes", "declared_scaling",
           "efficiency", "flag_rows", "group_records", "karp_flatt", "load_fit", "pooled",
           "provenance", "published_comparison", "rows_of", "speedup", "systems_of"]
