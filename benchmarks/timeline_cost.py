#!/usr/bin/env python
"""What Horovod's timeline costs a training run, and whether the run's own estimate says so.

Alternating rounds of the same ``hpcdl train`` with and without ``--timeline`` (the order
alternates by round). A run with the timeline records only the second half of its timed steps
and times the first half without it; its estimate (``metrics.timeline_cost``) is the second
half's median step over the first half's. The alternated figure is, per round, the median step
of the timeline's half over the median step of the run without it, minus one; both are given as
the median over rounds with their range, so that the figure a user reads in a run is checked
against runs that never started the timeline.

    python -m benchmarks.timeline_cost [--rounds 9] [--ranks 2] [--model small:32:32:50]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.loop_overhead import ROOT, _models, _work, launch
from hpcdl.launch import local


def _run(opts, np_, work, tmp: Path, timeline: bool) -> dict:
    results = tmp / "runs.jsonl"
    train = ["train", "--workload", "cnn", "--num-classes", "1000", *work,
             "--results", str(results)]
    if timeline:
        train += ["--timeline", str(tmp / "timeline.json")]
    launch(local.mpirun_command(np_, local.hpcdl_command(train)), ROOT, np_, opts.timeout)
    return json.loads(results.read_text().splitlines()[-1])["metrics"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--model", default="small:32:32:50",
                    help="model:image size:batch per rank:iterations (small:32:32:50)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--per-iter", type=int, default=10)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=900)
    opts = ap.parse_args(argv)
    (model, size, batch, iters), = _models(opts.model, opts.iters)
    work = _work(opts, model, size, batch, iters)
    print(f"# hpcdl train with and without --timeline: cnn {model} {size}px, batch {batch}/rank, "
          f"{opts.ranks} rank(s) by mpirun, {opts.warmup} warm-up + {iters} x {opts.per_iter} "
          f"timed steps, {opts.rounds} rounds, first run alternating")
    print(f"#{'round':>5} {'first':>8} {'step with':>10} {'without':>10} {'cost':>7} "
          f"{'run says':>9}")
    costs, said = [], []
    with tempfile.TemporaryDirectory(prefix="hpcdl-timeline-") as d:
        for rnd in range(opts.rounds):
            order = [True, False] if rnd % 2 == 0 else [False, True]
            got = {}
            for timeline in order:
                sub = Path(d) / f"{rnd}-{int(timeline)}"
                sub.mkdir()
                got[timeline] = _run(opts, opts.ranks, work, sub, timeline)
            tl = got[True]["timeline_cost"]
            with_, without = tl["with_s"], got[False]["step_time"]["median"]
            costs.append(with_ / without - 1.0)
            est = tl.get("cost")
            if est is not None:
                said.append(est)
            print(f" {rnd + 1:>5} {'timeline' if order[0] else 'none':>8} {with_ * 1e3:>8.3f}ms "
                  f"{without * 1e3:>8.3f}ms {costs[-1] * 100:>+6.1f}% "
                  + (f"{est * 100:>+8.1f}%" if est is not None else "       -"), flush=True)
    print(f"# the timeline's cost, alternated runs: median {statistics.median(costs) * 100:+.1f}% "
          f"[{min(costs) * 100:+.1f}% to {max(costs) * 100:+.1f}%] over {len(costs)} rounds")
    if said:
        print(f"# what the runs with it printed (the steps it recorded against those before "
              f"it): median {statistics.median(said) * 100:+.1f}% "
              f"[{min(said) * 100:+.1f}% to {max(said) * 100:+.1f}%]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
