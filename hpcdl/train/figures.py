"""The run's figures from what the ranks timed, the same maths for every way of training and for
the Keras recorder: summaries with their spread, throughput of timed iterations, the slowest
rank's iterations, each rank's phases, and the split of a step into compute and the rest.
"""
from __future__ import annotations

import math
import statistics
from typing import Optional


def summarize_values(values) -> dict:
    """mean, spread and order statistics of a list of numbers."""
    vals = sorted(float(v) for v in values)
    n = len(vals)
    if not n:
        return {"n": 0}
    mean = sum(vals) / n
    std = statistics.stdev(vals) if n > 1 else 0.0
    p99 = vals[min(n - 1, max(0, math.ceil(0.99 * n) - 1))]
    return {"n": n, "mean": mean, "std": std, "ci95": 1.96 * std, "min": vals[0],
            "median": statistics.median(vals), "p99": p99, "max": vals[-1]}


def iteration_rates(samples: int, times) -> dict:
    """Per-rank throughput of timed iterations of ``samples`` samples each: the summary of each
    iteration's rate (its mean ± 1.96σ is the headline, as tf_cnn_benchmarks gives it), and
    ``overall``, all the samples over all the time, as a script that times itself reports it
    (the mean of rates lies above it by about the rates' relative variance)."""
    times = [t for t in times if t > 0]
    out = summarize_values(samples / t for t in times)
    if times:
        out["overall"] = samples * len(times) / sum(times)
    return out


def spread(values) -> dict:
    """min, median, p95 and max of a phase's per-step times (n: how many)."""
    vals = sorted(float(v) for v in values)
    if not vals:
        return {"n": 0}
    return {"n": len(vals), "min": vals[0], "median": statistics.median(vals),
            "p95": vals[min(len(vals) - 1, max(0, math.ceil(0.95 * len(vals)) - 1))],
            "max": vals[-1]}


def rank_phases(rank: int, host: str, loop) -> dict:
    """This rank's phases per timed step, summarised (records stay small): input, the step call,
    the bookkeeping after it; from the probes, compute alone, the exchange alone and the wait for
    the slowest rank before it (medians, and every probe's compute and exchange); and the time
    spent writing checkpoints."""
    def med(values):
        return statistics.median(values) if values else None
    return {"rank": rank, "host": host, "input": spread(loop.input_times),
            "step": spread(loop.step_times), "book": spread(loop.book_times),
            "compute_s": med(loop.probe_times),
            "compute_min_s": min(loop.probe_times) if loop.probe_times else None,
            "exchange_s": med(loop.probe_exch_times),
            "wait_s": med(loop.probe_waits), "ckpt_s": loop.ckpt_time,
            # the process's CPU seconds (all threads) in the probes' compute and exchange, and
            # under a CPU quota how often it ran out while timed (a node of a fraction of a core)
            "compute_cpu_s": med(loop.probe_cpu),
            "exchange_cpu_s": med(loop.probe_exch_cpu),
            "cgroup": loop.cgroup,
            # every probe, in order: a model of the slowest of p ranks needs the distribution
            "compute_probes_s": [float(t) for t in loop.probe_times],
            "exchange_probes_s": [float(t) for t in loop.probe_exch_times]}


def slowest_rank_iterations(coll, iters) -> list:
    """The iteration times of the rank whose timed iterations took longest in all, the first n
    of each rank's (n: the fewest any rank timed). A collective: every rank calls it, with the
    run's :mod:`.collectives`; hpcdl's loop and the Keras ScalingRecorder both do."""
    n = int(coll.allreduce([float(len(iters))], "min", "hpcdl.nit")[0])
    if not n:
        return []
    totals = [0.0] * coll.size
    totals[coll.rank] = float(sum(iters[:n]))
    totals = coll.allreduce(totals, "sum", "hpcdl.iter_totals").tolist()
    slow = max(range(len(totals)), key=totals.__getitem__)
    return coll.broadcast_array([float(t) for t in iters[:n]], slow, "hpcdl.iters").tolist()


def step_split(size: int, step: Optional[float], method: str, compute: float,
               exchange: Optional[float] = None) -> dict:
    """How a step divides into compute and the rest, in words that claim no more than was measured.

    ``probe``: ``compute`` is a compute-only step; the rest of the step is the exchange not hidden
    behind it, the update and overhead, and at one rank only the latter (nothing is exchanged).
    ``timed``: compute and ``exchange`` were timed around the backend call itself. A probe that
    is not shorter than the step leaves the split undetermined.
    """
    out = {"method": method, "compute_s": compute}
    if not step:
        return out
    if method == "timed" and size > 1:
        out.update(exchange_s=exchange, compute_share=compute / step, exchange_share=exchange / step,
                   text=f"compute {compute / step * 100:.0f}% / exchange {exchange / step * 100:.0f}%")
        return out
    if compute >= step:
        out.update(determined=False, text=f"probed compute {compute * 1e3:.3f} ms is not shorter "
                                          "than the step: split not determined")
        return out
    rest = "update and overhead; nothing exchanged at 1 rank" if size == 1 else \
        "exchange not hidden, update, overhead"
    out.update(rest_s=step - compute, compute_share=compute / step,
               text=f"compute {compute / step * 100:.0f}% / rest {(1 - compute / step) * 100:.0f}% "
                    f"({rest})")
    return out
