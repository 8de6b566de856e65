"""Read a study file and expand it into a validated list of runs.

A study (``jobs/<name>.toml``) names a workload and its parameters, strong or weak scaling, the
rank counts (``ranks = [1, 2]`` on one machine) or node counts x ranks per node (a cluster), the
repeats, the backend and compression axes, how to run a point locally and the Slurm resources.
:func:`load` checks all of it and raises :class:`StudyError` naming the file, the key and what is
allowed; :meth:`Study.points` lists the runs in the order they are run.

Standard library only: launchers, the report and the Slurm renderer all import this module.

Example::

    [study]
    name = "expmlp-strong"
    scaling = "strong"            # strong: global batch fixed; weak: per-rank batch fixed
    repeats = 3

    [workload]
    name = "expmlp"
    global_batch = 400            # strong scaling (batch_size = per-rank batch for weak)
    steps = 300

    [layout]
    ranks = [1, 2]                # or: nodes = [1, 2, 4], ranks_per_node = 4

    [axes]
    backend = ["horovod"]
    compression = ["none"]

    [run]                         # local runs through mpirun
    timeout = 300
    threads_per_rank = 1

    [slurm]
    partition = "gpu"
    time = "00:30:00"

    [model]                       # how the report calibrates the communication model
    fit = "results/bench/fit.json"   # from 'hpcdl bench fit' (default: this study's own runs)
    calibrate = { nodes_max = 2 } # fit to the runs on <= 2 nodes, predict the others (with
                                  # fit too: the exchange from the bench, the rest from the runs;
                                  # with exchange = "results/tuning/{nodes}n-{network}.json"
                                  # the others' exchange from 'hpcdl tune' at their node count;
                                  # with loop = "results/tuning/loop-cpu.json" their compute
                                  # after the share Horovod's loop takes of a node at theirs)
    forecast = [16, 64, 256]      # node counts the report forecasts (this is the default)

    [target]                      # time to accuracy: each repeat is then a seed
    metric = "accuracy"           # or "loss", on the held-out set
    value = 0.89
    max_steps = 1000              # instead of workload.steps; training ends at the target
    eval_every = 1000             # samples seen between evaluations

A study of your own script replaces the workload's name and options by the command that runs
one rank (placeholders {batch_size}, {global_batch}, {ranks}, {nodes}, {repeat}, {results}), and
may name figures its output prints (a regular expression whose first group is the number)::

    [workload]
    command = ["python", "train.py", "--batch-size", "{batch_size}"]
    global_batch = 256

    [scrape]
    throughput_per_rank = 'img/sec per rank: ([0-9.]+)'   # or throughput (all ranks), or any name
"""
from __future__ import annotations

from .loading import _toml, from_dict, load
from .model import Point, Study, recorded_point
from .schema import (DEFAULT_TIMEOUT, LR_RULES, PLACEHOLDERS, SCRIPT_BACKEND, SLURM_KEYS, TUNINGS,
                     VARIANT_OPTIONS, StudyError, parse_time, scheduler_value_ok)

__all__ = ["load", "from_dict", "Point", "Study", "recorded_point", "StudyError", "parse_time",
           "scheduler_value_ok", "DEFAULT_TIMEOUT", "LR_RULES", "PLACEHOLDERS", "SCRIPT_BACKEND",
           "SLURM_KEYS", "TUNINGS", "VARIANT_OPTIONS", "_toml"]
