#!/usr/bin/env python
"""What the Keras ScalingRecorder costs: examples/keras_fit_horovod.py with and without it.

Rounds alternate which runs first; each run prints the script's own img/sec per rank (its own
timer, the same in both); the figure per rank count is the median over rounds of the
with/without ratio (target: >= 0.99, i.e. at most 1% of the step).

Alternating runs on a shared 2-core machine spread by several percent, more than the callback
can cost, so the cost is also measured directly: the time per batch that Keras' own callback
dispatch (``CallbackList``, given the batch's logs as the tensors ``fit`` passes) spends with the
recorder against without any callback, set against the step time the runs measured. Without a
callback Keras skips the batch hooks entirely, so this is what a script with no other per-batch
callback pays for the recorder: the worst case.

    python -m benchmarks.keras_recorder_overhead [--rounds 5] [--ranks 1,2] [--epochs 3]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from hpcdl.launch import local

RATE = re.compile(r"^Script img/sec per rank: ([0-9.]+)", re.M)


def rate(np_: int, opts, recorder: bool, results: Path) -> float:
    argv = [sys.executable, str(ROOT / "examples" / "keras_fit_horovod.py"), "--data", "synthetic",
            "--epochs", str(opts.epochs), "--batch-size", str(opts.batch_size),
            "--results", str(results)] + ([] if recorder else ["--no-recorder"])
    if np_ > 1:
        argv = local.mpirun_command(np_, argv)
    res = local.run(argv, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if res.returncode != 0 or res.timed_out:
        raise SystemExit(f"example failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return float(RATE.search(res.stdout).group(1))


def direct_cost(batches: int = 20_000, rounds: int = 7) -> float:
    """Seconds per batch that Keras' callback dispatch spends on the recorder: the median over
    rounds of (with the recorder - without any callback), each over ``batches`` batches."""
    import tensorflow as tf
    from hpcdl.train.keras import ScalingRecorder
    tf.get_logger().setLevel("ERROR")    # Keras warns that hooks are slow against no batch at all
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    logs = {"loss": tf.constant(0.5), "accuracy": tf.constant(0.9)}

    def per_batch(callbacks):
        cbs = tf.keras.callbacks.CallbackList(callbacks, add_history=True, add_progbar=False,
                                              model=model, epochs=1, steps=batches)
        t0 = time.perf_counter()
        for b in range(batches):
            cbs.on_train_batch_begin(b)
            cbs.on_train_batch_end(b, logs)
        return (time.perf_counter() - t0) / batches

    added = []
    for _ in range(rounds):
        rec = ScalingRecorder("-", batch_size=32, warmup=10, log_every=100)
        added.append(per_batch([rec]) - per_batch([]))
    return statistics.median(added)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    opts = ap.parse_args(argv)
    print(f"# python -m benchmarks.keras_recorder_overhead --rounds {opts.rounds} --ranks "
          f"{opts.ranks} --epochs {opts.epochs} --batch-size {opts.batch_size}")
    steps = {}
    with tempfile.TemporaryDirectory() as tmp:
        for np_ in (int(x) for x in opts.ranks.split(",")):
            ratios, without = [], []
            for r in range(opts.rounds):
                order = (True, False) if r % 2 == 0 else (False, True)
                got = {rec: rate(np_, opts, rec, Path(tmp) / "runs.jsonl") for rec in order}
                ratios.append(got[True] / got[False])
                without.append(got[False])
                print(f"ranks {np_} round {r + 1}: with {got[True]:.1f}, without {got[False]:.1f} "
                      f"img/s per rank, ratio {ratios[-1]:.3f}", flush=True)
            print(f"ranks {np_}: median ratio with/without {statistics.median(ratios):.3f} over "
                  f"{len(ratios)} rounds (target >= 0.99)", flush=True)
            steps[np_] = opts.batch_size / statistics.median(without)
    cost = direct_cost()
    print(f"direct: Keras' callback dispatch spends {cost * 1e6:.1f} us per batch on the recorder "
          f"(median of 7 rounds of 20,000 batches, against no callback at all)")
    for np_, step in steps.items():
        print(f"  ranks {np_}: {cost / step * 100:.2f}% of the example's median step without it "
              f"({step * 1e3:.2f} ms; target <= 1%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
