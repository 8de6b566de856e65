"""Run the allreduce sweep on emulated hosts (one rank per network namespace) and compare to the model.

Brings up the cluster box ``scripts/cluster-box.sh up N --link RATE`` (N = the largest rank
count; its Slurm is not used here), runs
``hpcdl bench allreduce -B mpi,ring,ps -C none,fp16`` under mpirun with one rank per host for
each rank count, and always takes the hosts down again. Writes to ``--out``:

- ``netns-allreduce-pN.txt``: the bench table of each rank count (command in the header);
- ``netns-ps_vs_ring.txt``: ps/ring per size against the link-bound model
  (:func:`hpcdl.costmodel.bottleneck_time` with beta from the same run's ring time and gamma its
  measured add; ``bandwidth_ratio`` = p without the reduction);
- ``netns-fp16.txt``: fp16 against none, effective busbw, for ring and mpi.

Needs root (namespaces, tc).

    python benchmarks/netns_sweep.py [--ranks 2,3,4] [--rate 1gbit] [-b 1M] [-e 64M]
"""
from __future__ import annotations

import argparse
import datetime
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl import costmodel as model  # noqa: E402
from _run import BOX as HOSTS, bench_record, box_env, box_mpirun  # noqa: E402  (benchmarks/)


def _sweep(p, opts, env, header, rep=0):
    hosts = ",".join(f"10.77.0.{i}" for i in range(1, p + 1))
    bench = ["bench", "allreduce", "-B", "mpi,ring,ps", "-C", "none,fp16", "-b", opts.b,
             "-e", opts.e, "-f", opts.f, "-n", opts.n, "-w", opts.w, "--results", opts.results,
             "--tag", f"netns {p} hosts {opts.rate}"
             + (f" repeat {rep + 1}/{opts.repeats}" if opts.repeats > 1 else "")]
    argv = box_mpirun(hosts, bench)
    res, rec = bench_record(argv, opts.results, opts.timeout, env, f"sweep at {p} hosts")
    shown = " ".join(f"{k}={shlex.quote(v.replace(str(ROOT) + '/', ''))}"
                     for k, v in sorted(box_env().items()))
    cmd = f"{shown} mpirun -np {p} -H {hosts} --bind-to none python -m hpcdl {shlex.join(bench)}"
    text = f"# command: {cmd}   ({header})\n" + res.stdout
    path = Path(opts.out) / f"netns-allreduce-p{p}.txt"
    if rep == 0:
        path.write_text(text)
    else:
        with path.open("a") as f:
            f.write("\n" + text)
    return rec


def _rows_per_sweep(recs):
    """(backend, compression, size) -> that row of every sweep, in sweep order."""
    per = [{(r["backend"], r["compression"], r["size_bytes"]): r for r in rec["rows"]}
           for rec in recs]
    return {key: [rows[key] for rows in per] for key in per[0]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,3,4")
    ap.add_argument("--rate", default="1gbit", help="tc rate of each link, each way (1gbit)")
    ap.add_argument("-b", default="1M")
    ap.add_argument("-e", default="64M")
    ap.add_argument("-f", default="4")
    ap.add_argument("-n", default="5")
    ap.add_argument("-w", default="1")
    ap.add_argument("--results", default="results/bench/netns.jsonl")
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--tolerance", type=float, default=0.25)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--repeats", type=int, default=1,
                    help="sweeps per rank count; ratios are taken per sweep, then the median")
    opts = ap.parse_args(argv)
    ranks = [int(x) for x in opts.ranks.split(",")]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HPCDL_THREADS="1", **box_env())
    recs = {}
    subprocess.run([str(HOSTS), "up", str(max(ranks)), "--link", opts.rate], check=True)
    try:
        route = subprocess.run(["ip", "-n", "hpcdl-n1", "route"], check=True, capture_output=True,
                               text=True).stdout
        cc = route.split("congctl", 1)[1].split()[0] if "congctl" in route else "default"
        header = (f"{max(ranks)} network namespaces, veth to a bridge, tbf {opts.rate} each way "
                  f"per link, TCP {cc}; each node a CPU quota (cluster-box.sh); {when}")
        for rep in range(opts.repeats):      # interleaved, so that a busy minute hits every p
            for p in ranks:
                recs.setdefault(p, []).append(_sweep(p, opts, env, header, rep))
    finally:
        subprocess.run([str(HOSTS), "down"], check=True)

    this = f"python benchmarks/netns_sweep.py {shlex.join(argv if argv is not None else sys.argv[1:])}"
    med = statistics.median
    lines = [f"# command: {this}   ({header})",
             "# ps vs ring, one rank per emulated host: median times; model = ps time predicted by "
             "hpcdl.costmodel.bottleneck_time(link-bound) with beta from the same run's ring time and "
             "gamma its measured add, over the measured ring; link = bandwidth_ratio(p, link-bound)",
             f"# {opts.repeats} sweep(s) per rank count: times are medians over sweeps, ps/ring and "
             "model the median of the per-sweep ratios, [min-max] of ps/ring over sweeps",
             f"#{'ranks':>5} {'size(B)':>10} {'ring(us)':>10} {'ps(us)':>10} {'ps/ring':>8} "
             f"{'[min-max]':>11} {'model':>6} {'link':>5} {'agree':>5}"]
    agree = total = 0
    for p, prec in recs.items():
        rows = _rows_per_sweep(prec)
        for size in sorted({k[2] for k in rows}):
            ratios, preds, rings, pss = [], [], [], []
            for rr, pr in zip(rows[("ring", "none", size)], rows[("ps", "none", size)]):
                ring, ps = rr["time_us"]["median"], pr["time_us"]["median"]
                gamma = rr["reduce_us"] / size
                unit = model.bottleneck_time("ring", size, p, 1.0, 0.0, model.LINK_BOUND)
                beta = max(0.0, ring - model.bottleneck_time("ring", size, p, 0.0, gamma,
                                                           model.LINK_BOUND)) / unit
                preds.append(model.bottleneck_time("ps", size, p, beta, gamma, model.LINK_BOUND)
                             / ring)
                ratios.append(ps / ring)
                rings.append(ring)
                pss.append(ps)
            ratio, pred = med(ratios), med(preds)
            ok = abs(ratio / pred - 1) <= opts.tolerance
            agree += ok
            total += 1
            span = f"[{min(ratios):.2f}-{max(ratios):.2f}]"
            lines.append(f" {p:>5} {size:>10} {med(rings):>10.1f} {med(pss):>10.1f} {ratio:>8.2f} "
                         f"{span:>11} {pred:>6.2f} "
                         f"{model.bandwidth_ratio(p, model.LINK_BOUND):>5.1f} "
                         f"{'yes' if ok else 'no':>5}")
    lines.append(f"# {agree}/{total} rows within +-{opts.tolerance * 100:.0f}% of the model's ratio")
    (Path(opts.out) / "netns-ps_vs_ring.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    lines = [f"# command: {this}   ({header})",
             "# fp16 against none: effective busbw (float32 bytes / median time * 2(p-1)/p) in the "
             "same run; target >= 1.5 at >= 16 MiB",
             f"# {opts.repeats} sweep(s) per rank count: busbw the median over sweeps, ratio the "
             "median of the per-sweep ratios, [min-max] over sweeps",
             f"#{'ranks':>5} {'backend':>7} {'size(B)':>10} {'none GB/s':>9} {'fp16 GB/s':>9} "
             f"{'ratio':>6} {'[min-max]':>11} {'met':>4}"]
    met = {}
    for p, prec in recs.items():
        rows = _rows_per_sweep(prec)
        for backend in ("ring", "mpi"):
            for size in sorted(s for b, c, s in rows if b == backend and c == "none"
                               and s >= 16 << 20):
                nones = [r["busbw_gbs"] for r in rows[(backend, "none", size)]]
                fp16s = [r["busbw_gbs"] for r in rows[(backend, "fp16", size)]]
                ratios = [f / n for f, n in zip(fp16s, nones)]
                ratio = med(ratios)
                ok = ratio >= 1.5
                met.setdefault((p, backend), []).append(ok)
                span = f"[{min(ratios):.2f}-{max(ratios):.2f}]"
                lines.append(f" {p:>5} {backend:>7} {size:>10} {med(nones):>9.3f} "
                             f"{med(fp16s):>9.3f} {ratio:>6.2f} {span:>11} "
                             f"{'yes' if ok else 'NO':>4}")
    for (p, backend), oks in met.items():
        lines.append(f"# {p} ranks {backend}: {sum(oks)}/{len(oks)} sizes meet the target")
    (Path(opts.out) / "netns-fp16.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
