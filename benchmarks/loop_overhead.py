#!/usr/bin/env python
"""The training loop's own cost: ``hpcdl train`` against the bare Horovod loop on the same work.

Both run the cnn workload (the same model, synthetic batch, loss, optimizer, threads and rank
defaults, through mpirun with the same options); ``benchmarks/bare_horovod_loop.py`` is the
canonical synthetic-benchmark loop and nothing else. Rounds alternate which goes first; the
figure is, per rank count, the median over rounds of hpcdl's total img/s over the bare loop's in
the same round (target: >= 0.98).

    python benchmarks/loop_overhead.py [--rounds 3] [--ranks 1,2] [--model resnet50 --image-size 64 --batch-size 8]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl.launch import local  # noqa: E402

TOTAL = re.compile(r"^Total img/sec on (\d+) rank\(s\): ([0-9.]+) \+-([0-9.]+)$", re.M)


def _commands(opts, np_):
    work = ["--model", opts.model, "--image-size", str(opts.image_size), "--batch-size",
            str(opts.batch_size), "--num-warmup-batches", str(opts.warmup),
            "--num-batches-per-iter", str(opts.per_iter), "--num-iters", str(opts.iters)]
    hpcdl = local.hpcdl_command(["train", "--workload", "cnn", "--num-classes", "1000", *work,
                                 "--results", "-"])
    bare = [sys.executable, str(ROOT / "benchmarks" / "bare_horovod_loop.py"), *work]
    return {"hpcdl": local.mpirun_command(np_, hpcdl), "bare": local.mpirun_command(np_, bare)}


def _run(argv, np_, timeout):
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               HPCDL_THREADS=str(max(1, (os.cpu_count() or 1) // np_)))
    res = local.run(argv, timeout=timeout, env=env)
    m = TOTAL.search(res.stdout)
    if res.returncode != 0 or res.timed_out or not m:
        print(res.stdout[-3000:], res.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{' '.join(argv[-12:])} failed (exit {res.returncode}, timed out "
                         f"{res.timed_out})")
    return float(m.group(2)), float(m.group(3))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--per-iter", type=int, default=10)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=900)
    opts = ap.parse_args(argv)
    ranks = [int(r) for r in opts.ranks.split(",")]
    print(f"# hpcdl train vs the bare Horovod loop: cnn {opts.model} {opts.image_size}px, batch "
          f"{opts.batch_size}/rank, {opts.warmup} warm-up + {opts.iters} x {opts.per_iter} steps, "
          f"threads/rank = cores / ranks; {opts.rounds} rounds, first runner alternating")
    print(f"#{'ranks':>5} {'round':>5} {'first':>6} {'hpcdl img/s':>16} {'bare img/s':>16} {'ratio':>6}")
    ratios = {n: [] for n in ranks}
    for rnd in range(opts.rounds):
        for np_ in ranks:
            cmds = _commands(opts, np_)
            order = ["hpcdl", "bare"] if (rnd + np_) % 2 == 0 else ["bare", "hpcdl"]
            got = {name: _run(cmds[name], np_, opts.timeout) for name in order}
            ratio = got["hpcdl"][0] / got["bare"][0]
            ratios[np_].append(ratio)
            print(f" {np_:>5} {rnd + 1:>5} {order[0]:>6} {got['hpcdl'][0]:>9.1f} +-{got['hpcdl'][1]:<5.1f} "
                  f"{got['bare'][0]:>9.1f} +-{got['bare'][1]:<5.1f} {ratio:>6.3f}", flush=True)
    for np_, rs in ratios.items():
        med = statistics.median(rs)
        print(f"# {np_} rank(s): hpcdl/bare median {med:.3f} [{min(rs):.3f}-{max(rs):.3f}] over "
              f"{len(rs)} rounds: {'meets' if med >= 0.98 else 'misses'} the 0.98 target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
