#!/usr/bin/env python
"""Synchronous against asynchronous training to a target, with and without a straggler.

Runs ``hpcdl train`` on the MNIST softmax (the 5,000 real digits, 100 per worker per step) to a
held-out accuracy target on --ranks real ranks of this machine, with each system in turn: the
sync ring (horovod), the sync parameter server (ps), ps-async with staleness 0, 2 and no bound
(Downpour), each once as it is and once with rank 1's compute slowed --factor times
(``--slow-rank 1:FACTOR``). The runs alternate system by system within each repeat, so that a
noisy minute of this shared machine falls on all of them; the table gives each one's median
over the repeats: the training time to the target (evaluation left out), the samples and
updates it took, the throughput and, for ps-async, the staleness.

    python benchmarks/async_vs_sync.py --ranks 2 --repeats 3 > results/async-vs-sync.txt
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl.launch import local  # noqa: E402

SYSTEMS = [("sync ring", ["--backend", "horovod"]),
           ("sync ps", ["--backend", "ps"]),
           ("ps-async S=0", ["--backend", "ps-async", "--staleness", "0"]),
           ("SSP S=2", ["--backend", "ps-async", "--staleness", "2"]),
           ("Downpour", ["--backend", "ps-async"])]


def run(tmp: Path, ranks: int, args, target: float, seed: int) -> dict:
    out = tmp / "runs.jsonl"
    out.unlink(missing_ok=True)
    train = ["train", "--workload", "mnist", "--data", "mnist-5k", "--batch-size", "100",
             "--steps", "1000", "--target", f"accuracy:{target:g}", "--eval-every", "1000",
             "--log-every", "1000", "--probes", "0", "--seed", str(seed), "--results", str(out),
             *args]
    argv = local.mpirun_command(ranks, local.hpcdl_command(train))
    res = local.run(argv, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT),
                                                HPCDL_THREADS="1"))
    if res.returncode != 0 or res.timed_out:
        raise SystemExit(f"hpcdl train {' '.join(args)} failed:\n{res.stdout[-2000:]}\n"
                         f"{res.stderr[-2000:]}")
    return json.loads(out.read_text().splitlines()[-1])


def figures(rec: dict) -> dict:
    m = rec["metrics"]
    t = m.get("target") or {}
    a = m.get("async") or {}
    return {"reached": bool(t.get("reached")), "time_s": t.get("time_s"),
            "samples": t.get("samples"), "updates": a.get("updates", t.get("steps")),
            "throughput": m["throughput"].get("overall", m["throughput"].get("mean")),
            "staleness_mean": (a.get("staleness") or {}).get("mean"),
            "staleness_max": (a.get("staleness") or {}).get("max"),
            "accuracy": m.get("test_accuracy")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--factor", type=float, default=2.0, help="the straggler's compute factor")
    ap.add_argument("--target", type=float, default=0.89, help="held-out accuracy")
    opts = ap.parse_args(argv)
    print(f"# python benchmarks/async_vs_sync.py --ranks {opts.ranks} --repeats {opts.repeats} "
          f"--factor {opts.factor:g} --target {opts.target:g}")
    print(f"# mnist softmax, 5,000 real digits, batch 100 per worker, target accuracy "
          f"{opts.target:g} on the 1,000 held out, evaluated every 1,000 samples; medians over "
          f"{opts.repeats} repeats (seeds 0..{opts.repeats - 1}), systems alternated per repeat")
    cases = [(name, args, slow) for slow in (False, True) for name, args in SYSTEMS]
    got = {(name, slow): [] for name, _, slow in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(opts.repeats):
            for name, args, slow in cases:
                extra = ["--slow-rank", f"1:{opts.factor:g}"] if slow else []
                got[(name, slow)].append(figures(run(Path(tmp), opts.ranks, args + extra,
                                                     opts.target, rep)))
                print(f"# repeat {rep}: {name}{' +straggler' if slow else ''}: "
                      f"{json.dumps(got[(name, slow)][-1])}", flush=True)
    print("| system | rank 1 slowed | reached | time to target (s) | samples | updates | "
          "throughput (samples/s) | staleness mean / max | final accuracy |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")

    def med(rows, key):
        vals = [r[key] for r in rows if r[key] is not None]
        return statistics.median(vals) if vals else None
    for name, _, slow in cases:
        rows = got[(name, slow)]
        reached = sum(r["reached"] for r in rows)
        t, s, u = med(rows, "time_s"), med(rows, "samples"), med(rows, "updates")
        st_mean, st_max = med(rows, "staleness_mean"), med(rows, "staleness_max")
        print(f"| {name} | {f'{opts.factor:g}x' if slow else 'no'} | {reached}/{len(rows)} | "
              + (f"{t:.3f}" if t is not None else "-") + " | "
              + (f"{s:,.0f}" if s is not None else "-") + " | "
              + (f"{u:,.0f}" if u is not None else "-") + " | "
              + f"{med(rows, 'throughput'):,.0f} | "
              + (f"{st_mean:.2f} / {st_max:.0f}" if st_mean is not None else "-") + " | "
              + f"{med(rows, 'accuracy'):.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
