"""Where a Horovod allreduce spends its time, from Horovod's own timeline.

Run under mpirun, one core per rank, as the bench runs::

    mpirun -np 2 --bind-to core python benchmarks/horovod_timeline.py [--sizes 4K,4M] [--iters 40]

It does what ``hpcdl bench allreduce -B horovod`` does per iteration (the backend's barrier, then
``allreduce_mean``) with ``HOROVOD_TIMELINE`` on, and splits each operation's time, as Horovod's
background thread saw it, into:

- ``handoff``: from the end of the barrier's allreduce (in the background thread) to the cycle in
  which the coordinator saw a rank's next request: the completion going back to TensorFlow and
  Python, the bench's timer, the next op's dispatch into Horovod's queue, and the wait for the
  background thread's next cycle; ``first`` and ``last`` over the ranks;
- ``skew``: the last rank's request seen after the first's (a few us when both reached the same
  cycle, a cycle or more when not; the ranks that are there wait);
- ``start``: from the last request seen to the start of the work (the negotiation);
- ``mpi``: the MPI_Allreduce itself; ``op``: the whole ALLREDUCE activity (mpi plus the scaled copy
  of the input into the output).

``wall`` is the median time of ``allreduce_mean`` measured in Python on rank 0, ``faults/op`` rank
0's minor page faults per iteration. Every other column is a median over the timed iterations in
microseconds. The timeline is written by rank 0 (``--timeline``, or
a file under the temporary directory, removed afterwards).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WARMUP = 3      # untimed iterations per size, left out of the timeline's medians too


def read_timeline(path) -> list:
    """The events of a Horovod timeline file (a JSON array that a killed run leaves unclosed)."""
    text = Path(path).read_text().rstrip().rstrip(",")
    if not text.endswith("]"):
        text += "]"
    return json.loads(text)


def allreduce_ops(events) -> list:
    """One dict per allreduce in the timeline: the ranks' request times, start/end of the work and
    of MPI_Allreduce within it, and the tensor's shape."""
    ops, cur, stack = [], None, []
    for e in events:
        ph = e.get("ph")
        if ph == "B":
            stack.append(e["name"])
            if e["name"] == "NEGOTIATE_ALLREDUCE":
                cur = {"ready": [], "ts": e["ts"]}
            elif cur is not None and e["name"] == "ALLREDUCE":
                cur["op0"] = e["ts"]
            elif cur is not None and e["name"] == "MPI_ALLREDUCE":
                cur["mpi0"] = e["ts"]
        elif ph == "X" and cur is not None and "op0" not in cur:
            cur["ready"].append(e["ts"])     # one instant per rank whose request arrived
        elif ph == "E" and stack:
            name = stack.pop()
            if cur is None:
                continue
            if name == "MPI_ALLREDUCE":
                cur["mpi1"] = e["ts"]
            elif name == "ALLREDUCE":
                cur["op1"] = e["ts"]
                cur["shape"] = e.get("args", {}).get("shape", "")
                if cur["ready"] and "op0" in cur:
                    ops.append(cur)
                cur = None
    return ops


def phases(ops, barrier_shape: str = "[]", skip: int = 0) -> dict:
    """Median phase times (us) per tensor shape other than the barrier's, each shape's first
    ``skip`` operations (the warm-up) left out."""
    ops = sorted(ops, key=lambda o: o["ts"])
    rows: dict = {}
    seen: dict = {}
    for prev, op in zip(ops, ops[1:]):
        if op["shape"] == barrier_shape or prev["shape"] != barrier_shape:
            continue
        seen[op["shape"]] = seen.get(op["shape"], 0) + 1
        if seen[op["shape"]] <= skip:
            continue
        r = rows.setdefault(op["shape"], {k: [] for k in
                                          ("first", "last", "skew", "start", "mpi", "op")})
        r["first"].append(min(op["ready"]) - prev["op1"])
        r["last"].append(max(op["ready"]) - prev["op1"])
        r["skew"].append(max(op["ready"]) - min(op["ready"]))
        r["start"].append(op["op0"] - max(op["ready"]))
        if "mpi1" in op:
            r["mpi"].append(op["mpi1"] - op["mpi0"])
        r["op"].append(op["op1"] - op["op0"])
    return {shape: {k: statistics.median(v) if v else float("nan") for k, v in r.items()} | {
        "n": len(r["op"])} for shape, r in rows.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4K,256K,4M")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--timeline", help="keep Horovod's timeline in this file")
    opts = ap.parse_args(argv)

    from hpcdl import cluster
    from hpcdl.bench import _keep_freed_memory, _size
    from hpcdl.comm import apply_defaults, empty_aligned, get_backend
    sizes = [_size(s) for s in opts.sizes.split(",")]
    apply_defaults()
    os.environ.setdefault("HOROVOD_CYCLE_TIME", "0.1")
    keep = opts.timeline is not None
    # Horovod writes the file on rank 0 only
    path = (Path(opts.timeline).resolve() if keep
            else Path(tempfile.gettempdir()) / f"hpcdl-timeline-{os.getpid()}.json")
    os.environ["HOROVOD_TIMELINE"] = str(path)
    n_threads = cluster.configure_threads(cluster.discover())
    malloc = _keep_freed_memory()
    import tensorflow as tf
    cluster.apply_tf_threads(tf, n_threads)
    be = get_backend("horovod")
    if be.size < 2:
        print("horovod_timeline: run it under mpirun with 2 or more ranks", file=sys.stderr)
        return 2
    wall, faults = {}, {}
    for size in sizes:
        x = empty_aligned(size // 4)
        x[...] = 1.0
        ts = []
        for i in range(opts.iters + WARMUP):
            if i == WARMUP:
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            be.barrier()
            t0 = time.perf_counter()
            be.allreduce_mean(x)
            if i >= WARMUP:
                ts.append(time.perf_counter() - t0)
        faults[size] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / opts.iters
        wall[size] = statistics.median(ts) * 1e6
    for _ in range(3):           # the timeline's writer lags: the last op's end must reach the file
        be.barrier()
    time.sleep(0.2)
    be.hvd.shutdown()            # flushes the timeline
    if be.rank != 0:
        return 0
    try:
        rows = phases(allreduce_ops(read_timeline(path)), skip=WARMUP)
    finally:
        if not keep:
            path.unlink(missing_ok=True)
    print(f"# {' '.join([Path(sys.argv[0]).name] + sys.argv[1:])}")
    print(f"# ranks={be.size} threads/rank={n_threads} HOROVOD_CYCLE_TIME="
          f"{os.environ['HOROVOD_CYCLE_TIME']} iters={opts.iters} malloc: {malloc}; "
          "median us; handoff = barrier's end -> the cycle that saw a rank's next request (first/last rank)")
    print(f"#{'size(B)':>10} {'wall':>8} {'handoff1':>9} {'handoffN':>9} {'skew':>7} {'start':>7} "
          f"{'mpi':>8} {'op':>8} {'faults/op':>9} {'n':>4}")
    for size in sizes:
        r = rows.get(f"[{size // 4}]")
        if r is None:
            print(f"horovod_timeline: no timeline entries for {size} B", file=sys.stderr)
            return 1
        print(f" {size:>10} {wall[size]:>8.0f} {r['first']:>9.0f} {r['last']:>9.0f} "
              f"{r['skew']:>7.0f} {r['start']:>7.0f} {r['mpi']:>8.0f} {r['op']:>8.0f} "
              f"{faults[size]:>9.0f} {r['n']:>4}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
