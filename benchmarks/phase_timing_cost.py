#!/usr/bin/env python
"""What the per-rank phase timing adds to a training step, measured directly.

The loop already reads the clock around a step's input and its step call for the iteration
timing; the phase timing adds, per timed step, one clock read, two subtractions and two list
appends (the input and the bookkeeping times). This times exactly those statements over many
repetitions (median of 7 rounds) and sets them against step times of the committed studies.
There is no switch to time a whole run with and without it: the work it adds is below what
alternating runs on this machine can resolve (their spread is several percent).

    python -m benchmarks.phase_timing_cost > results/phase-timing-cost.txt
"""
import statistics
import time

N = 200_000


def with_phases(n):
    input_times, book_times, iter_total = [], [], 0.0
    t_run = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        t_in = time.perf_counter() - t0             # added: the input's time
        t1 = time.perf_counter()
        now = time.perf_counter()
        input_times.append(t_in)                    # added
        book_times.append(now - t1 - 0.0)           # added
        iter_total += now - t0
    return time.perf_counter() - t_run


def without(n):
    iter_total = 0.0
    t_run = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        t1 = time.perf_counter()
        now = time.perf_counter()
        iter_total += now - t0 + t1 * 0
    return time.perf_counter() - t_run


def main():
    print("# python -m benchmarks.phase_timing_cost")
    added = []
    for _ in range(7):
        a, b = with_phases(N), without(N)
        added.append((a - b) / N)
    cost = statistics.median(added)
    print(f"added per timed step: {cost * 1e9:.0f} ns (median of 7 rounds of {N:,} steps; "
          f"rounds {min(added) * 1e9:.0f}-{max(added) * 1e9:.0f} ns)")
    for name, step in (("expmlp, 1 rank (1.2 ms)", 1.2e-3), ("small CNN 32x32, 2 ranks (11 ms)", 11e-3),
                       ("box CNN, 8 nodes (1.06 s)", 1.06)):
        print(f"  share of a step of {name}: {cost / step * 100:.4f}% (target <= 2%)")


if __name__ == "__main__":
    main()
