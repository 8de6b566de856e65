#!/usr/bin/env python
"""Does tuning bring the training path to the MPI library's speed here, and does it cost training
nothing? Two ranks on this machine, alternating default and tuned runs, medians.

1. ``hpcdl tune`` for the small CNN's gradient tensors (2 ranks) writes ``--tuning-file``; with
   ``--knobs`` including ``backend`` (the default here) hpcdl's own exchanges are candidates too.
2. ``hpcdl bench allreduce`` at 4, 16 and 64 MiB, ``--rounds`` times with the defaults (Horovod,
   as training runs without a tuning file) and with the tuning file (the backend its pick names,
   as training runs with it), alternating: per size the median over rounds of busbw / MPI
   busbw, the MPI library's own MPI_Allreduce measured in the same run.
3. ``hpcdl train`` of the small CNN at 1 and 2 ranks, defaults and tuned alternating (no
   ``--backend``: the tuned run takes the pick's), ``--train-rounds`` pairs: the median
   throughput of each, and the median of each round's tuned/default ratio (the two runs of a
   round are neighbours in time, so the host's drift between rounds cancels in it) with the
   range of those ratios.

    python -m benchmarks.tune_local > results/tune-local.txt
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from benchmarks._run import bench_record
from hpcdl import records
from hpcdl.launch import local

WORKLOAD = ["--workload", "cnn", "--model", "small", "--image-size", "32", "--num-classes", "4000"]
SIZES = (4 << 20, 16 << 20, 64 << 20)


def _tune(path: Path, budget: float, knobs: str) -> str:
    argv = local.hpcdl_command(["tune", *WORKLOAD, "--np", "2", "--budget", str(budget),
                                "--knobs", knobs, "--out", str(path)])
    res = local.run(argv, timeout=1800)
    if res.returncode != 0 or res.timed_out:
        raise SystemExit(f"hpcdl tune failed: {res.stdout[-2000:]} {res.stderr[-2000:]}")
    return res.stdout


def _bench(tuning: str, backend: str, scratch: Path) -> dict:
    """busbw / MPI busbw per size of one bench run."""
    out = scratch / "bench.jsonl"
    argv = local.mpirun_command(2, local.hpcdl_command([
        "bench", "allreduce", "--backend", backend, "--compression", "none", "-b", "4M",
        "-e", "64M", "-f", "4", "-n", "10", "-w", "3", "--check", "0", "--results", str(out),
        "--tuning", tuning]))
    _, rec = bench_record(argv, out, 900, None, f"bench ({tuning})")
    return {r["size_bytes"]: r["busbw_gbs"] / r["mpi_busbw_gbs"] for r in rec["rows"]}


def _train(ranks: int, tuning: str, scratch: Path) -> float:
    out = scratch / "train.jsonl"
    argv = local.mpirun_command(ranks, local.hpcdl_command([
        "train", *WORKLOAD, "--batch-size", "32", "--num-warmup-batches", "3",
        "--num-batches-per-iter", "5", "--num-iters", "4", "--probes", "0",
        "--results", str(out), "--tuning", tuning]))
    _, rec = bench_record(argv, out, 900, None, f"train {ranks} rank(s) ({tuning})")
    return float(rec["metrics"]["throughput"]["mean"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--train-rounds", type=int, default=None,
                    help="pairs of hpcdl train runs per rank count (default: --rounds)")
    ap.add_argument("--budget", type=float, default=300.0, help="hpcdl tune's --budget")
    ap.add_argument("--tuning-file", default="results/tuning/local-1n-2r.json")
    ap.add_argument("--knobs", default="algorithm,cycle,fusion,hierarchical,backend",
                    help="hpcdl tune's --knobs")
    o = ap.parse_args(argv)
    o.train_rounds = o.train_rounds or o.rounds
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    print(f"# command: python -m benchmarks.tune_local --rounds {o.rounds} "
          f"--train-rounds {o.train_rounds} --budget {o.budget:g} --tuning-file {o.tuning_file} "
          f"--knobs {o.knobs}")
    print(f"# commit: {commit}; processor: {records.cpu_identity()}")
    path = Path(o.tuning_file)
    print("## hpcdl tune\n")
    print(_tune(path, o.budget, o.knobs))
    pick = json.loads(path.read_text())["picks"]["none"]
    backend = pick.get("backend", "horovod")
    print(f"pick: {pick['name']}"
          + (f", {pick['flat_gain']:.2f}x Horovod's pick ({pick['horovod_pick']})"
             if backend != "horovod" else f", {pick['gain']:.2f}x the default's exchange")
          + f"; training with the file runs {backend}\n")
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        ratios = {"default": {s: [] for s in SIZES}, "tuned": {s: [] for s in SIZES}}
        thr = {(r, t): [] for r in (1, 2) for t in ("default", "tuned")}
        for k in range(max(o.rounds, o.train_rounds)):
            order = ("default", "tuned") if k % 2 == 0 else ("tuned", "default")
            for t in order if k < o.rounds else ():
                for s, v in (_bench("default", "horovod", scratch) if t == "default" else
                             _bench(str(path), backend, scratch)).items():
                    ratios[t][s].append(v)
            for ranks in (1, 2) if k < o.train_rounds else ():
                for t in order:
                    thr[(ranks, t)].append(_train(ranks, "default" if t == "default" else str(path),
                                                  scratch))
    print("## the training path's busbw over MPI_Allreduce's, same run (medians of "
          f"{o.rounds} alternating rounds; default: horovod, tuned: {backend} with the file's "
          "settings; target tuned >= 0.9)\n")
    print("| size | default | tuned |\n|---:|---:|---:|")
    for s in SIZES:
        print(f"| {s >> 20} MiB | {statistics.median(ratios['default'][s]):.2f} | "
              f"{statistics.median(ratios['tuned'][s]):.2f} |")
    print(f"\n## hpcdl train, small CNN (img/s, medians of {o.train_rounds} alternating rounds; "
          "target tuned/default >= 0.98)\n")
    print("| ranks | default | tuned | tuned/default, medians | tuned/default, median of the "
          "rounds' ratios | their range |\n|---:|---:|---:|---:|---:|---:|")
    for ranks in (1, 2):
        ds, ts = thr[(ranks, "default")], thr[(ranks, "tuned")]
        d, t = statistics.median(ds), statistics.median(ts)
        pairs = [b / a for a, b in zip(ds, ts)]
        print(f"| {ranks} | {d:.1f} | {t:.1f} | {t / d:.3f} | {statistics.median(pairs):.3f} | "
              f"{min(pairs):.3f}–{max(pairs):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
