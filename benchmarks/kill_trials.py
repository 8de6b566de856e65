"""Kill one rank of a training job at a random step, many times, and measure how the job ends.

Each trial runs ``hpcdl train`` on N real ranks under mpirun with ``HPCDL_FAULT`` set so that a
randomly chosen rank fails at a randomly chosen step (``kill``: SIGKILL, as when a node or the
OOM killer takes a process; ``raise``: an exception in the training loop; ``hang``: the rank stops
without exiting, which only Horovod's stall shutdown can end). A trial measures:

- time to exit: from the fault (the wall-clock stamp the failing rank logs) to mpirun's exit;
- hang: the job still running 60 s after the fault (it is then killed; a hard limit per trial);
- records lost: records already in the shared results file that are no longer there, whole and
  unchanged, after the trial (the file is seeded with a real record of a completed run).

Trials append one JSON line each to ``results/robustness/kill_trials.jsonl``; ``--summarize``
writes the table ``results/robustness/kill_trials.md`` from all trials recorded there. Run in
chunks (``--trials 5``) to keep each measurement short on a shared machine::

    python -m benchmarks.kill_trials --ranks 2 --trials 5
    python -m benchmarks.kill_trials --summarize
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from hpcdl import records
from hpcdl.launch import local

HANG_AFTER_S = 60.0
_FAULT = re.compile(r"\[(\d+)@(\S+)\] HPCDL_FAULT: injecting '(\w+)' at step (\d+) \(t=([\d.]+)\)")


def _train_args(steps: int, results: Path):
    return ["train", "--workload", "expmlp", "--steps", str(steps), "--batch-size", "50",
            "--log-every", "50", "--probes", "0", "--results", str(results), "--tag", "kill-trials"]


def _env(extra=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.update(extra or {})
    return env


def _snapshot(path: Path):
    """Digests of the whole records in a results file."""
    return [hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()
            for r in records.read(path, warn=False)]


def _seed(results: Path, steps: int, timeout: float) -> None:
    """Give the shared results file a real record of a completed 2-rank run."""
    if records.read(results, warn=False):
        return
    argv = local.mpirun_command(2, local.hpcdl_command(_train_args(steps, results)))
    res = local.run(argv, timeout=timeout, env=_env())
    if res.returncode != 0 or not records.read(results, warn=False):
        sys.exit(f"the seeding run failed (exit {res.returncode}):\n{res.stderr[-3000:]}")


def trial(np_: int, kind: str, rank: int, step: int, steps: int, results: Path, timeout: float) -> dict:
    before = _snapshot(results)
    size_before = results.stat().st_size
    argv = local.mpirun_command(np_, local.hpcdl_command(_train_args(steps, results)))
    t0 = time.time()
    res = local.run(argv, timeout=timeout, env=_env({"HPCDL_FAULT": f"rank={rank},step={step},kind={kind}"}))
    ended = time.time()
    m = _FAULT.search(res.stderr)
    fault_t = float(m.group(5)) if m else None
    to_exit = (ended - fault_t) if fault_t else None
    after = _snapshot(results)
    lost = sum(1 for d in before if d not in after)
    named = bool(re.search(rf"(process rank {rank} with PID \d+ on node \S+ exited on signal|"
                           rf"\[{rank}@\S+\] hpcdl train: .*ending the job)", res.stderr))
    return {
        "ranks": np_, "kind": kind, "rank": rank, "step": step, "steps": steps,
        "fault_seen": bool(m), "exit_status": res.returncode, "timed_out": res.timed_out,
        "time_to_exit_s": to_exit, "wall_s": ended - t0,
        "hang": bool(res.timed_out or to_exit is None or to_exit > HANG_AFTER_S),
        "rank_named": named, "records_before": len(before), "records_lost": lost,
        "records_added": len(after) - len(before) + lost,
        "file_grew_bytes": results.stat().st_size - size_before,
        "stderr_tail": res.stderr[-600:],
    }


def summarize(out: Path) -> str:
    rows = records.read(out / "kill_trials.jsonl", warn=False)
    if not rows:
        return "no trials recorded"
    first = rows[0]
    lines = ["# Kill trials: one rank of an `hpcdl train` job fails at a random step",
             "",
             f"# host: {first.get('host')}, {first.get('cpu_count')} cores; "
             f"{first.get('versions', {}).get('mpi')}; Horovod {first.get('versions', {}).get('horovod')}; "
             f"git {first.get('git_commit')}",
             f"# workload: expmlp, batch 50/rank, fault at a uniformly random step of "
             f"{first['steps']} on a uniformly random rank; hang = still running {HANG_AFTER_S:g} s "
             "after the fault",
             "# command: python -m benchmarks.kill_trials --ranks N --kind K --trials T (in chunks), "
             "then --summarize",
             "",
             "| ranks | kind | trials | hangs | exit != 0 | rank named | median time to exit (s) | "
             "max time to exit (s) | records lost | records added |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted({(r["ranks"], r["kind"]) for r in rows}):
        sel = [r for r in rows if (r["ranks"], r["kind"]) == key]
        times = [r["time_to_exit_s"] for r in sel if r["time_to_exit_s"] is not None]
        lines.append(
            f"| {key[0]} | {key[1]} | {len(sel)} | {sum(r['hang'] for r in sel)} | "
            f"{sum(r['exit_status'] != 0 for r in sel)} | {sum(r['rank_named'] for r in sel)} | "
            f"{statistics.median(times):.2f} | {max(times):.2f} | "
            f"{sum(r['records_lost'] for r in sel)} | {sum(r['records_added'] for r in sel)} |")
    lines += ["", "Time to exit runs from the failing rank's own timestamp of the fault to the end "
                  "of mpirun (all ranks gone). The results file was seeded with a completed run's "
                  "record; a record lost would be one no longer whole and unchanged after a trial; "
                  "a failed job adds none."]
    text = "\n".join(lines) + "\n"
    (out / "kill_trials.md").write_text(text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--trials", type=int, default=20, help="trials per rank count")
    p.add_argument("--kind", choices=("kill", "raise", "exit", "hang"), default="kill",
                   help="hang: the rank sleeps forever without exiting; only Horovod's stall "
                        "shutdown ends such a job (use a --timeout of several minutes)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--timeout", type=float, default=240.0,
                   help="hard limit per trial (start-up of 4 TensorFlow ranks on 2 cores included)")
    p.add_argument("--seed", type=int, default=None, help="seed of the random ranks and steps")
    p.add_argument("--out", default=str(ROOT / "results" / "robustness"))
    p.add_argument("--summarize", action="store_true", help="only write the table of recorded trials")
    opts = p.parse_args(argv)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    if opts.summarize:
        print(summarize(out))
        return 0
    results = out / "kill_trials-runs.jsonl"
    _seed(results, opts.steps, opts.timeout)
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(2 ** 31)
    rnd = random.Random(seed)
    manifest = records.manifest()
    common = {"seed": seed, "host": manifest["hosts"][0], "cpu_count": manifest["cpu_count"],
              "versions": manifest["versions"], "git_commit": manifest["git_commit"],
              "time": records.now_iso()}
    for np_ in opts.ranks:
        for k in range(opts.trials):
            row = trial(np_, opts.kind, rnd.randrange(np_), rnd.randrange(1, opts.steps - 1),
                        opts.steps, results, opts.timeout)
            row.update(common, trial=k)
            records.append(out / "kill_trials.jsonl", row)
            print(f"{np_} ranks, {opts.kind} rank {row['rank']} at step {row['step']}: exit "
                  f"{row['exit_status']}, {row['time_to_exit_s'] or float('nan'):.2f} s to exit, "
                  f"hang {row['hang']}, rank named {row['rank_named']}, records lost "
                  f"{row['records_lost']}", flush=True)
    print(summarize(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
