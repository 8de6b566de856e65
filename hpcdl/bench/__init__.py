"""Benchmark the exchange training runs: ``hpcdl bench allreduce`` (:mod:`.allreduce`, a size
sweep in nccl-tests' style over the training path), ``hpcdl bench fit`` (:mod:`.fit`, the cost
model fitted to sweeps), ``hpcdl bench allocation`` (:mod:`.allocation`, the forecast's inputs
from the allocation); beside them, the check of a rehearsal cluster's isolation.
"""
from __future__ import annotations

from . import allocation, allreduce, fit


def register(subparsers, name, help_text):
    p = subparsers.add_parser(name, help=help_text, description=(
        "Benchmark the gradient exchange training runs: 'allreduce' sweeps message sizes over "
        "every backend and compression (under mpirun or srun), 'fit' fits the cost model's "
        "alpha, beta and gamma to such sweeps."))
    sub = p.add_subparsers(dest="bench_command", metavar="BENCH", parser_class=type(p))
    a = sub.add_parser("allreduce", help="allreduce sweep over sizes, backends and compressions "
                       "(run under mpirun/srun)", description=(
        "For every backend and compression asked for and every size from --minbytes to "
        "--maxbytes, time warm-up and timed iterations of the exchange a training step makes (the "
        "same code), the slowest rank's time per iteration, and print min, median and p99, algbw, "
        "busbw = algbw * 2(p-1)/p, the count of wrong elements, and memcpy and the MPI library's "
        "own MPI_Allreduce measured in the same run; rank 0 appends one record to --results."))
    allreduce.add_arguments(a)
    a.set_defaults(_main=allreduce.main)
    f = sub.add_parser("fit", help="fit alpha, beta, gamma of each backend to a sweep",
                       description=(
        "Fit alpha and beta of each backend's algorithm (gamma measured in the same sweep) to "
        "'hpcdl bench allreduce' records, print the prediction beside each measurement, and "
        "write the parameters (default results/bench/fit.json). Needs no MPI."))
    fit.add_arguments(f)
    f.set_defaults(_main=fit.main)
    c = sub.add_parser("allocation", help="what the forecast needs from this allocation: the "
                       "nodes' spread and Horovod's loop (run under mpirun/srun, one rank per "
                       "node)", description=allocation.__doc__.split("\n\n")[0])
    allocation.add_arguments(c)
    c.set_defaults(_main=allocation.main)

    def _usage(opts):
        p.print_help()
        return 2
    p.set_defaults(_main=_usage)
