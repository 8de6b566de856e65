"""Check the cluster box's isolation: ``python -m hpcdl.bench.boxcheck check`` (``scripts/cluster-box.sh
check``) runs real Slurm jobs and prints a table.

- compute: a compute-only probe (single-threaded numpy matrix products) on n1 alone and on every
  node at once, alternating over ``--rounds`` (alone, together, alone, together, ..., alone);
  each round compares every node with the median of the alone passes, and each node's median
  over rounds must be within ``COMPUTE_SPREAD`` of 1. One pass of each, as the
  check first did, gave opposite verdicts on an unchanged box when the one alone pass was slow;
- network: every node sends to the next one and receives from the one before at once, a
  ring of plain transfers (MPI Sendrecv, no reduction: the links are checked, not the ranks'
  CPU, which at a fifth of a core held a reducing ring's links at 84%) under ``srun
  --mpi=pmix``; each node's link, both ways, must carry at least ``LINK_SHARE`` of its rate,
  its median over ``--reps`` transfers.

The verdict goes to ``check.json`` beside the box file, where :func:`hpcdl.box.require_checked`
reads it before a study's first job on the box.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from ..box import box_file, check_file, job_exports, load, node_facts
from ..machine import Counters
from ..costmodel import rate_bits
from ..errors import UserError

COMPUTE_SPREAD = 0.10        # every node's probe within 10% of one node alone
LINK_SHARE = 0.85            # every link carries at least 85% of its shaped rate
MIB = 1 << 20


# --- the probes (run on the nodes by check) ---------------------------------------------------------

def _probe(opts) -> int:
    """Time ``--reps`` rounds of ``--work`` 256x256 matrix products on one thread; print JSON (wall
    and CPU seconds of each round)."""
    import numpy as np
    a = np.random.default_rng(0).random((256, 256))
    times, cpu = [], []
    for _ in range(opts.reps):
        t0, c0 = time.perf_counter(), time.process_time()
        b = a
        for _ in range(opts.work):
            b = a @ b
            b /= b.max()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print(json.dumps({"host": socket.gethostname(), "seconds": statistics.median(times),
                      "times": times, "cpu": cpu}), flush=True)
    return 0


def _ring(opts) -> int:
    """Send ``--mib`` MiB to the next node while receiving as much from the one before, ``--reps``
    times; rank 0 prints JSON of every node's interface bytes and time, per transfer."""
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    host = socket.gethostname()
    facts = node_facts(host) or {"iface": "eth0"}
    out = np.ones(opts.mib * MIB, dtype=np.uint8)
    back = np.empty_like(out)
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size

    def shift():
        comm.Sendrecv(out, dest=right, recvbuf=back, source=left)
    shift()                                            # warm-up: connections made, windows open
    passes = []
    for _ in range(opts.reps):
        comm.Barrier()
        ctr = Counters(facts["iface"])
        t0 = time.perf_counter()
        shift()
        passes.append({"seconds": time.perf_counter() - t0, **ctr.moved()})
    rows = comm.gather({"host": host, "passes": passes}, root=0)
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "bytes": out.nbytes, "reps": opts.reps,
                          "nodes": rows}), flush=True)
    return 0


# --- check -----------------------------------------------------------------------------------------

def srun_json(args, timeout, env=None) -> list:
    """Run an srun step on the box; the JSON lines it printed."""
    if not shutil.which("srun"):
        raise UserError("srun is not installed: the box's check runs its probes as Slurm jobs")
    cmd = ["srun", "--quiet", f"--time={max(1, int(timeout // 60) + 1)}"] + args
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise UserError(f"{' '.join(cmd)} did not end within {timeout:.0f} s") from None
    if res.returncode != 0:
        raise UserError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]


def job_env(box):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OMPI_MCA_mpi_yield_when_idle="1")
    env.update(job_exports(box))
    return env


def run_check(box: dict, work: int = 0, reps: int = 3, mib: int = 0, rounds: int = 3) -> dict:
    """Both halves of the check on every node of ``box``; the verdict and its table."""
    n = box["nodes_count"]
    py = [sys.executable, "-m", "hpcdl.bench.boxcheck"]
    env = job_env(box)
    # about half a second of one core per round, so that the CFS period (100 ms) quantises little
    work = work or 800
    probe = py + ["probe", "--work", str(work), "--reps", str(reps)]
    alone = [srun_json(["-N1", "-n1", "-w", "n1"] + probe, 600, env)[0]]
    together = []
    for _ in range(rounds):          # alone, together, alone, ...: each together pass between two
        together.append(srun_json([f"-N{n}", f"-n{n}", "--ntasks-per-node=1"] + probe, 600, env))
        alone.append(srun_json(["-N1", "-n1", "-w", "n1"] + probe, 600, env)[0])
    rate = rate_bits(box["link_rate"])
    link = None
    if n > 1:
        # about 2 s of link time per transfer, each way at once
        mib = mib or max(8, int(2.0 * rate / 8 / MIB))
        link = srun_json([f"-N{n}", f"-n{n}", "--ntasks-per-node=1", "--mpi=pmix"] + py
                         + ["ring", "--mib", str(mib), "--reps", str(reps)], 900, env)[0]
    return verdict(box, alone, together, link)


def _compute_ratios(alone: list, together: list) -> dict:
    """{node: each round's probe over the median of the alone passes}: one slow pass alone
    (which bracketed the first check's one round) moves neither."""
    out: dict = {}
    ref = statistics.median(a["seconds"] for a in alone)
    for rnd in together:
        for r in rnd:
            out.setdefault(r["host"], []).append(r["seconds"] / ref)
    return out


def _link_shares(x: dict, rate: float) -> dict:
    """A node's tx and rx share of its link: the median over its transfers."""
    return {f"{way}_share": statistics.median(p[f"{way}_bytes"] * 8 / p["seconds"] / rate
                                              for p in x["passes"])
            for way in ("tx", "rx")}


def verdict(box: dict, alone: list, together: list, link: Optional[dict]) -> dict:
    """Pass or fail, with a row per node, from the probes' JSON (pure: tested without a box):
    ``alone`` the n1-alone passes, one more than the rounds of ``together`` (each a list of
    every node's probe) they bracket."""
    rate = rate_bits(box["link_rate"])
    rows, reasons = [], []
    net = {r["host"]: r for r in (link or {}).get("nodes", [])}
    ratios = _compute_ratios(alone, together)
    for host in sorted(ratios, key=lambda h: int(h.lstrip("n") or 0)):
        seen = ratios[host]
        row = {"node": host, "compute_vs_alone": statistics.median(seen),
               "compute_range": [min(seen), max(seen)]}
        if abs(row["compute_vs_alone"] - 1) > COMPUTE_SPREAD:
            reasons.append(f"{host}: compute {row['compute_vs_alone']:.2f}x one node alone "
                           f"(allowed 1 +- {COMPUTE_SPREAD:.2f})")
        if host in net:
            row.update(_link_shares(net[host], rate))
            for way in ("tx", "rx"):
                if row[f"{way}_share"] < LINK_SHARE:
                    reasons.append(f"{host}: link {way} at {row[f'{way}_share']:.0%} of "
                                   f"{box['link_rate']} (needs {LINK_SHARE:.0%})")
        rows.append(row)
    alone_s = [a["seconds"] for a in alone]
    return {"box": box["box"], "passed": not reasons, "reasons": reasons, "rows": rows,
            "alone_s": statistics.median(alone_s), "alone_range": [min(alone_s), max(alone_s)],
            "rounds": len(together), "link_rate": box["link_rate"],
            "cpus_per_node": box["cpus_per_node"],
            "ring": {k: link[k] for k in ("ranks", "bytes", "reps")} if link else None,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def table(v: dict) -> str:
    lo, hi = v["alone_range"]
    lines = [f"# box {v['box']}: {len(v['rows'])} nodes, {v['cpus_per_node']} cores each, links "
             f"{v['link_rate']}; compute alone on n1 {v['alone_s']:.3f} s (median of "
             f"{v['rounds'] + 1} passes, {lo:.3f}-{hi:.3f}), {v['rounds']} round(s) together",
             f"{'node':>5} {'vs alone':>9} {'its rounds':>13} {'link tx':>8} {'link rx':>8}"]
    for r in v["rows"]:
        tx = f"{r['tx_share']:.0%}" if "tx_share" in r else "-"
        rx = f"{r['rx_share']:.0%}" if "rx_share" in r else "-"
        span = "{:.3f}-{:.3f}".format(*r["compute_range"])
        lines.append(f"{r['node']:>5} {r['compute_vs_alone']:>9.3f} {span:>13} {tx:>8} {rx:>8}")
    lines.append(f"# needs: compute within 1 +- {COMPUTE_SPREAD:.2f} of alone, every link >= "
                 f"{LINK_SHARE:.0%} of its rate both ways")
    lines.append("check: passed" if v["passed"] else "check: FAILED\n" + "\n".join(
        "  " + r for r in v["reasons"]))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpcdl.bench.boxcheck", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="prove the box's isolation; print a table, write check.json")
    c.add_argument("--work", type=int, default=0, help="matrix products per probe round")
    c.add_argument("--reps", type=int, default=3)
    c.add_argument("--rounds", type=int, default=3,
                   help="passes of every node together, each between two passes of n1 alone")
    c.add_argument("--mib", type=int, default=0, help="transfer size (default: ~2 s of link)")
    c.add_argument("--json", help="also write the verdict here")
    p = sub.add_parser("probe")
    p.add_argument("--work", type=int, default=800)
    p.add_argument("--reps", type=int, default=3)
    r = sub.add_parser("ring")
    r.add_argument("--mib", type=int, default=16)
    r.add_argument("--reps", type=int, default=3)
    opts = ap.parse_args(argv)
    if opts.cmd == "probe":
        return _probe(opts)
    if opts.cmd == "ring":
        return _ring(opts)
    box = load()
    if box is None:
        print(f"no box is up ({box_file()} is missing): scripts/cluster-box.sh up N", file=sys.stderr)
        return 2
    try:
        v = run_check(box, opts.work, opts.reps, opts.mib, opts.rounds)
    except UserError as exc:
        print(f"check: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(v, indent=1)
    check_file().write_text(text + "\n")
    if opts.json:
        Path(opts.json).write_text(text + "\n")
    print(table(v))
    return 0 if v["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
