"""Benchmark gradient exchange: an allreduce size sweep (nccl-tests style) and its cost-model fit.

``hpcdl bench allreduce`` runs under ``mpirun -np N`` (or ``srun``). For every backend and
compression asked for, and every message size from ``--minbytes`` to ``--maxbytes``, it runs
warm-up and timed iterations of the exchange a training step makes (``Backend.timed_call`` of
``hpcdl.comm``: for horovod the allreduce ops ``hvd.DistributedGradientTape`` adds, for the
others ``allreduce_mean`` of one flat buffer) with the backend's own barrier before each
(outside the timed region), takes per iteration the time of the slowest rank, and reports the
min, median and p99 of those times, algbw = size / median time, busbw = algbw * 2(p-1)/p, the
count of elements outside the compression's error bound (``#wrong``), and, as references
measured in the same run on the same numpy buffers, memcpy and the MPI library's own
MPI_Allreduce. Sizes count float32 bytes whatever the compression, so a compressed backend's
busbw is the effective one. Rank 0 prints the table and appends one ``hpcdl.bench/1`` record to
``--results``.

``hpcdl bench fit`` (:mod:`hpcdl.bench.fit`) fits the cost model to such records.
"""
from __future__ import annotations

import argparse
import time
import zlib
from dataclasses import dataclass, field
from typing import List, Tuple

from .. import cluster, records
from ..errors import UserError

DEFAULT_RESULTS = "results/bench/allreduce.jsonl"
BENCH_SCHEMA = "hpcdl.bench/1"
_ITER_BYTES = 1 << 20        # below this size the iteration count grows as 1/size
_CHECK_BLOCK = 1 << 20       # elements per block when checking results (bounded memory)


# --- command line ---------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    """4, 64K, 1M, 256M, 1G (binary multiples) -> bytes."""
    t = text.strip().upper().rstrip("B").rstrip("I")
    mult = 1
    if t and t[-1] in "KMG":
        mult = 1 << {"K": 10, "M": 20, "G": 30}[t[-1]]
        t = t[:-1]
    try:
        value = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size like 4, 64K, 256M; got '{text}'")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got '{text}'")
    return value


def _names(text: str, allowed, what: str):
    if text == "all":
        return list(allowed)
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in allowed]
    if bad or not names:
        raise UserError(f"unknown {what} '{','.join(bad) or text}': choose from "
                        f"{', '.join(allowed)} or 'all'")
    return names


def add_arguments(a):
    a.add_argument("--backend", "-B", default="all",
                   help="horovod, mpi, ring, ps, a comma list, or all (default: all)")
    a.add_argument("--compression", "-C", default=None,
                   help="none, fp16, int8, a comma list, or all (default: all with --backend all, "
                        "else none)")
    a.add_argument("--minbytes", "-b", type=parse_size, default=4, help="smallest size (default 4)")
    a.add_argument("--maxbytes", "-e", type=parse_size, default=256 << 20, help="largest size (256M)")
    a.add_argument("--stepfactor", "-f", type=float, default=2.0, help="size multiplier (2)")
    a.add_argument("--iters", "-n", type=int, default=10,
                   help="timed iterations at >= 1 MiB; smaller sizes get more, up to --max-iters (10)")
    a.add_argument("--max-iters", type=int, default=1000, help="cap on timed iterations (1000)")
    a.add_argument("--warmup-iters", "-w", type=int, default=3,
                   help="untimed iterations before timing (3; at least a tenth of the timed ones)")
    a.add_argument("--check", "-c", type=int, choices=(0, 1), default=1,
                   help="count results outside the error bound (1)")
    a.add_argument("--min-busbw", type=float, default=0.0,
                   help="FAILED when a backend's average busbw (GB/s) is below this (0)")
    a.add_argument("--results", default=None,
                   help=f"JSONL file for the record (default $HPCDL_BENCH_RESULTS or "
                        f"{DEFAULT_RESULTS}); '-' for none")
    a.add_argument("--tag", default=None, help="free text stored in the record")
    a.add_argument("--tuning", default=None, metavar="FILE",
                   help="exchange settings from 'hpcdl tune' (its pick for the first "
                        "--compression), as training takes them; default $HPCDL_TUNING; "
                        "'default': none. The MPI reference keeps the library's own algorithm")
    a.add_argument("--seed", type=int, default=0, help="seed of the test data")
    a.add_argument("--inject-error", action="store_true",
                   help="the last rank adds 1 to one element of each result before the check "
                        "(shows that the check counts a wrong result)")


# --- test data and the check ------------------------------------------------------------------------

def _data(np, start: int, stop: int, rank: int, seed: int):
    """Rank ``rank``'s float32 inputs for elements [start, stop): cheap, reproducible, in [-1, 1]."""
    j = np.arange(start, stop, dtype=np.uint64) + np.uint64(7919 * rank + 104729 * seed)
    v = (j * np.uint64(2654435761) + np.uint64(12345)) % np.uint64(65521)
    return (v.astype(np.float64) / 32760.0 - 1.0).astype(np.float32)


def _tolerance(np, compression, abs_sum, max_sum, p):
    """Largest allowed |result - exact mean| per element (see hpcdl.comm.compression).

    ``abs_sum`` is sum over ranks of |x_r| per element, ``max_sum`` the sum over ranks of max|x_r|.
    Every backend's path rounds at most the equivalent of one error bound of the sum of the
    inputs: none, a float32 summation in any order and one division; fp16, p-1 roundings of
    partial sums and one of the mean (or p of the inputs and p-1 of partial sums, then a division
    by p); int8, the same with absolute half-steps of max|chunk| / 254. 5 % slack covers the float32
    roundings around them.
    """
    from ..comm.compression import FP16_TINY, FP16_UNIT_ROUNDOFF, INT8_LEVELS
    f32 = (p + 1) * 2.0 ** -24 * abs_sum / p + 1e-38
    if compression == "none":
        return f32
    if compression == "fp16":
        return 1.05 * (FP16_UNIT_ROUNDOFF * abs_sum + p * FP16_TINY) + f32
    return 1.05 * max_sum / (2 * INT8_LEVELS) + f32


def _count_wrong(np, out, compression, p, seed):
    """Elements of this rank's result outside the bound around the exact mean of all inputs."""
    n = out.size
    wrong = 0
    max_sum = float(p)          # the inputs lie in [-1, 1], so every chunk's max|x_r| <= 1
    for start in range(0, n, _CHECK_BLOCK):
        stop = min(n, start + _CHECK_BLOCK)
        xs = [_data(np, start, stop, r, seed).astype(np.float64) for r in range(p)]
        exact = sum(xs) / p
        abs_sum = sum(np.abs(x) for x in xs)
        tol = _tolerance(np, compression, abs_sum, max_sum, p)
        err = np.abs(out[start:stop].astype(np.float64) - exact)
        wrong += int(np.count_nonzero(~(err <= tol)))     # NaN counts as wrong
    return wrong


# --- the sweep --------------------------------------------------------------------------------------

def _sizes(lo, hi, factor):
    if factor <= 1:
        raise UserError(f"--stepfactor must be > 1, got {factor:g}")
    if lo > hi:
        raise UserError(f"--minbytes {lo} is larger than --maxbytes {hi}")
    out, s = [], float(max(4, lo))
    while s <= hi * (1 + 1e-9):
        size = max(4, int(round(s)) // 4 * 4)
        if not out or size != out[-1]:
            out.append(size)
        s *= factor
    return out


def _iters_for(size, opts):
    n = max(opts.iters, int(opts.iters * _ITER_BYTES / size))
    return max(1, min(opts.max_iters, n))


def _stats(np, times):
    t = np.sort(np.asarray(times, dtype=np.float64))
    k = min(len(t) - 1, max(0, int(np.ceil(0.99 * len(t))) - 1))
    return {"min": float(t[0]), "median": float(np.median(t)), "p99": float(t[k]),
            "mean": float(t.mean()), "n": int(len(t))}


@dataclass
class _Sweep:
    """What one sweep measures, and the MPI world it measures in."""

    opts: object
    backends: List[str]
    compressions: List[str]
    sizes: List[int]
    layout: object = None
    threads: int = 1
    world: object = None
    hosts: List[str] = field(default_factory=list)
    src: object = None          # every rank's input, float32, an ordinary numpy buffer
    dst: object = None          # the references' output buffer
    tuning: dict = field(default_factory=dict)   # the record's tuning section
    ref_comm: object = None     # the MPI reference's communicator: the library's own algorithm

    @property
    def p(self) -> int:
        return self.world.Get_size()

    @property
    def root(self) -> bool:
        return self.world.Get_rank() == 0

    def say(self, msg: str) -> None:
        if self.root:
            print(msg, flush=True)

    def timed(self, fn, iters, warm, sync=None):
        return timed(self.world, fn, iters, warm, sync)


def timed(world, fn, iters: int, warm: int, sync=None):
    """``(times, last result)``: per iteration the slowest rank of ``world``'s time of ``fn()``,
    after ``warm`` untimed calls; ``sync()`` (default: ``world``'s barrier) before each, outside."""
    import numpy as np
    from mpi4py import MPI
    sync = sync or world.Barrier
    for _ in range(warm):
        sync()
        fn()
    times, out = np.empty(iters, dtype=np.float64), None
    for i in range(iters):
        sync()
        t0 = time.perf_counter()
        out = fn()
        times[i] = time.perf_counter() - t0
    world.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
    return times, out


def _plan(opts) -> _Sweep:
    from ..comm import BACKENDS, COMPRESSIONS
    backends = _names(opts.backend, BACKENDS, "backend")
    comp_text = opts.compression or ("all" if opts.backend == "all" else "none")
    compressions = _names(comp_text, COMPRESSIONS, "compression")
    sizes = _sizes(opts.minbytes, opts.maxbytes, opts.stepfactor)
    if opts.iters <= 0 or opts.max_iters <= 0 or opts.warmup_iters < 0:
        raise UserError("--iters and --max-iters must be positive, --warmup-iters >= 0")
    # Horovod last: its background thread, once started, wakes every cycle and would take the
    # cores of the other backends' measurements.
    backends = [b for b in backends if b != "horovod"] + (["horovod"] if "horovod" in backends else [])
    return _Sweep(opts, backends, compressions, sizes)


def _start(sw: _Sweep) -> None:
    """Threads and rank defaults as training sets them, then MPI (and TensorFlow for Horovod)."""
    from ..comm import mpit, tuning
    sw.layout = cluster.discover()
    sw.threads = cluster.configure_threads(sw.layout)
    sw.tuning = tuning.take(sw.opts.tuning, sw.compressions[0])
    cluster.apply_rank_defaults()
    if "horovod" in sw.backends:
        import tensorflow as tf            # reads its thread counts at start-up, as in training
        cluster.apply_tf_threads(tf, sw.threads)
    import numpy as np
    from mpi4py import MPI
    sw.world = MPI.COMM_WORLD.Dup()
    forced = mpit.read(mpit.ALGORITHM)
    if forced:                 # the reference runs the library's own choice, not the tuned one
        mpit.write(mpit.ALGORITHM, 0)
        sw.ref_comm = MPI.COMM_WORLD.Dup()
        mpit.write(mpit.ALGORITHM, forced)
    else:
        sw.ref_comm = sw.world
    sw.tuning["in_force"] = mpit.in_force()
    sw.hosts = sw.world.allgather(sw.layout.host)
    nmax = max(sw.sizes) // 4
    sw.src = _data(np, 0, nmax, sw.world.Get_rank(), sw.opts.seed)
    sw.dst = np.empty(nmax, dtype=np.float32)


def _references(sw: _Sweep) -> dict:
    """Per size, measured on every rank at once: memcpy, MPI_Allreduce (a sum, through mpi4py) of
    the same buffers the backends get, and one reduction hop of each codec (encode, decode-add)."""
    from ..comm.compression import get_codec
    import numpy as np
    from mpi4py import MPI
    refs = {}
    for size in sw.sizes:
        n = size // 4
        iters = min(_iters_for(size, sw.opts), 100)
        src, dst = sw.src[:n], sw.dst[:n]
        t_copy, _ = sw.timed(lambda: np.copyto(dst, src), iters, 1)
        t_mpi, _ = sw.timed(lambda: sw.ref_comm.Allreduce(src, dst, op=MPI.SUM), iters, 1)
        refs[size] = {"memcpy": _stats(np, t_copy), "mpi_allreduce": _stats(np, t_mpi)}
        for comp in sw.compressions:
            codec = get_codec(comp)
            t_red, _ = sw.timed(lambda: codec.decode_add(codec.encode(src), n, dst), iters, 1)
            refs[size]["reduce:" + comp] = _stats(np, t_red)
    return refs


def _measure(sw: _Sweep, be, size: int, refs: dict) -> dict:
    """One row: ``be.timed_call`` (the exchange a training step runs) at ``size``, checked."""
    from ..costmodel import algorithm_for, busbw_factor
    import numpy as np
    from mpi4py import MPI
    opts, p, n = sw.opts, sw.p, size // 4
    iters = _iters_for(size, opts)
    warm = max(opts.warmup_iters, iters // 10, 1 if be.in_graph else 0)
    call, fetch = be.timed_call(sw.src[:n])
    times, res = sw.timed(call, iters, warm, be.barrier)
    out = fetch(res)
    wrong, identical = 0, True
    if opts.check:
        if opts.inject_error and sw.world.Get_rank() == p - 1:
            out = out.copy()
            out[n // 2] += 1.0
        wrong = _count_wrong(np, out, be.compression, p, opts.seed)
        crcs = sw.world.allgather(zlib.crc32(memoryview(np.ascontiguousarray(out)).cast("B")))
        identical = len(set(crcs)) == 1
        wrong = sw.world.allreduce(wrong, op=MPI.SUM)
        if not identical:      # a rank that disagrees with rank 0 is wrong too
            wrong += sum(1 for c in crcs if c != crcs[0])
    st = _stats(np, times)
    algbw = size / st["median"] / 1e9
    bus = busbw_factor(p)
    ref = refs[size]
    return {"backend": be.name, "compression": be.compression,
            "model": algorithm_for(be.name, be.compression), "size_bytes": size, "count": n,
            "type": "float", "wire_bytes": be.codec.wire_nbytes(n), "iters": iters, "warmup": warm,
            "time_us": {k: (v * 1e6 if k != "n" else v) for k, v in st.items()},
            "algbw_gbs": algbw, "busbw_gbs": algbw * bus,
            "memcpy_gbs": size / ref["memcpy"]["median"] / 1e9,
            "mpi_busbw_gbs": size / ref["mpi_allreduce"]["median"] / 1e9 * bus,
            "reduce_us": ref["reduce:" + be.compression]["median"] * 1e6,
            "wrong": int(wrong), "identical": identical}


_COLUMNS = (f"#{'backend':>8} {'compr':>5} {'size(B)':>11} {'count':>10} {'type':>6} "
            f"{'min(us)':>10} {'median(us)':>11} {'p99(us)':>10} {'algbw(GB/s)':>11} "
            f"{'busbw(GB/s)':>11} {'memcpy(GB/s)':>12} {'MPI(GB/s)':>10} {'bus/MPI':>7} "
            f"{'reduce(us)':>10} {'#wrong':>7}")


def _print_header(sw: _Sweep) -> None:
    from ..costmodel import busbw_factor
    import numpy as np
    o = sw.opts
    vers = records.versions()
    hosts = sorted(set(sw.hosts))
    sw.say(f"# hpcdl bench allreduce: ranks={sw.p} nodes={len(hosts)} hosts={','.join(hosts)} "
           f"threads/rank={sw.threads} launcher={sw.layout.launcher}")
    sw.say(f"#  minBytes {sw.sizes[0]} maxBytes {sw.sizes[-1]} step: {o.stepfactor:g}(factor) "
           f"warmup iters: {o.warmup_iters} iters: {o.iters} (to {o.max_iters} below "
           f"{_ITER_BYTES} B) check: {o.check} min-busbw: {o.min_busbw:g} GB/s seed: {o.seed}")
    sw.say(f"#  backends: {' '.join(sw.backends)}  compressions: {' '.join(sw.compressions)}  "
           f"type: float32  numpy {np.__version__}")
    # MPI_Get_library_version's string ends in a NUL byte, which makes the table "binary" to grep
    sw.say("#  versions: " + " ".join(f"{k}={str(v).strip(chr(0)).strip()}" for k, v in vers.items()))
    t = sw.tuning
    sw.say("#  tuning: " + (f"{t['pick']} ({t['file']}, from {t['source']})" if t.get("file")
                            else "none (defaults)"))
    env = cluster.launcher_env()
    sw.say("#  env: " + (" ".join(f"{k}={v}" for k, v in env.items()
                                  if not k.startswith("SLURM_")) or "(none)"))
    sw.say("#  time: per iteration the slowest rank, the backend's own barrier outside; the call "
           "is the exchange a training step makes (horovod none/fp16: the allreduce ops "
           "hvd.DistributedGradientTape adds, in a tf.function; others: allreduce_mean of one "
           "flat buffer)")
    sw.say(f"#  algbw = size/median time; busbw = algbw*2(p-1)/p = algbw*{busbw_factor(sw.p):.3g}; "
           "size in float32 bytes (compressed on the wire)")
    sw.say("#  references, same run, same ordinary numpy buffers as the backends: memcpy, and MPI "
           "= MPI_Allreduce (a sum, through mpi4py) as busbw; reduce = one encode + decode-add")
    sw.say("#")
    sw.say(_COLUMNS)


def _format_row(r: dict) -> str:
    t = r["time_us"]
    return (f" {r['backend']:>8} {r['compression']:>5} {r['size_bytes']:>11} {r['count']:>10} "
            f"{'float':>6} {t['min']:>10.1f} {t['median']:>11.1f} {t['p99']:>10.1f} "
            f"{r['algbw_gbs']:>11.3f} {r['busbw_gbs']:>11.3f} {r['memcpy_gbs']:>12.2f} "
            f"{r['mpi_busbw_gbs']:>10.3f} {r['busbw_gbs'] / r['mpi_busbw_gbs']:>7.3f} "
            f"{r['reduce_us']:>10.1f} {r['wrong']:>7d}")


def _summary(sw: _Sweep, rows: List[dict]) -> Tuple[dict, bool]:
    summary = {}
    for name in sw.backends:
        for comp in sw.compressions:
            sel = [r for r in rows if r["backend"] == name and r["compression"] == comp]
            large = [r["busbw_gbs"] for r in sel if r["size_bytes"] >= 4 << 20]
            summary[name if comp == "none" else f"{name}+{comp}"] = {
                "avg_busbw_gbs": sum(r["busbw_gbs"] for r in sel) / len(sel),
                "avg_busbw_ge_4MiB_gbs": (sum(large) / len(large)) if large else None,
                "wrong": sum(r["wrong"] for r in sel)}
    total_wrong = sum(s["wrong"] for s in summary.values())
    slow = [k for k, s in summary.items() if s["avg_busbw_gbs"] < sw.opts.min_busbw]
    sw.say(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
    for key, s in summary.items():
        large = s["avg_busbw_ge_4MiB_gbs"]
        sw.say(f"# Avg bus bandwidth    : {s['avg_busbw_gbs']:8.3f} GB/s  {key}"
               + (f"  (>= 4 MiB: {large:.3f})" if large is not None else ""))
    reasons = ([f"{total_wrong} wrong"] if total_wrong else []) + \
              [f"{k} below --min-busbw {sw.opts.min_busbw:g}" for k in slow]
    ok = not reasons
    sw.say(f"# Result: {'OK' if ok else 'FAILED (' + '; '.join(reasons) + ')'}")
    return summary, ok


def _record(sw: _Sweep, rows, refs, summary, ok) -> dict:
    from ..costmodel import busbw_factor
    o = sw.opts
    extra = {"execution_order": sw.backends}
    if "horovod" in sw.backends:
        import horovod.tensorflow as hvd
        extra["horovod_build"] = {"mpi": bool(hvd.mpi_built()), "gloo": bool(hvd.gloo_built()),
                                  "nccl": bool(hvd.nccl_built()), "mpi_enabled": bool(hvd.mpi_enabled()),
                                  "gloo_enabled": bool(hvd.gloo_enabled())}
    return {
        "schema": BENCH_SCHEMA, "kind": "bench", "op": "allreduce", "tag": o.tag,
        "time": records.now_iso(), "status": "ok" if ok else "failed",
        "params": {"backends": sw.backends, "compressions": sw.compressions,
                   "minbytes": sw.sizes[0], "maxbytes": sw.sizes[-1], "stepfactor": o.stepfactor,
                   "iters": o.iters, "max_iters": o.max_iters, "warmup_iters": o.warmup_iters,
                   "check": o.check, "min_busbw_gbs": o.min_busbw, "seed": o.seed,
                   "dtype": "float32", "threads_per_rank": sw.threads,
                   "inject_error": o.inject_error},
        "layout": {"size": sw.p, "nodes": len(set(sw.hosts)), "ranks_per_node": sw.layout.local_size,
                   "hosts": sorted(set(sw.hosts))},
        "busbw_factor": busbw_factor(sw.p),
        "rows": rows,
        "references": {str(s): {k: {kk: (vv * 1e6 if kk != "n" else vv) for kk, vv in v.items()}
                                for k, v in r.items()} for s, r in refs.items()},
        "summary": summary,
        "manifest": records.manifest(sw.layout, hosts=sw.hosts, extra=extra),
        "tuning": sw.tuning,
    }


def main(opts) -> int:
    from ..comm import get_backend
    sw = _plan(opts)
    path = opts.results or cluster.setting("HPCDL_BENCH_RESULTS") or DEFAULT_RESULTS
    if path != "-" and cluster.discover().rank == 0:
        records.check_clean(path)
    _start(sw)
    refs = _references(sw)
    _print_header(sw)
    rows = []
    for name in sw.backends:
        for comp in sw.compressions:
            be = get_backend(name, comp)
            for size in sw.sizes:
                rows.append(_measure(sw, be, size, refs))
                sw.say(_format_row(rows[-1]))
    summary, ok = _summary(sw, rows)
    if sw.root and path != "-":
        records.append(path, _record(sw, rows, refs, summary, ok))
        sw.say(f"# Record appended to {path}")
    # Communicators are left to MPI_Finalize: freeing them after Horovod's shutdown hooks ran
    # crashes Open MPI 4.1 at exit.
    return 0 if ok else 1
