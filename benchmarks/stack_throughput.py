#!/usr/bin/env python
"""The cnn workload's throughput on the two TensorFlow stacks, side by side.

Each stack is a venv that ``scripts/setup.sh`` made (``HPCDL_STACK=tf2.15`` and ``tf2.21``), named
by its Python. For each model and rank count, rounds alternate which stack runs first; a run is
``hpcdl train --workload cnn`` under mpirun (one thread per rank, as the studies run), and its
figure is the record's mean samples/s (hpcdl's own timing of its timed iterations, warm-up
left out). Printed: each stack's median over rounds, and the median of the rounds' ratios
(the second stack over the first), which the machine's drift between rounds affects least.
Beside it, the step's median and its compute's (the forward and backward pass alone, as the
record probes it): where the two stacks differ in compute, TensorFlow's kernels differ; where
only the rest differs, what runs around them (Keras, the step function's dispatch, Horovod).

    python -m benchmarks.stack_throughput --python .venv/bin/python \\
        --python ../venv-tf2.15/bin/python [--rounds 3] [--ranks 1,2] [--models small,resnet50]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from hpcdl.launch import local

# (name, hpcdl train options): the small CNN of `make run`, and ResNet-50 (the workload's
# default model) at an image size that keeps a round within minutes on two cores
MODELS = {"small": ("small CNN 64x64, batch 32", ["--model", "small", "--image-size", "64",
                                        "--batch-size", "32", "--num-iters", "6"]),
          "resnet50": ("ResNet-50 96x96, batch 16", ["--model", "resnet50", "--image-size", "96",
                                                     "--batch-size", "16", "--num-iters", "4",
                                                     "--num-batches-per-iter", "3"])}


def stack_of(python: str) -> str:
    out = local.run([python, "-c", "from hpcdl import records; v = records.versions(); "
                     "print(v['tensorflow'], v['keras'], v['python'], sep='|')"],
                    timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if out.returncode != 0:
        raise SystemExit(f"{python}: cannot read its stack: {out.stderr[-500:]}")
    tf, keras, py = out.stdout.strip().splitlines()[-1].split("|")
    return f"TensorFlow {tf}, {keras}, Python {py}"


def run(python: str, ranks: int, model_args, scratch: Path) -> tuple:
    """(samples/s, seconds from launch to the end of the run, the step's median s, its compute's
    median s: the forward and backward pass alone, probed) of one training."""
    results = scratch / f"r-{time.monotonic_ns()}.jsonl"
    argv = local.mpirun_command(ranks, [python, "-m", "hpcdl", "train", "--workload", "cnn",
                                        *model_args, "--results", str(results)])
    t0 = time.monotonic()
    res = local.run(argv, timeout=1800, env=dict(os.environ, PYTHONPATH=str(ROOT),
                                                  HPCDL_THREADS="1"))
    wall = time.monotonic() - t0
    if res.returncode != 0 or res.timed_out:
        raise SystemExit(f"{python} on {ranks} rank(s) failed:\n{res.stderr[-2000:]}")
    rec = json.loads(results.read_text().splitlines()[-1])
    m = rec["metrics"]
    return (float(m["throughput"]["mean"]), wall, float(m["step_time"]["median"]),
            float(m["split"]["compute_s"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", required=True,
                    help="a stack's Python (give two: the first is the baseline)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--models", default="small,resnet50",
                    help="of: small (about 2 minutes a round on 2 cores), resnet50 (about 9)")
    opts = ap.parse_args()
    if len(opts.python) != 2:
        ap.error("give --python twice: the two stacks' interpreters")
    ranks = [int(r) for r in opts.ranks.split(",")]
    models = [MODELS[m] for m in opts.models.split(",")]
    names = [stack_of(p) for p in opts.python]
    print(f"# python -m benchmarks.stack_throughput --python {opts.python[0]} "
          f"--python {opts.python[1]} --rounds {opts.rounds} --ranks {opts.ranks} "
          f"--models {opts.models}")
    for i, n in enumerate(names):
        print(f"# stack {'AB'[i]}: {n}")
    print("# hpcdl train --workload cnn under mpirun, one thread per rank; samples/s from the "
          "record (timed iterations); rounds alternate which stack runs first")
    with tempfile.TemporaryDirectory() as tmp:
        for label, args in models:
            for p in ranks:
                got = {0: [], 1: []}
                for r in range(opts.rounds):
                    for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                        got[i].append(run(opts.python[i], p, args, Path(tmp)))
                    print(f"#   {label}, {p} rank(s), round {r + 1}: "
                          + "  ".join(f"{'AB'[i]} {got[i][-1][0]:.1f}/s ({got[i][-1][1]:.0f} s)"
                                      for i in (0, 1)), flush=True)
                med = [statistics.median(x[0] for x in got[i]) for i in (0, 1)]
                wall = [statistics.median(x[1] for x in got[i]) for i in (0, 1)]
                ratio = statistics.median(b[0] / a[0] for a, b in zip(got[0], got[1]))
                step = [statistics.median(x[2] for x in got[i]) * 1e3 for i in (0, 1)]
                comp = [statistics.median(x[3] for x in got[i]) * 1e3 for i in (0, 1)]
                c_ratio = statistics.median(b[3] / a[3] for a, b in zip(got[0], got[1]))
                print(f"{label:<28} {p} rank(s): A {med[0]:8.1f}/s  B {med[1]:8.1f}/s  "
                      f"B/A {ratio:.3f} (median of {opts.rounds} rounds' ratios); step A "
                      f"{step[0]:.1f} ms, B {step[1]:.1f} ms, of which compute A {comp[0]:.1f} "
                      f"ms, B {comp[1]:.1f} ms (B/A {c_ratio:.3f}); run wall A {wall[0]:.0f} s, "
                      f"B {wall[1]:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
