"""The exchange calibrated from a short allreduce bench on the box, beside the study's own.

A study's report predicts its larger points from its runs on at most N nodes; the exchange part
comes either from those runs (the bytes on each link at the link's rate, plus what the runs spent
beyond it) or, with ``[model] fit`` (or ``--fit``) beside ``calibrate``, from ``hpcdl bench fit``
of a short ``hpcdl bench allreduce`` on the allocation. This script measures the second on the
cluster box at its current link rate: it runs the bench (Horovod, the path a training step
calls) on 2 nodes, one rank each under the nodes' CPU quotas, fits it, renders the study's report
with that fit into a scratch folder, and appends to ``--out`` each held-out point's exchange and
step as measured, as the study's own calibration predicts them and as the bench fit does, with
what the bench cost in seconds.

Needs the box up (scripts/cluster-box.sh up 8 --link RATE) and its Slurm queue idle: the bench
uses the nodes as a job would.

    python benchmarks/exchange_fit_check.py --study results/box-cnn-weak [--ranks 2]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl import box  # noqa: E402
from _run import bench_record, box_env, box_mpirun  # noqa: E402  (benchmarks/, this directory)


def _report(study: str, fit: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "hpcdl", "study", "report", study, "--out", str(out)]
    if fit is not None:
        cmd += ["--fit", str(fit)]
    subprocess.run(cmd, check=True, capture_output=True, text=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return json.loads((out / "report.json").read_text())["prediction"]


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.0f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", default="results/box-cnn-weak")
    ap.add_argument("--ranks", type=int, default=2, help="nodes the bench runs on (2)")
    ap.add_argument("-b", default="512K")
    ap.add_argument("-e", default="8M")
    ap.add_argument("-n", default="10")
    ap.add_argument("--out", default="results/exchange-fit-check.txt")
    ap.add_argument("--timeout", type=float, default=600)
    opts = ap.parse_args(argv)
    settings = box.load()
    if not settings:
        raise SystemExit("no box is up: scripts/cluster-box.sh up 8 --link RATE first")
    rate = settings["link_rate"]
    work = Path(tempfile.mkdtemp(prefix="exchange-fit-"))
    results, fit = work / "allreduce.jsonl", work / f"fit-{rate}.json"
    hosts = ",".join(settings["nodes"][f"n{i}"]["addr"] for i in range(1, opts.ranks + 1))
    bench = ["bench", "allreduce", "-B", "horovod", "-C", "none", "-b", opts.b, "-e", opts.e,
             "-n", opts.n, "-w", "2", "--results", str(results), "--tag", f"box {rate}"]
    argv_ = box_mpirun(hosts, bench)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HPCDL_THREADS="1", **box_env())
    t0 = time.monotonic()
    bench_record(argv_, results, opts.timeout, env, f"the bench on {opts.ranks} nodes")
    cost = time.monotonic() - t0
    subprocess.run([sys.executable, "-m", "hpcdl", "bench", "fit", "--input", str(results),
                    "--output", str(fit)], check=True, capture_output=True, text=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    entry = json.loads(fit.read_text())["backends"]["horovod"]
    own = _report(opts.study, None, work / "own")
    fitted = _report(opts.study, fit, work / "fit")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    this = f"python benchmarks/exchange_fit_check.py {shlex.join(sys.argv[1:] if argv is None else argv)}"
    lines = [f"# command: {this}   (box {settings['box']}, {rate}, {when})",
             f"# bench: hpcdl bench allreduce -B horovod {opts.b}..{opts.e} on {opts.ranks} nodes "
             f"took {cost:.0f} s; fit α = {entry['alpha_s'] * 1e6:.0f} µs, "
             f"β = {entry['beta_s_per_byte'] * 1e9:.3f} ns/B ({entry.get('model', 'ring')})",
             f"# {opts.study}, axes at {rate}: held-out points, exchange and step as measured, "
             "as the study's own calibration (runs on <= 2 nodes) predicts them, and with the "
             "exchange from the bench fit",
             f"#{'axis':>22} {'nodes':>5} {'exch(ms)':>8} {'own':>6} {'err':>7} {'fit':>6} "
             f"{'err':>7} {'step(ms)':>8} {'own':>6} {'err':>7} {'fit':>6} {'err':>7}"]
    errs = {"own": [], "fit": []}
    fit_axes = {a["axis"]: a for a in fitted["axes"]}
    for ax in own["axes"]:
        if not ax["axis"].endswith(f"@{rate}") or ax["backend"] == "ps" \
                or ax["axis"] not in fit_axes:
            continue
        by_p = {pt["nodes"]: pt for pt in fit_axes[ax["axis"]]["points"]}
        for pt in ax["points"]:
            if pt["fitted"]:
                continue
            f = by_p[pt["nodes"]]
            m = pt["measured"]
            errs["own"].append(abs(pt["error"]["exchange"]))
            errs["fit"].append(abs(f["error"]["exchange"]))
            lines.append(f" {ax['axis']:>22} {pt['nodes']:>5} {_ms(m['exchange']):>8} "
                         f"{_ms(pt['predicted']['exchange']):>6} {_pct(pt['error']['exchange']):>7} "
                         f"{_ms(f['predicted']['exchange']):>6} {_pct(f['error']['exchange']):>7} "
                         f"{_ms(m['step']):>8} {_ms(pt['predicted']['step']):>6} "
                         f"{_pct(pt['error']['step']):>7} {_ms(f['predicted']['step']):>6} "
                         f"{_pct(f['error']['step']):>7}")
    if errs["own"]:
        lines.append(f"# mean |exchange error|: own calibration "
                     f"{sum(errs['own']) / len(errs['own']) * 100:.1f}%, bench fit "
                     f"{sum(errs['fit']) / len(errs['fit']) * 100:.1f}% "
                     f"({len(errs['own'])} held-out points)")
    out = Path(opts.out)
    text = "\n".join(lines) + "\n"
    with out.open("a") as fh:
        fh.write(("\n" if out.exists() and out.stat().st_size else "") + text)
    print(text, end="")
    print(f"# fit kept in {fit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
