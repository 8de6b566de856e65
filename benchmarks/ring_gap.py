#!/usr/bin/env python
"""Where a tuned ring allreduce on the cluster box loses to the link's bound, one part at a time.

On every node of the box at once, for one gradient size and each CPU quota asked for (set on
every node, alternating over rounds, the box's own put back at the end):

- ``bound``: the ring's bytes at the link's line rate, 2(p-1)/p x bytes / rate (what
  ``hpcdl tune`` and the report's "step ÷ bound" divide by);
- ``headers``: the same bytes with the headers the shaper (tbf) also bills: per segment of MTU
  - 52 payload bytes (IPv4 20, TCP with timestamps 32), MTU + 14 on the link (Ethernet 14): at
  MTU 1500, 1514 per 1448, so no TCP stream carries more than 95.6% of the rate as payload. (The
  interface's counters cannot say it: they count segmentation-offload packets of 64 KB, one
  header each);
- ``plain``: the ring's 2(p-1) transfers of one p-th each (MPI Sendrecv, no reduction);
- ``add``: the ring's (p-1) reductions of one p-th each alone (numpy, no transfer);
- ``mpi ring``: MPI_Allreduce with Open MPI's ring (algorithm 4), what ``hpcdl tune`` picks;
- ``horovod``: Horovod's average of the wide MLP's eight tensors with the pick's settings (the
  ring, a 1 ms cycle, 64 MiB fusion), timed as ``hpcdl tune`` times it; ``hvd NM``: the same at
  each other fusion threshold of ``--fusions`` (N MiB; 0: no fusion, each tensor alone).

Each figure is the median over rounds of the slowest rank's time. The gaps between lines say
which part holds what: headers (the protocol), plain over headers (TCP under the quota), mpi ring
over plain (the reduction and its wait inside the quota), horovod over mpi ring (Horovod's copies
into and out of its fusion buffer, its scaling by 1/p, its cycle), and ``--fusions`` whether
the fusion threshold, a setting hpcdl's tune can choose, moves that part.

    (for rate in 375mbit 200mbit; do scripts/cluster-box.sh up 4 --link $rate \\
       --cpus-per-node 0.15 && scripts/cluster-box.sh check >/dev/null \\
       && python -m benchmarks.ring_gap --cores 0.15,0.45; done
     python -m benchmarks.ring_gap --cores 0.15 --fusions 64,8,0) > results/ring-gap.txt
"""
import argparse
import json
import socket
import statistics
import sys
import time

RING_ENV = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
            "OMPI_MCA_coll_tuned_allreduce_algorithm": "4",
            "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": "0"}
PICK_ENV = dict(RING_ENV, HOROVOD_CYCLE_TIME="1", HOROVOD_FUSION_THRESHOLD=str(64 << 20),
                HOROVOD_HIERARCHICAL_ALLREDUCE="0")


def _mtu(iface: str) -> int:
    """The interface's MTU in this node's namespace (``ip`` reads it there; /sys would show the
    host's)."""
    import subprocess
    out = subprocess.run(["ip", "-o", "link", "show", "dev", iface], capture_output=True,
                         text=True).stdout.split()
    return int(out[out.index("mtu") + 1]) if "mtu" in out else 1500


def _probe(opts) -> int:
    """On a node: time plain, add and mpi ring, alternating, ``--reps`` times; rank 0 prints
    JSON."""
    import numpy as np
    from mpi4py import MPI
    from hpcdl.box import node_facts
    comm = MPI.COMM_WORLD
    p, rank = comm.size, comm.rank
    chunk = opts.bytes // 4 // p
    buf = np.ones(chunk * p, np.float32)
    out = np.empty_like(buf)
    recv = np.empty(chunk, np.float32)
    right, left = (rank + 1) % p, (rank - 1) % p
    iface = (node_facts(socket.gethostname()) or {"iface": "eth0"})["iface"]
    mtu = _mtu(iface)

    def block(k):
        k %= p
        return buf[k * chunk:(k + 1) * chunk]

    def plain():
        for s in range(2 * (p - 1)):
            comm.Sendrecv(block(rank - s), dest=right, recvbuf=recv, source=left)

    def add():
        for s in range(p - 1):
            np.add(block(rank - s - 1), recv, out=block(rank - s - 1))

    def mpi_ring():
        comm.Allreduce(buf, out, op=MPI.SUM)

    kinds = {"plain": plain, "add": add, "mpi ring": mpi_ring}
    got = {k: [] for k in kinds}
    plain(), mpi_ring()                                 # warm-up: connections, windows
    for _ in range(opts.reps):
        for name, fn in kinds.items():
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            got[name].append(dt)
    if rank == 0:
        print(json.dumps({"ranks": p, "bytes": chunk * p * 4, "times": got,
                          "mtu": mtu}), flush=True)
    return 0


def _horovod_probe(opts) -> int:
    """On a node: Horovod's average of tensors summing to ``--bytes`` (the wide MLP's eight
    shapes, scaled), timed as ``hpcdl tune`` times it: ``HorovodBackend.average`` in a
    tf.function, an MPI barrier before each call, the slowest rank; rank 0 prints JSON."""
    import numpy as np
    from mpi4py import MPI
    from hpcdl import cluster
    layout = cluster.discover()
    threads = cluster.configure_threads(layout)
    cluster.apply_rank_defaults()
    from hpcdl.comm.horovod import HorovodBackend
    be = HorovodBackend("none")
    cluster.apply_tf_threads(be.tf, threads)
    comm = MPI.COMM_WORLD
    shapes = [1024 * 1536, 1536, 1536 * 1536, 1536, 1536 * 1536, 1536, 1536 * 512, 512]
    n = opts.bytes // 4
    shapes[0] += n - sum(shapes)
    tensors = [be.tf.constant(np.ones(k, np.float32)) for k in shapes]
    fn = be.tf.function(lambda ts: be.average(ts))
    fn(tensors)                                          # negotiation, fusion buffer
    times = []
    for _ in range(opts.reps):
        comm.Barrier()
        t0 = time.perf_counter()
        fn(tensors)
        times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    if comm.rank == 0:
        print(json.dumps({"times": {"horovod": times}}), flush=True)
    be.hvd.shutdown()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    pr = sub.add_parser("probe")
    pr.add_argument("--bytes", type=int, required=True)
    pr.add_argument("--reps", type=int, default=5)
    hv = sub.add_parser("horovod")
    hv.add_argument("--bytes", type=int, required=True)
    hv.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cores", default="0.15,0.45", help="quotas in cores, comma-separated")
    ap.add_argument("--bytes", type=int, default=28332032,
                    help="gradient bytes (default: examples/wide_mlp.py's 28 MB)")
    ap.add_argument("--fusions", default="64",
                    help="Horovod fusion thresholds in MiB, comma-separated (64: the pick's)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5, help="timed passes per job and kind")
    opts = ap.parse_args()
    if opts.cmd == "probe":
        return _probe(opts)
    if opts.cmd == "horovod":
        return _horovod_probe(opts)
    return measure(opts)


def measure(opts) -> int:
    from hpcdl import box
    from hpcdl.bench.boxcheck import job_env, srun_json
    from hpcdl.costmodel import rate_bits, ring_bound
    b = box.load()
    if not b:
        raise SystemExit("the cluster box is not up: "
                         "scripts/cluster-box.sh up 4 --cpus-per-node 0.15")
    p, period = b["nodes_count"], int(b["cpu_period_us"])
    bound = ring_bound(opts.bytes, p, rate_bits(b["link_rate"]))
    quotas = [float(c) for c in opts.cores.split(",")]
    env = dict(job_env(b), **RING_ENV)
    hvd_env = dict(job_env(b), HPCDL_THREADS="1", **PICK_ENV)     # as a study's ranks run
    fusions = [int(f) for f in opts.fusions.split(",")]
    hvd_parts = {f: "horovod" if f == 64 else f"hvd {f}M" for f in fusions}
    step = [f"-N{p}", f"-n{p}", "--ntasks-per-node=1", "--mpi=pmix", sys.executable, "-m",
            "benchmarks.ring_gap"]
    sizes = ["--bytes", str(opts.bytes), "--reps", str(opts.reps)]
    probe, hvd = step + ["probe"] + sizes, step + ["horovod"] + sizes
    got = {c: dict({"plain": [], "add": [], "mpi ring": [], "mtu": []},
                     **{part: [] for part in hvd_parts.values()}) for c in quotas}
    t0 = time.monotonic()
    print(f"# python -m benchmarks.ring_gap --cores {opts.cores} --bytes {opts.bytes} "
          f"--fusions {opts.fusions} --rounds {opts.rounds} --reps {opts.reps}")
    print(f"# box {b['box']}: {p} nodes at {b['link_rate']}, its own quota {b['cpus_per_node']} "
          f"cores of {period} us; this machine {b.get('cores')} cores", flush=True)
    try:
        for k in range(opts.rounds):
            for cores in quotas[k % len(quotas):] + quotas[:k % len(quotas)]:
                for node in b["nodes"].values():
                    box.set_quota(node["cgroup"], cores, period)
                (row,) = srun_json(probe, 900, env)
                for name, times in row["times"].items():
                    got[cores][name].append(statistics.median(times))
                got[cores]["mtu"].append(row["mtu"])
                for fusion, part in hvd_parts.items():
                    fenv = dict(hvd_env, HOROVOD_FUSION_THRESHOLD=str(fusion << 20))
                    (row,) = srun_json(hvd, 900, fenv)
                    got[cores][part].append(statistics.median(row["times"]["horovod"]))
                print(f"#   round {k + 1} at {cores} cores: " + ", ".join(
                    f"{n} {v[-1] * 1e3:.0f} ms" for n, v in got[cores].items() if n != "mtu"),
                    flush=True)
    finally:
        for node in b["nodes"].values():
            box.set_quota(node["cgroup"], float(b["cpus_per_node"]), period)
    print(f"# {opts.rounds} round(s), {time.monotonic() - t0:.0f} s; medians over rounds; "
          f"share = bound / time (1 = the link's line rate)")
    print(f"{'link':>8} {'nodes':>5} {'cores':>5} {'part':>9} {'ms':>8} {'share':>6}")
    for cores in quotas:
        med = {n: statistics.median(v) for n, v in got[cores].items()}
        mtu = med["mtu"]
        lines = [("bound", bound), ("headers", bound * (mtu + 14) / (mtu - 52)),
                 ("plain", med["plain"]), ("add", med["add"]), ("mpi ring", med["mpi ring"])]
        lines += [(part, med[part]) for part in hvd_parts.values()]
        for name, s in lines:
            share = "-" if name == "add" else f"{bound / s:.3f}"
            print(f"{b['link_rate']:>8} {p:>5} {cores:>5} {name:>9} {s * 1e3:>8.1f} {share:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
