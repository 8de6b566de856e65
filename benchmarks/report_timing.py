#!/usr/bin/env python
"""Time 'hpcdl study report' on 1,000 records and 'hpcdl study report --help' (targets: 2 s, 1 s),
and, with --scale N, its wall time and memory on N records (target at 72,000: under 10 s and
200 MB).

Each figure is the wall time of a fresh 'python -m hpcdl' process, best and median of --repeat
runs. The 1,000 records are synthetic (a 6-point, 2-compression strong-scaling study with 1%
noise) but shaped exactly like those of 'hpcdl train'. The N records of --scale are committed
studies' own records copied as further repeats (:func:`copy_study`): local-mnist-weak's (6.3 KB a
line, the size the target was set on) and box-cnn-weak's (9.7 KB, up to 8 ranks' phases each).
Memory is the report's peak resident set and, where it reads with several processes, the peak of
all of them together (proportional set sizes, pages shared after the fork counted once).
"""
import argparse
import datetime as dt
import json
import os
import random
import re
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


def copy_study(src: Path, path: Path, count: int) -> int:
    """``count`` records made of a study's own records, copied as further repeats: copy k shifts
    the run's time stamps by k times the study's span (plus an hour) and numbers its repeats
    after the original's, so no two copies overlap and nothing else changes. Returns the bytes
    written."""
    recs = [json.loads(ln) for ln in src.read_text().splitlines() if ln.strip()]
    stamps = [dt.datetime.fromisoformat(r["time"]) for r in recs]
    shift = (max(stamps) - min(stamps)) + dt.timedelta(hours=1)
    reps = 1 + max(int(r["point"]["repeat"]) for r in recs)

    def moved(stamp: str, k: int) -> str:
        return (dt.datetime.fromisoformat(stamp) + k * shift).isoformat()
    written = 0
    with path.open("w") as f:
        for k in range(-(-count // len(recs))):
            for rec in recs[:count - k * len(recs)]:
                rec = json.loads(json.dumps(rec))
                rep = int(rec["point"]["repeat"]) + k * reps
                rec["point"]["repeat"] = rep
                rec["point"]["id"] = re.sub(r"rep\d+$", f"rep{rep}", rec["point"]["id"])
                rec["time"] = moved(rec["time"], k)
                man = rec.get("manifest") or {}
                for key in ("started", "time"):
                    if man.get(key):
                        man[key] = moved(man[key], k)
                line = json.dumps(rec, separators=(",", ":"), sort_keys=True) + "\n"
                f.write(line)
                written += len(line)
    return written


def _tree(pid: int) -> list:
    """``pid`` and its descendants (from /proc)."""
    kids = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _kb(pid: int, name: str, field: str) -> int:
    """A ``field:`` of /proc/PID/<name> in kB (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_measured(argv, env) -> tuple:
    """(wall s, peak resident MB of the report's process, peak MB of it and its children
    together): the last is the sum of their proportional set sizes (pages shared after a fork
    counted once), sampled every 20 ms."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)
    main = tree = 0
    while proc.poll() is None:
        main = max(main, _kb(proc.pid, "status", "VmHWM"))
        tree = max(tree, sum(_kb(p, "smaps_rollup", "Pss") for p in _tree(proc.pid)))
        time.sleep(0.02)
    wall_s = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stderr.read()}")
    return wall_s, main / 1024, tree / 1024


def run_timed(argv, env) -> float:
    """The wall seconds of one run with nothing polling it (polling /proc costs the run CPU)."""
    t0 = time.perf_counter()
    res = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=env, cwd=ROOT)
    took = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{res.stderr}")
    return took


def wall(argv, repeat):
    """(best, median) wall seconds of ``repeat`` runs."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    times = [run_timed(argv, env) for _ in range(repeat)]
    return min(times), statistics.median(times)


SCALE_FROM = ("local-mnist-weak", "box-cnn-weak")


def scale(n: int) -> None:
    """The report on ``n`` copied records of each of :data:`SCALE_FROM`, read by one process and
    by the default number (one per core), alternating, the median of 3 runs each: its wall time
    from runs nothing polls, its memory from runs sampled every 20 ms, alternating too."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    print(f"# {n:,} records; wall s (runs nothing polls), peak MB of the report's process, of "
          "all its processes (runs sampled every 20 ms)")
    with tempfile.TemporaryDirectory() as tmp:
        for study in SCALE_FROM:
            d = Path(tmp) / study
            d.mkdir()
            size = copy_study(ROOT / "results" / study / "runs.jsonl", d / "runs.jsonl", n)
            runs = {"1": [], "default": []}
            for _ in range(3):
                for w in runs:
                    argv = [sys.executable, "-m", "hpcdl", "study", "report", str(d), "--out",
                            str(Path(tmp) / "out")] + (["--workers", w] if w == "1" else [])
                    runs[w].append((run_timed(argv, env),) + run_measured(argv, env)[1:])
            for w, got in runs.items():
                t, main_mb, all_mb = (statistics.median(x) for x in zip(*got))
                ok = t < 10 and max(main_mb, all_mb) < 200
                print(f"{study:>17} ({size / 1e6:.0f} MB) workers {w:>7}: {t:5.1f} s, "
                      f"{main_mb:4.0f} MB, all {all_mb:4.0f} MB "
                      f"(target < 10 s, < 200 MB): {'OK' if ok else 'MISSED'}")
            out = subprocess.run([sys.executable, "-c", PHASES, str(d), str(Path(tmp) / "out")],
                                 capture_output=True, text=True, env=env, cwd=ROOT, check=True)
            print(f"{study:>17} one more run, default workers, by phase: {out.stdout.strip()}")


# one report, each phase's wall time (the reading, the analysis, the plots, report.json)
PHASES = """
import sys, time
from hpcdl import analysis, report
from hpcdl.report import writing
took = {}
def timed(mod, name, label):
    f = getattr(mod, name)
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            took[label] = took.get(label, 0.0) + time.perf_counter() - t
    setattr(mod, name, g)
for mod, name, label in ((writing, "_read", "reading"), (analysis, "analyse", "analysis"),
                         (writing, "draw_plots", "plots"), (writing, "_write_json", "report.json")):
    timed(mod, name, label)
t0 = time.perf_counter()
report.write_report(sys.argv[1], out_dir=sys.argv[2])
took["whole"] = time.perf_counter() - t0
print(", ".join(f"{k} {v:.1f} s" for k, v in took.items()))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scale", type=int, default=0, metavar="N",
                    help="only the wall time and memory on N copied records")
    opts = ap.parse_args()
    if opts.scale:
        scale(opts.scale)
        return
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
