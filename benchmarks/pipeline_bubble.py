#!/usr/bin/env python
"""The pipeline's bubble measured against GPipe's (K-1)/(M+K-1), on this machine's real ranks.

Runs ``hpcdl train --parallel pipeline`` at K stages and M micro-batches on three Sequential
models: expmlp (three tiny layers: a micro-batch computes for well under a millisecond, so the
hand-over between stages weighs), the small CNN (its layers' costs are far from equal) and
benchmarks/deepmlp.py (eight equal Dense(512) layers: the stages can be made equal). The runs
alternate within each repeat; the table gives medians over the repeats of the measured bubble
(each stage's time not computing, over the step, averaged over stages), GPipe's figure for
equal stages, the figure GPipe's schedule gives for the stages' timed costs, and the bytes of
activations a step sends beside what a ring allreduce of the gradients sends per rank.

    python -m benchmarks.pipeline_bubble --repeats 3 > results/pipeline-bubble.txt
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from hpcdl.launch import local

WORKLOADS = {
    "expmlp": ["--workload", "expmlp", "--batch-size", "256", "--steps", "200", "--warmup", "20"],
    "cnn small": ["--workload", "cnn", "--model", "small", "--image-size", "32",
                  "--num-classes", "10", "--batch-size", "64", "--num-warmup-batches", "3",
                  "--num-batches-per-iter", "5", "--num-iters", "6"],
    "deepmlp": ["--workload", "benchmarks.deepmlp:factory", "--batch-size", "256", "--steps",
                "60", "--warmup", "6"],
}


def run(tmp: Path, stages: int, micro: int, args) -> dict:
    out = tmp / "runs.jsonl"
    out.unlink(missing_ok=True)
    train = ["train", *args, "--parallel", "pipeline", "--micro-batches", str(micro),
             "--log-every", "1000", "--results", str(out)]
    argv = local.mpirun_command(stages, local.hpcdl_command(train))
    res = local.run(argv, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT),
                                                HPCDL_THREADS="1"), cwd=str(ROOT))
    if res.returncode != 0 or res.timed_out:
        raise SystemExit(f"hpcdl train {' '.join(train)} failed:\n{res.stdout[-2000:]}\n"
                         f"{res.stderr[-2000:]}")
    rec = json.loads(out.read_text().splitlines()[-1])
    p = rec["metrics"]["pipeline"]
    return {"bubble": p["bubble"], "theory": p["bubble_theory"],
            "expected": p["bubble_expected"], "step_ms": rec["metrics"]["step_time"]["median"] * 1e3,
            "costs_ms": [c * 1e3 for c in p["stage_costs_s"] or []], "cut": p["cut"],
            "bytes": p["bytes_per_step"], "ring_bytes": p["ring_bytes_per_rank_at_k"],
            "throughput": rec["metrics"]["throughput"].get("overall")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--micro", default="4,8", help="micro-batch counts, comma-separated")
    opts = ap.parse_args(argv)
    micros = [int(m) for m in opts.micro.split(",")]
    print(f"# python -m benchmarks.pipeline_bubble --repeats {opts.repeats} --stages "
          f"{opts.stages} --micro {opts.micro}")
    print(f"# K = {opts.stages} stages, one rank each, one thread per rank; the cut timed "
          f"(--cut time); medians over {opts.repeats} repeats, runs alternated per repeat")
    cases = [(w, m) for w in WORKLOADS for m in micros]
    got = {c: [] for c in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(opts.repeats):
            for w, m in cases:
                got[(w, m)].append(run(Path(tmp), opts.stages, m, WORKLOADS[w]))
                print(f"# repeat {rep}: {w} M={m}: {json.dumps(got[(w, m)][-1])}", flush=True)
    print("| model | M | measured bubble | GPipe (K-1)/(M+K-1) | measured - GPipe (points) | "
          "GPipe for the timed stages | stage costs (ms per micro-batch) | step (ms) | "
          "activation bytes per step | ring bytes per rank (data parallel) |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for w, m in cases:
        rows = got[(w, m)]
        b = statistics.median(r["bubble"] for r in rows)
        t = rows[0]["theory"]
        e = statistics.median(r["expected"] for r in rows if r["expected"] is not None)
        costs = " / ".join(f"{statistics.median(r['costs_ms'][k] for r in rows):.2f}"
                           for k in range(opts.stages))
        print(f"| {w} | {m} | {b * 100:.1f}% | {t * 100:.1f}% | {(b - t) * 100:+.1f} | "
              f"{e * 100:.1f}% | {costs} | {statistics.median(r['step_ms'] for r in rows):.2f} | "
              f"{rows[0]['bytes']:,} | {rows[0]['ring_bytes']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
