"""Run the allreduce sweep on emulated hosts (one rank per network namespace) and compare to the model.

Brings up ``benchmarks/netns_hosts.sh up N RATE`` (N = the largest rank count), runs
``hpcdl bench allreduce -B mpi,ring,ps -C none,fp16`` under mpirun with one rank per host for
each rank count, and always takes the hosts down again. Writes to ``--out``:

- ``netns-allreduce-pN.txt``: the bench table of each rank count (command in the header);
- ``netns-ps_vs_ring.txt``: ps/ring per size against the link-bound model
  (:func:`hpcdl.comm.model.exchange_time` with beta from the same run's ring time and gamma its
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
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl import records  # noqa: E402
from hpcdl.comm import model  # noqa: E402
from hpcdl.launch import local  # noqa: E402

HOSTS = ROOT / "benchmarks" / "netns_hosts.sh"


def _hosts_env() -> dict:
    out = subprocess.run([str(HOSTS), "env"], check=True, capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _sweep(p, opts, env, header):
    hosts = ",".join(f"10.213.0.{i}" for i in range(1, p + 1))
    bench = ["bench", "allreduce", "-B", "mpi,ring,ps", "-C", "none,fp16", "-b", opts.b,
             "-e", opts.e, "-f", opts.f, "-n", opts.n, "-w", opts.w, "--results", opts.results,
             "--tag", f"netns {p} hosts {opts.rate}"]
    # one rank per host, unbound: each host's daemon would otherwise pin its rank to core 0
    argv = local.mpirun_command(p, local.hpcdl_command(bench), oversubscribe=False, bind="none",
                                extra=["-H", hosts])
    before = len(records.read(opts.results)) if Path(opts.results).exists() else 0
    res = local.run(argv, timeout=opts.timeout, env=env)
    if res.returncode != 0 or res.timed_out:
        print(res.stdout[-3000:], res.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"sweep at {p} hosts failed (rc {res.returncode}, timed out "
                         f"{res.timed_out})")
    shown = " ".join(f"{k}={shlex.quote(v.replace(str(ROOT) + '/', ''))}"
                     for k, v in sorted(_hosts_env().items()))
    cmd = f"{shown} mpirun -np {p} -H {hosts} --bind-to none python -m hpcdl {shlex.join(bench)}"
    (Path(opts.out) / f"netns-allreduce-p{p}.txt").write_text(
        f"# command: {cmd}   ({header})\n" + res.stdout)
    return records.read(opts.results)[before]


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
    opts = ap.parse_args(argv)
    ranks = [int(x) for x in opts.ranks.split(",")]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    header = (f"{max(ranks)} network namespaces, veth to a bridge, tbf {opts.rate} each way per "
              f"link; {os.cpu_count()} cores shared; {when}")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HPCDL_THREADS="1", **_hosts_env())
    recs = {}
    subprocess.run([str(HOSTS), "up", str(max(ranks)), opts.rate], check=True)
    try:
        for p in ranks:
            recs[p] = _sweep(p, opts, env, header)
    finally:
        subprocess.run([str(HOSTS), "down"], check=True)

    this = f"python benchmarks/netns_sweep.py {shlex.join(argv if argv is not None else sys.argv[1:])}"
    lines = [f"# command: {this}   ({header})",
             "# ps vs ring, one rank per emulated host: median times; model = ps time predicted by "
             "hpcdl.comm.model.exchange_time(link-bound) with beta from the same run's ring time and "
             "gamma its measured add, over the measured ring; link = bandwidth_ratio(p, link-bound)",
             f"#{'ranks':>5} {'size(B)':>10} {'ring(us)':>10} {'ps(us)':>10} {'ps/ring':>8} "
             f"{'model':>6} {'link':>5} {'agree':>5}"]
    agree = total = 0
    for p, rec in recs.items():
        rows = {(r["backend"], r["compression"], r["size_bytes"]): r for r in rec["rows"]}
        for size in sorted({k[2] for k in rows}):
            ring = rows[("ring", "none", size)]["time_us"]["median"]
            ps = rows[("ps", "none", size)]["time_us"]["median"]
            gamma = rows[("ring", "none", size)]["reduce_us"] / size
            unit = model.exchange_time("ring", size, p, 1.0, 0.0, model.LINK_BOUND)
            beta = max(0.0, ring - model.exchange_time("ring", size, p, 0.0, gamma,
                                                       model.LINK_BOUND)) / unit
            pred = model.exchange_time("ps", size, p, beta, gamma, model.LINK_BOUND) / ring
            ok = abs((ps / ring) / pred - 1) <= opts.tolerance
            agree += ok
            total += 1
            lines.append(f" {p:>5} {size:>10} {ring:>10.1f} {ps:>10.1f} {ps / ring:>8.2f} "
                         f"{pred:>6.2f} {model.bandwidth_ratio(p, model.LINK_BOUND):>5.1f} "
                         f"{'yes' if ok else 'no':>5}")
    lines.append(f"# {agree}/{total} rows within +-{opts.tolerance * 100:.0f}% of the model's ratio")
    (Path(opts.out) / "netns-ps_vs_ring.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    lines = [f"# command: {this}   ({header})",
             "# fp16 against none: effective busbw (float32 bytes / median time * 2(p-1)/p) in the "
             "same run; target >= 1.5 at >= 16 MiB",
             f"#{'ranks':>5} {'backend':>7} {'size(B)':>10} {'none GB/s':>9} {'fp16 GB/s':>9} "
             f"{'ratio':>6} {'met':>4}"]
    met = {}
    for p, rec in recs.items():
        rows = {(r["backend"], r["compression"], r["size_bytes"]): r for r in rec["rows"]}
        for backend in ("ring", "mpi"):
            for size in sorted(s for b, c, s in rows if b == backend and c == "none"
                               and s >= 16 << 20):
                none = rows[(backend, "none", size)]["busbw_gbs"]
                fp16 = rows[(backend, "fp16", size)]["busbw_gbs"]
                ok = fp16 / none >= 1.5
                met.setdefault((p, backend), []).append(ok)
                lines.append(f" {p:>5} {backend:>7} {size:>10} {none:>9.3f} {fp16:>9.3f} "
                             f"{fp16 / none:>6.2f} {'yes' if ok else 'NO':>4}")
    for (p, backend), oks in met.items():
        lines.append(f"# {p} ranks {backend}: {sum(oks)}/{len(oks)} sizes meet the target")
    (Path(opts.out) / "netns-fp16.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
