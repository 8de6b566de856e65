"""Benchmark the exchange training runs: ``hpcdl bench allreduce`` (:mod:`.allreduce`, a size
sweep in nccl-tests' style over the training path), ``hpcdl bench fit`` (:mod:`.fit`, the cost
model fitted to sweeps); :mod:`.boxcheck` proves the cluster box's isolation.
"""
from __future__ import annotations

from . import allreduce, fit


def register(subparsers, name, help_text):
    p = subparsers.add_parser(name, help=help_text, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="bench_command", metavar="BENCH", parser_class=type(p))
    a = sub.add_parser("allreduce", help="allreduce sweep over sizes, backends and compressions "
                       "(run under mpirun/srun)", description=allreduce.__doc__.split("\n\n")[1])
    allreduce.add_arguments(a)
    a.set_defaults(_main=allreduce.main)
    f = sub.add_parser("fit", help="fit alpha, beta, gamma of each backend to a sweep",
                       description=fit.__doc__.split("\n\n")[0])
    fit.add_arguments(f)
    f.set_defaults(_main=fit.main)

    def _usage(opts):
        p.print_help()
        return 2
    p.set_defaults(_main=_usage)
