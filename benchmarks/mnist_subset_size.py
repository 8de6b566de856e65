#!/usr/bin/env python
"""What the size of mnist-5k does to the seeds' softmax: test accuracy against training digits.

The seeds' softmax regression (``hpcdl train --workload mnist``: 1,000 steps of batch 100,
learning rate 0.5) on nested subsets of mnist-5k's 4,000 training digits (the same number of
each class in every subset), always tested on its 1,000 held-out digits, for several seeds. Each
subset is written as an ``mnist.npz`` and trained on through the ordinary ``--data PATH``. The
table gives the median test accuracy per size, and a least-squares line of accuracy against
log2(digits) with the number of digits at which it would reach the seeds' 0.91 (marked as an
extrapolation, not a measurement).

    python -m benchmarks.mnist_subset_size [--sizes 500,1000,2000,4000] [--seeds 5] [--out FILE]
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from hpcdl.workloads import mnist

ACC = re.compile(r"^Test accuracy: ([0-9.]+)$", re.M)


def nested_subset(y: np.ndarray, k: int) -> np.ndarray:
    """The first k/10 digits of each class, in a fixed shuffled order: subsets nest."""
    order = np.random.default_rng(0).permutation(len(y))
    per = k // 10
    return np.sort(np.concatenate([order[y[order] == c][:per] for c in range(10)]))


def accuracy(npz: Path, seed: int) -> float:
    res = subprocess.run([sys.executable, "-m", "hpcdl", "train", "--workload", "mnist",
                          "--data", str(npz), "--seed", str(seed), "--results", "-"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"hpcdl train failed on {npz}:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return float(ACC.search(res.stdout).group(1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="500,1000,2000,4000")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=None, help="also write the table here")
    opts = ap.parse_args(argv)
    x_train, y_train, x_test, y_test = mnist.mnist5k_arrays()
    sizes = [int(s) for s in opts.sizes.split(",")]
    lines = [f"# python -m benchmarks.mnist_subset_size --sizes {opts.sizes} --seeds {opts.seeds}",
             "# the seeds' softmax, 1,000 steps of batch 100, lr 0.5; tested on mnist-5k's 1,000 "
             "held-out digits",
             f"{'training digits':>16} {'passes':>7} {'median acc':>11} {'min':>7} {'max':>7}"]
    med = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in sizes:
            idx = nested_subset(y_train, k)
            npz = Path(tmp) / f"mnist-{k}.npz"
            np.savez(npz, x_train=x_train[idx], y_train=y_train[idx], x_test=x_test, y_test=y_test)
            accs = [accuracy(npz, s) for s in range(opts.seeds)]
            med.append(statistics.median(accs))
            lines.append(f"{len(idx):>16} {100_000 / len(idx):>7.1f} {med[-1]:>11.4f} "
                         f"{min(accs):>7.4f} {max(accs):>7.4f}")
            print(lines[-1], flush=True)
    slope, icpt = np.polyfit(np.log2(sizes), med, 1)
    lines.append(f"# least squares: accuracy = {icpt:.4f} + {slope:.4f} x log2(digits): "
                 f"{slope * 100:.2f} points per doubling; EXTRAPOLATED (a line, not a "
                 f"measurement): 0.91 at {2 ** ((0.91 - icpt) / slope):,.0f} digits")
    text = "\n".join(lines) + "\n"
    print(lines[-1])
    if opts.out:
        Path(opts.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
