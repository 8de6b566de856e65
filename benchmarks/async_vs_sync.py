#!/usr/bin/env python
"""Synchronous against asynchronous training to a target, with and without a straggler.

Runs ``hpcdl train`` on the MNIST softmax (the 5,000 real digits, 100 per worker per step) to a
held-out accuracy target on --ranks real ranks of this machine, with each system in turn: the
sync ring (horovod), the sync parameter server (ps), ps-async with staleness 0, 2 and no bound
(Downpour), each once as it is and once with rank 1 a straggler whose steps take twice as
long: it sleeps, per step, the median step of the sync ring measured in the first repeat
(HPCDL_SLOW; the softmax's compute is a tenth of a millisecond, so ``--slow-rank 1:2``, which
doubles compute alone, would slow a step by a few percent). The runs alternate system by system
within each repeat, so that a noisy minute of this shared machine falls on all of them; the
table gives each one's median over the repeats: the training time to the target (evaluation
left out) from the first step and from the first evaluation (after 1,000 samples: the first
steps' graph building left out too), the samples and updates it took, the step, the
throughput and, for ps-async, the staleness.

    python -m benchmarks.async_vs_sync --ranks 2 --repeats 3 > results/async-vs-sync.txt
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

SYSTEMS = [("sync ring", ["--backend", "horovod"]),
           ("sync ps", ["--backend", "ps"]),
           ("ps-async S=0", ["--backend", "ps-async", "--staleness", "0"]),
           ("SSP S=2", ["--backend", "ps-async", "--staleness", "2"]),
           ("Downpour", ["--backend", "ps-async"])]


def run(tmp: Path, ranks: int, args, target: float, seed: int, env=None) -> dict:
    out = tmp / "runs.jsonl"
    out.unlink(missing_ok=True)
    train = ["train", "--workload", "mnist", "--data", "mnist-5k", "--batch-size", "100",
             "--steps", "1000", "--target", f"accuracy:{target:g}", "--eval-every", "1000",
             "--log-every", "1000", "--probes", "0", "--seed", str(seed), "--results", str(out),
             *args]
    argv = local.mpirun_command(ranks, local.hpcdl_command(train))
    res = local.run(argv, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT),
                                                HPCDL_THREADS="1", **(env or {})))
    if res.returncode != 0 or res.timed_out:
        raise SystemExit(f"hpcdl train {' '.join(args)} failed:\n{res.stdout[-2000:]}\n"
                         f"{res.stderr[-2000:]}")
    return json.loads(out.read_text().splitlines()[-1])


def figures(rec: dict) -> dict:
    m = rec["metrics"]
    t = m.get("target") or {}
    a = m.get("async") or {}
    evals = m.get("evals") or []
    after_first = (t["time_s"] - evals[0]["time_s"]) if t.get("reached") and evals else None
    return {"reached": bool(t.get("reached")), "time_s": t.get("time_s"),
            "after_first_eval_s": after_first, "samples": t.get("samples"),
            "updates": a.get("updates", t.get("steps")),
            "step_ms": m["step_time"]["median"] * 1e3,
            "throughput": m["throughput"].get("overall", m["throughput"].get("mean")),
            "staleness_mean": (a.get("staleness") or {}).get("mean"),
            "staleness_max": (a.get("staleness") or {}).get("max"),
            "accuracy": m.get("test_accuracy")}


def measure(opts) -> dict:
    """Every case, repeats alternated; the straggler's delay from repeat 0's sync ring."""
    cases = [(name, args, slow) for slow in (False, True) for name, args in SYSTEMS]
    got = {(name, slow): [] for name, _, slow in cases}
    delay_ms = None
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(opts.repeats):
            for name, args, slow in cases:
                if slow and delay_ms is None:
                    delay_ms = got[("sync ring", False)][0]["step_ms"]
                    print(f"# the straggler sleeps {delay_ms:.3f} ms per step (the sync ring's "
                          "median step in repeat 0)", flush=True)
                env = {"HPCDL_SLOW": f"rank=1,phase=compute,delay_ms={delay_ms:.3f}"} \
                    if slow else None
                got[(name, slow)].append(figures(run(Path(tmp), opts.ranks, args, opts.target,
                                                     rep, env)))
                print(f"# repeat {rep}: {name}{' +straggler' if slow else ''}: "
                      f"{json.dumps(got[(name, slow)][-1])}", flush=True)
    return got


def _med(rows, key):
    vals = [r[key] for r in rows if r[key] is not None]
    return statistics.median(vals) if vals else None


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--target", type=float, default=0.89, help="held-out accuracy")
    opts = ap.parse_args(argv)
    print(f"# python -m benchmarks.async_vs_sync --ranks {opts.ranks} --repeats {opts.repeats} "
          f"--target {opts.target:g}")
    print(f"# mnist softmax, 5,000 real digits, batch 100 per worker, target accuracy "
          f"{opts.target:g} on the 1,000 held out, evaluated every 1,000 samples; medians over "
          f"{opts.repeats} repeats (seeds 0..{opts.repeats - 1}), systems alternated per repeat")
    got = measure(opts)
    print("| system | rank 1 a straggler | reached | time to target (s) | from the first "
          "evaluation (s) | samples | updates | step (ms) | throughput (samples/s) | "
          "staleness mean / max | final accuracy |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (name, slow), rows in got.items():
        st = (f"{_med(rows, 'staleness_mean'):.2f} / {_med(rows, 'staleness_max'):.0f}"
              if _med(rows, "staleness_mean") is not None else "-")
        print(f"| {name} | {'2x' if slow else 'no'} | {sum(r['reached'] for r in rows)}/"
              f"{len(rows)} | {_fmt(_med(rows, 'time_s'), '.3f')} | "
              f"{_fmt(_med(rows, 'after_first_eval_s'), '.3f')} | "
              f"{_fmt(_med(rows, 'samples'), ',.0f')} | {_fmt(_med(rows, 'updates'), ',.0f')} | "
              f"{_med(rows, 'step_ms'):.2f} | {_med(rows, 'throughput'):,.0f} | {st} | "
              f"{_fmt(_med(rows, 'accuracy'), '.4f')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
