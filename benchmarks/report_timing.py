#!/usr/bin/env python
"""Time 'hpcdl study report' on 1,000 records and 'hpcdl study report --help' (targets: 2 s, 1 s).

Each figure is the wall time of a fresh 'python -m hpcdl' process, best and median of --repeat
runs. The records are synthetic (a 6-point, 2-compression strong-scaling study with 1% noise)
but shaped exactly like those of 'hpcdl train'.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_records(path: Path, count: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    alpha, beta, c0, c1, fixed, nbytes, gb = 50e-6, 1e-9, 2e-3, 10e-6, 1e-3, 2_000_000, 1024
    lines, rep = [], 0
    while len(lines) < count:
        for comp, wire in (("none", 1.0), ("fp16", 0.5)):
            for p in (1, 2, 4, 8, 16, 32):
                b = gb // p
                compute = c0 + c1 * b
                ex = 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * wire * beta
                step = (compute + fixed + ex) * (1 + rng.gauss(0, 0.01))
                x = gb / step
                lines.append(json.dumps({
                    "schema": "hpcdl.run/1", "kind": "train", "study": "bench", "status": "ok",
                    "declared": {"scaling": "strong"},
                    "time": "2024-01-01T00:00:00+00:00",
                    "point": {"id": f"n{p}-r1-horovod-{comp}-rep{rep}", "repeat": rep},
                    "params": {"workload": "expmlp", "batch_size": b, "global_batch": gb,
                               "backend": "horovod", "compression": comp, "threads_per_rank": 1},
                    "layout": {"size": p, "nodes": p, "ranks_per_node": 1,
                               "hosts": [f"node{k}" for k in range(p)]},
                    "metrics": {"throughput": {"mean": x, "std": 0.01 * x, "ci95": 0.0196 * x,
                                               "n": 10, "unit": "samples/s"},
                                "step_time": {"median": step, "mean": step, "n": 100},
                                "split": {"method": "probe", "compute_s": compute,
                                          "exchange_s": step - compute},
                                "loss_curve": [[k, 1.0 / (k + 1)] for k in range(0, 1000, 100)]},
                    "gradient_bytes": nbytes,
                    "manifest": {"hosts": [f"node{k}" for k in range(p)], "git_commit": "0" * 40,
                                 "versions": {"python": "3.11.7", "tensorflow": "2.15.1"},
                                 "slurm": {"job_id": str(1000 + rep)}}}))
        rep += 1
    path.write_text("\n".join(lines[:count]) + "\n")


def wall(argv, repeat):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
        times.append(time.perf_counter() - t0)
        if res.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed:\n{res.stderr}")
    return min(times), statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "bench"
        d.mkdir()
        make_records(d / "runs.jsonl", opts.records)
        py = [sys.executable, "-m", "hpcdl", "study", "report"]
        best, med = wall(py + [str(d)], opts.repeat)
        print(f"study report, {opts.records} records: best {best:.2f} s, median {med:.2f} s "
              f"(target < 2 s): {'OK' if med < 2 else 'SLOW'}")
        best, med = wall(py + ["--help"], opts.repeat)
        print(f"study report --help: best {best:.3f} s, median {med:.3f} s "
              f"(target < 1 s): {'OK' if med < 1 else 'SLOW'}")
    code = ("import sys; from hpcdl import cli\n"
            "try: cli.main(['study', 'report', '--help'])\n"
            "except SystemExit: pass\n"
            "print([m for m in ('tensorflow', 'horovod', 'mpi4py') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.strip().splitlines()[-1]
    print(f"heavy modules imported by 'study report --help': {out}")


if __name__ == "__main__":
    main()
