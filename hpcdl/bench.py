"""Benchmark gradient exchange: an allreduce size sweep (nccl-tests style) and its cost-model fit.

``hpcdl bench allreduce`` runs under ``mpirun -np N`` (or ``srun``). For every backend and
compression asked for, and every message size from ``--minbytes`` to ``--maxbytes``, it runs
warm-up and timed iterations of ``allreduce_mean`` with the backend's own barrier before each
(outside the timed region), takes per iteration the time of the slowest rank, and reports the
min, median and p99 of those times, algbw = size / median time, busbw = algbw * 2(p-1)/p, the
count of elements outside the compression's error bound (``#wrong``), and, as the physical
reference, the memcpy bandwidth of the same size measured in the same run. Sizes count float32
bytes whatever the compression, so a compressed backend's busbw is the effective one. Rank 0
prints the table and appends one ``hpcdl.bench/1`` record to ``--results``.

``hpcdl bench fit`` reads such a record and fits alpha, beta and gamma of each backend's cost
model (:mod:`hpcdl.costmodel`), prints the prediction beside the measurement for each size, and
writes the parameters to ``results/bench/fit.json`` (``hpcdl.fit/1``). It needs no MPI.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import zlib
from pathlib import Path

from . import cluster
from .errors import UserError

DEFAULT_RESULTS = "results/bench/allreduce.jsonl"
DEFAULT_FIT = "results/bench/fit.json"
BENCH_SCHEMA = "hpcdl.bench/1"
FIT_SCHEMA = "hpcdl.fit/1"
_ITER_BYTES = 1 << 20        # below this size the iteration count grows as 1/size
_CHECK_BLOCK = 1 << 20       # elements per block when checking results (bounded memory)


# --- command line ---------------------------------------------------------------------------------

def _size(text: str) -> int:
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


def register(subparsers, name, help_text):
    p = subparsers.add_parser(name, help=help_text, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="bench_command", metavar="BENCH", parser_class=type(p))
    a = sub.add_parser("allreduce", help="allreduce sweep over sizes, backends and compressions "
                       "(run under mpirun/srun)", description=__doc__.split("\n\n")[1])
    _allreduce_arguments(a)
    a.set_defaults(_main=allreduce_main)
    f = sub.add_parser("fit", help="fit alpha, beta, gamma of each backend to a sweep",
                       description=__doc__.split("\n\n")[2])
    _fit_arguments(f)
    f.set_defaults(_main=fit_main)

    def _usage(opts):
        p.print_help()
        return 2
    p.set_defaults(_main=_usage)


def _allreduce_arguments(a):
    a.add_argument("--backend", "-B", default="all",
                   help="horovod, mpi, ring, ps, a comma list, or all (default: all)")
    a.add_argument("--compression", "-C", default=None,
                   help="none, fp16, int8, a comma list, or all (default: all with --backend all, "
                        "else none)")
    a.add_argument("--minbytes", "-b", type=_size, default=4, help="smallest size (default 4)")
    a.add_argument("--maxbytes", "-e", type=_size, default=256 << 20, help="largest size (256M)")
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
    a.add_argument("--seed", type=int, default=0, help="seed of the test data")
    a.add_argument("--fresh-buffers", action="store_true",
                   help="leave glibc's malloc as it is (freed buffers unmapped, faulted in again "
                        "on the next call); default: keep them mapped, as preallocated buffers")
    a.add_argument("--inject-error", action="store_true",
                   help="the last rank adds 1 to one element of each result before the check "
                        "(shows that the check counts a wrong result)")


def _fit_arguments(f):
    f.add_argument("--input", "-i", default=DEFAULT_RESULTS, help=f"bench records ({DEFAULT_RESULTS})")
    f.add_argument("--record", type=int, default=-1,
                   help="which record of the file (Python index among allreduce records; -1: last)")
    f.add_argument("--ranks", type=int, default=None,
                   help="use the last record with this many ranks")
    f.add_argument("--tag", default=None,
                   help="use only records whose tag contains this text")
    f.add_argument("--records", type=int, default=1,
                   help="fit the median over this many records ending at --record (repeated "
                        "sweeps of the same backends; 1)")
    f.add_argument("--min-bytes", type=_size, default=64 << 10,
                   help="fit and judge sizes from this up (64K)")
    f.add_argument("--tolerance", type=float, default=0.20,
                   help="relative error the prediction must stay within (0.20)")
    f.add_argument("--output", "-o", default=DEFAULT_FIT, help=f"fitted parameters ({DEFAULT_FIT}); "
                   "'-' for none")


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
    from .comm.compression import FP16_TINY, FP16_UNIT_ROUNDOFF, INT8_LEVELS
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


def _keep_freed_memory() -> str:
    """Make glibc keep freed buffers mapped, so a backend's per-call buffers are not faulted in anew.

    Every backend returns a new array per call. glibc hands back memory it frees above a few
    MiB, so the next call page-faults the whole buffer in again: on this VM that added 1.5 ms to
    an MPI allreduce of 4 MiB (0.8 -> 2.4 ms), or not, depending on the sweep's history. nccl-tests
    and OSU allocate their buffers once; this is the nearest thing for an interface that returns
    arrays. glibc's mmap threshold stops at 32 MiB, so larger buffers are taken from the heap too
    (``M_MMAP_MAX`` = 0): mapped afresh per call, they cost the kernel's page faults and zeroing,
    about 0.08 ms per MiB here, or nothing, depending on what the process freed before (the
    ring's 128 MiB took 3.2x its 64 MiB in a full sweep, 1.9x when swept alone). One arena
    (``M_ARENA_MAX`` = 1): a thread's own arena maps anything above its 64 MiB heaps afresh, and
    TensorFlow allocates Horovod's output on its executor threads (Horovod's 128 MiB took 63-69 ms
    that way, 28-29 ms from the main arena).
    """
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim, m_top_pad, m_mmap, m_mmap_max, m_arena_max = -1, -2, -3, -4, -8
        ok = (libc.mallopt(m_mmap, 32 << 20) == 1 and libc.mallopt(m_trim, 1 << 30) == 1
              and libc.mallopt(m_top_pad, 64 << 20) == 1 and libc.mallopt(m_mmap_max, 0) == 1
              and libc.mallopt(m_arena_max, 1) == 1)
    except (OSError, AttributeError):
        ok = False
    return ("keep (mmap_threshold=32M mmap_max=0 arena_max=1 trim_threshold=1G top_pad=64M)" if ok
            else "default")


def _mapped(n: int):
    """n float32 in a private anonymous mapping of their own, starting on a 2 MiB boundary.

    The sweep's input and copy target: outside malloc's heap, which then holds only what the
    backends allocate, and in huge pages from end to end (numpy's own madvise covers only the
    2 MiB pages inside an allocation). On this VM, where a TLB miss walks two page tables, an
    add of 256 MiB took 16 ms here, 35 ms between two heap allocations and 64 ms in a shared
    mapping (shmem, which madvise does not give huge pages).
    """
    import mmap
    import numpy as np
    huge = 2 << 20
    m = mmap.mmap(-1, 4 * n + huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError):
        pass
    raw = np.frombuffer(m, dtype=np.uint8)
    start = -raw.ctypes.data % huge
    return raw[start:start + 4 * n].view(np.float32)


def allreduce_main(opts) -> int:
    from .comm import BACKENDS, COMPRESSIONS
    backends = _names(opts.backend, BACKENDS, "backend")
    comp_text = opts.compression or ("all" if opts.backend == "all" else "none")
    compressions = _names(comp_text, COMPRESSIONS, "compression")
    sizes = _sizes(opts.minbytes, opts.maxbytes, opts.stepfactor)
    if opts.iters <= 0 or opts.max_iters <= 0 or opts.warmup_iters < 0:
        raise UserError("--iters and --max-iters must be positive, --warmup-iters >= 0")

    layout = cluster.discover()
    nthreads = cluster.configure_threads(layout)
    from .comm import apply_defaults
    apply_defaults()            # before MPI starts
    malloc = "default" if opts.fresh_buffers else _keep_freed_memory()
    if "horovod" in backends:
        # TensorFlow reads its thread counts at start-up. Horovod starts last (hvd.init() when its
        # backend is made, on the MPI that mpi4py initialised with MPI_THREAD_MULTIPLE): its
        # background thread wakes every HOROVOD_CYCLE_TIME and would steal the cores of the
        # other backends' measurements.
        import tensorflow as tf
        cluster.apply_tf_threads(tf, nthreads)
        backends = [b for b in backends if b != "horovod"] + ["horovod"]
        # An allreduce waits for the next cycle of Horovod's background thread: at its default
        # (1 ms, 5 ms in older releases) that is the whole time of a 64 KiB message here. 0.1 ms
        # measured 1-2x faster at 1-16 MiB on 2 ranks (results/bench/README.md).
        os.environ.setdefault("HOROVOD_CYCLE_TIME", "0.1")
        # With one core per rank, Horovod's background thread at equal priority preempts the
        # calling thread mid-dispatch when it wakes for a cycle; at nice 19 it runs when the
        # caller waits for it: 4 KiB 154-212 us against 208-378, 1 MiB 1.8x faster (README).
        os.environ.setdefault("HPCDL_HOROVOD_NICE", "19")
        from .comm.horovod import nice_setting
        try:
            nice_setting()
        except ValueError as exc:
            raise UserError(str(exc)) from None
    import numpy as np
    from mpi4py import MPI
    from . import records
    from .comm import get_backend
    from .comm.compression import get_codec
    from .costmodel import algorithm_for, busbw_factor

    world = MPI.COMM_WORLD.Dup()
    rank, p = world.Get_rank(), world.Get_size()
    root = rank == 0
    hosts = world.allgather(layout.host)
    bus = busbw_factor(p)

    def slowest(times):
        arr = np.asarray(times, dtype=np.float64)
        world.Allreduce(MPI.IN_PLACE, arr, op=MPI.MAX)
        return arr

    def timed(fn, iters, warm, sync=world.Barrier):
        for _ in range(warm):
            sync()
            fn()
        times = np.empty(iters, dtype=np.float64)
        out = None
        for i in range(iters):
            sync()
            t0 = time.perf_counter()
            out = fn()
            times[i] = time.perf_counter() - t0
        return slowest(times), out

    nmax = max(sizes) // 4
    # 2 MiB aligned, so 64-byte aligned as a framework's tensors are: Horovod's op reads it in place
    src = _mapped(nmax)
    src[...] = _data(np, 0, nmax, rank, opts.seed)
    dst = _mapped(nmax)

    # The physical references of each size, measured here on every rank at once: memcpy, and the
    # local work of one reduction hop of each codec (encode + decode-and-add, float32 add for none).
    refs = {}
    for size in sizes:
        n = size // 4
        iters = min(_iters_for(size, opts), 100)
        t_copy, _ = timed(lambda: np.copyto(dst[:n], src[:n]), iters, 1)
        refs[size] = {"memcpy": _stats(np, t_copy)}
        for comp in compressions:
            codec = get_codec(comp)
            acc = dst[:n]

            def hop():
                codec.decode_add(codec.encode(src[:n]), n, acc)
            t_red, _ = timed(hop, iters, 1)
            refs[size]["reduce:" + comp] = _stats(np, t_red)

    say = (lambda msg: print(msg, flush=True)) if root else (lambda msg: None)
    vers = records.versions()
    say(f"# hpcdl bench allreduce: ranks={p} nodes={len(set(hosts))} hosts={','.join(sorted(set(hosts)))} "
        f"threads/rank={nthreads} launcher={layout.launcher}")
    say(f"#  minBytes {sizes[0]} maxBytes {sizes[-1]} step: {opts.stepfactor:g}(factor) "
        f"warmup iters: {opts.warmup_iters} iters: {opts.iters} (to {opts.max_iters} below "
        f"{_ITER_BYTES} B) check: {opts.check} min-busbw: {opts.min_busbw:g} GB/s seed: {opts.seed}")
    say(f"#  backends: {' '.join(backends)}  compressions: {' '.join(compressions)}  type: float32  "
        f"malloc: {malloc}")
    # MPI_Get_library_version's string ends in a NUL byte, which makes the table "binary" to grep
    say("#  versions: " + " ".join(f"{k}={str(v).strip(chr(0)).strip()}" for k, v in vers.items()))
    env = cluster.launcher_env()
    say("#  env: " + (" ".join(f"{k}={v}" for k, v in env.items()
                               if not k.startswith("SLURM_")) or "(none)"))
    say("#  time: per iteration the slowest rank, the backend's own barrier outside; "
        f"algbw = size/median time; busbw = algbw*2(p-1)/p = algbw*{bus:.3g}; "
        "size in float32 bytes (compressed on the wire)")
    say("#")
    head = (f"#{'backend':>8} {'compr':>5} {'size(B)':>11} {'count':>10} {'type':>6} "
            f"{'min(us)':>10} {'median(us)':>11} {'p99(us)':>10} {'algbw(GB/s)':>11} "
            f"{'busbw(GB/s)':>11} {'memcpy(GB/s)':>12} {'bus/mem':>7} {'reduce(us)':>10} {'#wrong':>7}")
    say(head)

    rows = []
    for name in backends:
        for comp in compressions:
            be = get_backend(name, comp)
            for size in sizes:
                n = size // 4
                iters = _iters_for(size, opts)
                warm = max(opts.warmup_iters, iters // 10)
                # the backend's own barrier: an MPI_Barrier from the main thread while Horovod's
                # background thread runs its own collectives every cycle took 4 MiB from 0.9 to
                # 2.4 ms (results/bench/README.md); training has no such barrier between steps
                times, out = timed(lambda: be.allreduce_mean(src[:n]), iters, warm, be.barrier)
                wrong = 0
                identical = True
                if opts.check:
                    if opts.inject_error and rank == p - 1:
                        out = out.copy()
                        out[n // 2] += 1.0
                    wrong = _count_wrong(np, out, comp, p, opts.seed)
                    crcs = world.allgather(zlib.crc32(memoryview(out).cast("B")))
                    identical = len(set(crcs)) == 1
                    wrong = world.allreduce(wrong, op=MPI.SUM)
                    if not identical:      # a rank that disagrees with rank 0 is wrong too
                        wrong += sum(1 for c in crcs if c != crcs[0])
                st = _stats(np, times)
                algbw = size / st["median"] / 1e9
                busbw = algbw * bus
                memcpy = size / refs[size]["memcpy"]["median"] / 1e9
                red = refs[size]["reduce:" + comp]["median"]
                row = {"backend": name, "compression": comp, "model": algorithm_for(name, comp),
                       "size_bytes": size, "count": n, "type": "float",
                       "wire_bytes": be.codec.wire_nbytes(n), "iters": iters, "warmup": warm,
                       "time_us": {k: (v * 1e6 if k != "n" else v) for k, v in st.items()},
                       "algbw_gbs": algbw, "busbw_gbs": busbw, "memcpy_gbs": memcpy,
                       "bus_over_memcpy": busbw / memcpy if memcpy else None,
                       "reduce_us": red * 1e6, "wrong": int(wrong), "identical": identical}
                rows.append(row)
                say(f" {name:>8} {comp:>5} {size:>11} {n:>10} {'float':>6} {st['min'] * 1e6:>10.1f} "
                    f"{st['median'] * 1e6:>11.1f} {st['p99'] * 1e6:>10.1f} {algbw:>11.3f} "
                    f"{busbw:>11.3f} {memcpy:>12.2f} {row['bus_over_memcpy']:>7.3f} "
                    f"{red * 1e6:>10.1f} {wrong:>7d}")

    summary = {}
    for name in backends:
        for comp in compressions:
            sel = [r for r in rows if r["backend"] == name and r["compression"] == comp]
            large = [r["busbw_gbs"] for r in sel if r["size_bytes"] >= 4 << 20]
            summary[name if comp == "none" else f"{name}+{comp}"] = {
                "avg_busbw_gbs": sum(r["busbw_gbs"] for r in sel) / len(sel),
                "avg_busbw_ge_4MiB_gbs": (sum(large) / len(large)) if large else None,
                "wrong": sum(r["wrong"] for r in sel)}
    total_wrong = sum(s["wrong"] for s in summary.values())
    slow = [k for k, s in summary.items() if s["avg_busbw_gbs"] < opts.min_busbw]
    ok = total_wrong == 0 and not slow
    say(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
    for key, s in summary.items():
        large = s["avg_busbw_ge_4MiB_gbs"]
        say(f"# Avg bus bandwidth    : {s['avg_busbw_gbs']:8.3f} GB/s  {key}"
            + (f"  (>= 4 MiB: {large:.3f})" if large is not None else ""))
    reasons = ([f"{total_wrong} wrong"] if total_wrong else []) + \
              [f"{k} below --min-busbw {opts.min_busbw:g}" for k in slow]
    say(f"# Result: {'OK' if ok else 'FAILED (' + '; '.join(reasons) + ')'}")

    if root:
        path = opts.results or os.environ.get("HPCDL_BENCH_RESULTS") or DEFAULT_RESULTS
        if path != "-":
            extra = {"execution_order": backends}
            if "horovod" in backends:
                import horovod.tensorflow as hvd
                extra["horovod_build"] = {"mpi": bool(hvd.mpi_built()), "gloo": bool(hvd.gloo_built()),
                                          "nccl": bool(hvd.nccl_built()),
                                          "mpi_enabled": bool(hvd.mpi_enabled()),
                                          "gloo_enabled": bool(hvd.gloo_enabled())}
                from .comm.horovod import init_info
                extra["horovod_thread"] = init_info()   # the niceness its thread(s) were given
            record = {
                "schema": BENCH_SCHEMA, "kind": "bench", "op": "allreduce", "tag": opts.tag,
                "time": records.now_iso(), "status": "ok" if ok else "failed",
                "params": {"backends": backends, "compressions": compressions,
                           "minbytes": sizes[0], "maxbytes": sizes[-1], "stepfactor": opts.stepfactor,
                           "iters": opts.iters, "max_iters": opts.max_iters,
                           "warmup_iters": opts.warmup_iters, "check": opts.check,
                           "min_busbw_gbs": opts.min_busbw, "seed": opts.seed, "dtype": "float32",
                           "threads_per_rank": nthreads, "inject_error": opts.inject_error,
                           "malloc": malloc},
                "layout": {"size": p, "nodes": len(set(hosts)), "ranks_per_node": layout.local_size,
                           "hosts": sorted(set(hosts))},
                "busbw_factor": bus,
                "rows": rows,
                "references": {str(s): {k: {kk: (vv * 1e6 if kk != "n" else vv) for kk, vv in v.items()}
                                        for k, v in r.items()} for s, r in refs.items()},
                "summary": summary,
                "manifest": records.manifest(layout, hosts=hosts, extra=extra),
            }
            records.append(path, record)
            say(f"# Record appended to {path}")
    # Communicators are left to MPI_Finalize: freeing them after Horovod's shutdown hooks ran
    # crashes Open MPI 4.1 at exit.
    return 0 if ok else 1


# --- the fit -----------------------------------------------------------------------------------------

def _pick_record(opts):
    from . import records
    path = Path(opts.input)
    if not path.is_file():
        raise UserError(f"--input {path} does not exist: run 'mpirun -np 2 hpcdl bench allreduce' first")
    recs = [r for r in records.read(path) if r.get("schema") == BENCH_SCHEMA and r.get("op") == "allreduce"]
    if opts.ranks is not None:
        recs = [r for r in recs if r.get("layout", {}).get("size") == opts.ranks]
    if opts.tag is not None:
        recs = [r for r in recs if opts.tag in (r.get("tag") or "")]
    if not recs:
        raise UserError(f"no allreduce record{' with %d ranks' % opts.ranks if opts.ranks else ''}"
                        f"{' tagged %r' % opts.tag if opts.tag else ''} in {path}")
    try:
        rec = recs[opts.record]
    except IndexError:
        raise UserError(f"--record {opts.record}: {path} holds {len(recs)} allreduce record(s)") from None
    if opts.records > 1:
        end = recs.index(rec) + 1
        if end < opts.records:
            raise UserError(f"--records {opts.records}: only {end} allreduce record(s) up to "
                            f"--record {opts.record} in {path}")
        rec = median_record(recs[end - opts.records:end])
    return rec, path


def median_record(recs):
    """One record whose rows hold, per backend, compression and size, the median over ``recs``.

    A sweep on a shared machine catches some sizes in a busy moment; the median of a few sweeps
    is the machine's behaviour rather than its neighbours'. Only rows present in every record
    are kept; the layout must agree.
    """
    import statistics
    sizes = {r["layout"]["size"] for r in recs}
    if len(sizes) != 1:
        raise UserError(f"--records: the records have different rank counts {sorted(sizes)}")
    keyed = [{(r["backend"], r["compression"], r["size_bytes"]): r for r in rec["rows"]}
             for rec in recs]
    rows = []
    for key, row in keyed[-1].items():
        if not all(key in k for k in keyed):
            continue
        new = dict(row)
        new["time_us"] = dict(row["time_us"], median=statistics.median(
            k[key]["time_us"]["median"] for k in keyed))
        new["reduce_us"] = statistics.median(k[key]["reduce_us"] for k in keyed)
        rows.append(new)
    out = dict(recs[-1], rows=rows)
    out["time"] = f"{recs[0].get('time')} .. {recs[-1].get('time')} (median of {len(recs)})"
    return out


def _human(nbytes) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g}{unit}"
    return f"{nbytes:g}"


def _gamma_of(row) -> float:
    return row["reduce_us"] * 1e-6 / row["size_bytes"] if row.get("reduce_us") else 0.0


def fit_record(record: dict, min_bytes: int = 64 << 10) -> dict:
    """Fit every backend+compression of one bench record; return the ``backends`` mapping."""
    from .costmodel import algorithm_for, fit_regimes, predict_fit
    p = int(record["layout"]["size"])
    groups = {}
    for row in record["rows"]:
        groups.setdefault((row["backend"], row["compression"]), []).append(row)
    out = {}
    for (backend, comp), rows in groups.items():
        rows = sorted(rows, key=lambda r: r["size_bytes"])
        use = [r for r in rows if r["size_bytes"] >= min_bytes]
        if len(use) < 2:
            continue
        model = rows[0].get("model") or algorithm_for(backend, comp)
        sizes = [r["size_bytes"] for r in use]
        # gamma(n): the reduction hop's measured time per byte at each size (it too changes
        # between in-cache and out-of-cache sizes), not a single slope
        gam = [_gamma_of(r) for r in use]

        res = fit_regimes(model, sizes, [r["time_us"]["median"] * 1e-6 for r in use], p, gamma=gam)
        res["points"] = [[r["size_bytes"], r["time_us"]["median"] * 1e-6,
                          predict_fit(res, r["size_bytes"], p, gamma=_gamma_of(r))] for r in rows]
        out[backend if comp == "none" else f"{backend}+{comp}"] = res
    return out


def fit_main(opts) -> int:
    from . import records
    record, path = _pick_record(opts)
    p = int(record["layout"]["size"])
    fits = fit_record(record, opts.min_bytes)
    if not fits:
        raise UserError(f"the record holds fewer than two sizes >= {opts.min_bytes} B per backend: "
                        "sweep to larger --maxbytes")
    print(f"# hpcdl bench fit: {path} record of {record.get('time')} ({p} ranks, "
          f"hosts {','.join(record['layout'].get('hosts', []))}); fit and judged from {opts.min_bytes} B")
    from .costmodel import FORMULAS
    print("# models (n = float32 bytes, hpcdl.costmodel): "
          + "; ".join(f"{k} t = {v}" for k, v in FORMULAS.items()))
    print("# g (gamma) is measured: the reduction hop's local time per byte at each size, same run")
    print("# alpha, beta: one line over all sizes (weighted least squares on relative error); "
          "where it misses, up to three regimes (in cache, in memory, buffers mapped afresh per "
          "call), each [from-to] alpha beta, predict and are judged")
    print(f"#{'backend':>13} {'model':>9} {'alpha(us)':>10} {'beta(ns/B)':>11} {'gamma(ns/B)':>11} "
          f"{'r2':>7} {'max|err|':>8} {'within':>7}")
    verdicts = {}
    for key, res in fits.items():
        judged = [abs(pr / m - 1) for s, m, pr in res["points"] if s >= opts.min_bytes]
        ok = max(judged) <= opts.tolerance
        verdicts[key] = ok
        res["within_tolerance"] = ok
        print(f" {key:>13} {res['model']:>9} {res['alpha_s'] * 1e6:>10.2f} "
              f"{res['beta_s_per_byte'] * 1e9:>11.4f} {res['gamma_s_per_byte'] * 1e9:>11.4f} "
              f"{res['r2']:>7.4f} {max(judged) * 100:>7.1f}% {'yes' if ok else 'NO':>7}"
              + ("  " + "; ".join(f"[{_human(g['from_bytes'])}-{_human(g['to_bytes'])}] "
                                    f"{g['alpha_s'] * 1e6:.1f} us {g['beta_s_per_byte'] * 1e9:.3f} ns/B"
                                    for g in res["regimes"])
                 if len(res.get("regimes", ())) > 1 else ""))
    print("#")
    print(f"#{'backend':>13} {'size(B)':>11} {'measured(us)':>13} {'predicted(us)':>14} {'pred/meas':>9} {'fit':>4}")
    for key, res in fits.items():
        for size, meas, pred in res["points"]:
            print(f" {key:>13} {size:>11} {meas * 1e6:>13.1f} {pred * 1e6:>14.1f} {pred / meas:>9.3f} "
                  f"{'*' if size >= opts.min_bytes else '':>4}")
    good = sum(verdicts.values())
    print(f"# Prediction within +-{opts.tolerance * 100:.0f}% from {opts.min_bytes} B: {good}/{len(verdicts)} "
          f"backends ({', '.join(k for k, v in verdicts.items() if not v) or 'all'}"
          f"{' off' if good < len(verdicts) else ' within'})")
    if opts.output != "-":
        doc = {"schema": FIT_SCHEMA, "ranks": p, "min_bytes": opts.min_bytes,
               "tolerance": opts.tolerance,
               "source": {"path": str(path), "time": record.get("time"), "tag": record.get("tag")},
               "backends": fits,
               "manifest": records.manifest(extra={"bench_manifest": record.get("manifest", {})})}
        out = Path(opts.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True, default=records._jsonable) + "\n")
        os.replace(tmp, out)
        print(f"# Fit written to {out}")
    return 0

