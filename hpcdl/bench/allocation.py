"""What the forecast needs from an allocation beyond a study's runs, measured by the allocation's
own ranks: run it under mpirun, srun or a Grid Engine job's mpirun, one rank per node, at each
node count the forecast draws on (the calibration's and the largest you can get).

- **The nodes' spread** (a spread file, ``hpcdl.host-spread/1``, :mod:`hpcdl.analysis.
  host_spread`): every rank times the workload's forward and backward pass ``--probes`` times,
  all ranks at once, in ``--rounds`` rounds; each round's per-rank medians over their center are
  how far p nodes lie apart computing at once (a step waits for its slowest rank). After each
  pass the first rank times one alone, the others idle: the median of those pairs' ratios is its
  crowd, how much longer a node computes while p compute at once (nodes sharing a host; a ratio
  of passes seconds apart, so the drift between jobs below does not enter it). Each round's
  center (seconds of one pass) is kept beside it for reading; the model does not take it: each
  node count is measured by its own job minutes apart, and a pass drifts more than that between
  jobs on a shared host (docs/decisions.md).
- **The compute's growth beside a live exchange** (the loop file's ``growth``): Horovod started as
  training starts it, every rank times the workload's pass ``--probes`` times a round right
  after an exchange of its gradients, all at once, as a training probe does; over the first
  rank's pass alone (the others asleep, before Horovod starts and after it stops) it is how much
  longer a node computes in an n-node training. Run at the calibration's node counts and up to
  4 nodes: the model holds the largest count's beyond it (:mod:`hpcdl.model.loop_share`).
- **The steps' overlap** (the loop file's ``window``): on several nodes every rank times
  ``--steps`` training steps a round, the pass and its gradients averaged in one graph as
  training runs them, each beside the same exchange alone; with the pass beside a live exchange,
  the share of the pass the step hid exchange behind at n nodes, which the model takes beyond
  the calibration (:mod:`hpcdl.model.parts`).
- **Horovod's loop** (a loop file, ``hpcdl.loop-cpu/1``, :mod:`hpcdl.model.loop_share`):
  Horovod started as training starts it, then ``--seconds`` with the main thread asleep and
  ``--seconds`` with it computing (pure Python, one thread); from each thread's CPU time
  (``/proc/self/task``), the share of the rank's CPU its other threads took from the compute.
  On a node of a fraction of a core that comes out of the compute, more with more peers.

Each file keeps one entry per node count (per rank count where every rank shares one machine,
as a workstation study's points are keyed) and names the machine it measured (the processor, and
the machine's settings where it sets them), as records do; a run at a node count replaces that
count's entry and adds to the others. The report uses a file only for records of the same machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from .. import cluster, machine, records, stack
from ..errors import UserError

LOOP_SCHEMA = "hpcdl.loop-cpu/1"        # as hpcdl.model.loop_share reads it
SPREAD_SCHEMA = "hpcdl.host-spread/1"   # as hpcdl.model.host_spread reads it


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .tune_launch import add_workload_arguments
    add_workload_arguments(p, "workload (whose forward and backward pass is timed)")
    m = p.add_argument_group("measurement")
    m.add_argument("--rounds", type=int, default=3, help="rounds of the spread (3)")
    m.add_argument("--probes", type=int, default=20, help="passes timed per rank and round (20)")
    m.add_argument("--steps", type=int, default=5,
                   help="training steps timed per round, each beside its exchange alone (5; 0: "
                        "none)")
    m.add_argument("--seconds", type=float, default=10.0,
                   help="each window of the loop's CPU, asleep and computing (10)")
    m.add_argument("--spread", default="results/allocation/spread.json",
                   help="the spread file to add this node count to")
    m.add_argument("--loop", default="results/allocation/loop-cpu.json",
                   help="the loop file to add this node count to")


# --- what a thread's CPU says -------------------------------------------------------------------

def threads_cpu() -> Dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue                                    # a thread that ended meanwhile
        fields = stat.rsplit(")", 1)[1].split()        # from the state on (field 3)
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def window(seconds: float, work: Optional[Callable[[], object]] = None) -> Tuple[float, float, float]:
    """(wall, main thread's CPU, the other threads' CPU) over ``seconds`` of ``work`` in the main
    thread (None: it sleeps)."""
    main = os.getpid()
    a0, t0 = threads_cpu(), time.monotonic()
    end = t0 + seconds
    if work is None:
        time.sleep(seconds)
    else:
        while time.monotonic() < end:
            work()
    a1, t1 = threads_cpu(), time.monotonic()
    used = {k: v - a0.get(k, 0.0) for k, v in a1.items()}
    mine = used.pop(main, 0.0)
    return t1 - t0, mine, sum(used.values())


# --- the files ----------------------------------------------------------------------------------

def machine_of(host: str) -> Tuple[str, Optional[dict]]:
    """(the machine setting a record made on ``host`` carries, the node's facts there or None)."""
    return machine.setting_at(host, records.cpu_identity())


def merged(path: Path, schema: str, machine: str, nodes: int) -> dict:
    """The file at ``path`` (a new one where none is) with ``nodes`` among its node counts, for
    the caller to put that count's entry in; a file of another schema or machine is refused
    rather than mixed."""
    doc = {"schema": schema, "made_for": {"machine": machine, "nodes": []}}
    if path.exists():
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: unreadable ({exc}); give another path") from None
        if doc.get("schema") != schema:
            raise UserError(f"{path}: not a {schema} file; give another path")
        made = (doc.get("made_for") or {}).get("machine")
        if made != machine:
            raise UserError(f"{path} was measured on '{made}', this allocation is '{machine}': "
                            "give another path (a file holds one machine)")
    made = doc.setdefault("made_for", {})
    made["nodes"] = sorted(set(made.get("nodes") or []) | {nodes})
    return doc


def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        records.write_atomic(path, json.dumps(doc, indent=1) + "\n")   # the former file, or this
    except OSError as exc:
        raise UserError(f"{path}: cannot be written ({exc.strerror or exc}); the file is as it "
                        "was before this measurement") from None


# --- the ranks ----------------------------------------------------------------------------------

def _spread_rounds(world, grads, rounds: int, probes: int) -> List[dict]:
    """Each round's times of this rank's passes, ``together`` (all ranks starting each pass
    together) and, each right after one of them, ``alone`` (the first rank's while the others
    wait): the pairs' ratios are its crowd, how much longer it computed beside the others than
    alone, with the host's drift between passes cancelled."""
    def timed() -> float:
        t0 = time.perf_counter()
        grads()[-1].numpy()
        return time.perf_counter() - t0
    grads()[-1].numpy()                   # traced before any is timed
    out = []
    first = world.Get_rank() == 0
    for _ in range(rounds):
        together, alone = [], []
        for _ in range(probes):
            world.Barrier()
            together.append(timed())
            world.Barrier()
            if first:
                alone.append(timed())
            _idle_barrier(world)
        out.append({"together": together, "alone": alone})
    return out


def _idle_barrier(world) -> None:
    """A barrier the waiting ranks sleep in: MPI's own spins, and the CPU it takes from a host
    the nodes share would count against the pass timed alone."""
    req = world.Ibarrier()
    while not req.Test():
        time.sleep(0.002)


def _busy() -> int:
    """Work for the main thread alone: pure Python holds the GIL and starts no thread (a numpy
    matrix product's BLAS threads would read as the loop's share)."""
    return sum(i * i for i in range(20000))


def _alone(world, grads, probes: int) -> List[float]:
    """The first rank's passes while the others sleep (nothing else runs: no Horovod)."""
    out = []
    for _ in range(probes):
        _idle_barrier(world)
        if world.Get_rank() == 0:
            t0 = time.perf_counter()
            grads()[-1].numpy()
            out.append(time.perf_counter() - t0)
    _idle_barrier(world)
    return out


def _barrier(tf, hvd, name: str) -> None:
    """Every rank waits for all: a Horovod allreduce of one number."""
    hvd.allreduce(tf.constant(0.0), op=hvd.Sum, name=name)


def _live(tf, hvd, grads, rounds: int, probes: int) -> List[List[float]]:
    """Each round's passes of this rank beside a live exchange, as a training probe times them:
    the workload's gradients averaged through Horovod, then every rank starting the pass at once
    (its loop cycling, MPI's progress and the stack's traffic in the node's CPU share)."""
    @tf.function
    def exchange(gs):
        return hvd.grouped_allreduce(list(gs), op=hvd.Average, name="hpcdl.bench.live")
    gs = grads()
    exchange(gs)[-1].numpy()
    out = []
    for _ in range(rounds):
        times = []
        for _ in range(probes):
            exchange(gs)[-1].numpy()
            _barrier(tf, hvd, "hpcdl.bench.live.barrier")
            t0 = time.perf_counter()
            gs = grads()
            gs[-1].numpy()
            times.append(time.perf_counter() - t0)
        out.append(times)
    return out


def _overlap(tf, hvd, grads, rounds: int, steps: int) -> List[dict]:
    """Each round's training steps as training runs them: the pass and its gradients averaged
    one tensor at a time in one graph, as hvd.DistributedGradientTape does (a late layer's
    exchange starts while earlier ones are differentiated), each after a barrier and followed by
    the same exchange alone, as a probe times it. With the pass beside a live exchange
    (:func:`_live`): how much of the exchange a step hid at this node count. (Steps back to
    back, without the barriers, read far off training's steps on nodes of 0.15 cores: 1.41 s
    at 3 nodes where training took 1.89 s; docs/decisions.md.)"""
    def average(gs):     # as hpcdl.comm.horovod's average (a room this one may not import)
        return [hvd.allreduce(g, op=hvd.Average) for g in gs]
    inner = getattr(grads, "python_function", grads)    # one graph, not a call of another
    step, alone = tf.function(lambda: average(inner())), tf.function(average)
    gs = grads()
    step()[-1].numpy()
    alone(gs)[-1].numpy()
    out = []
    for _ in range(rounds):
        times: Dict[str, List[float]] = {"step": [], "exchange": []}
        for _ in range(steps):
            for name, call in (("step", step), ("exchange", lambda: alone(gs))):
                _barrier(tf, hvd, "hpcdl.bench.overlap.barrier")
                t0 = time.perf_counter()
                call()[-1].numpy()
                times[name].append(time.perf_counter() - t0)
        out.append(times)
    return out


def _horovod_phase(tf, grads, seconds: float, rounds: int, probes: int, steps: int) -> dict:
    """Horovod started as training does and one exchange; the passes beside a live exchange
    (:func:`_live`), the steps' overlap (:func:`_overlap`, on several ranks), then the loop's
    two windows."""
    import horovod.tensorflow as hvd
    hvd.init()
    hvd.allreduce(tf.ones([1024]), op=hvd.Average)
    live = _live(tf, hvd, grads, rounds, probes)
    overlap = _overlap(tf, hvd, grads, rounds, steps) if hvd.size() > 1 and steps else []
    time.sleep(1.0)
    idle = window(seconds)
    busy = window(seconds, _busy)
    hvd.shutdown()
    return {"idle": idle, "busy": busy, "live": live, "overlap": overlap}


def main(opts) -> int:
    from .tune_launch import _grads_fn, _train_opts
    if min(opts.rounds, opts.probes) < 1 or opts.seconds <= 0 or opts.steps < 0:
        raise UserError("--rounds and --probes must be at least 1, --steps at least 0, "
                        "--seconds above 0")
    layout = cluster.discover()
    threads = cluster.configure_threads(layout)
    cluster.apply_rank_defaults()
    targs = _train_opts(opts)
    tf = stack.import_tensorflow()
    cluster.apply_tf_threads(tf, threads)
    from mpi4py import MPI
    from .. import workloads
    world = MPI.COMM_WORLD
    if layout.num_nodes not in (1, layout.size):
        raise UserError(f"{layout.size} ranks on {layout.num_nodes} nodes: run one rank per node "
                        "(mpirun --map-by ppr:1:node, srun --ntasks-per-node=1), or all on one")
    wl = workloads.load(targs.workload, targs)
    grads = _grads_fn(tf, wl, targs.batch_size)
    if grads is None:
        raise UserError(f"workload {targs.workload} has no batch to time its compute on")
    spread = world.gather(_spread_rounds(world, grads, opts.rounds, opts.probes), root=0)
    cpu = world.gather({"host": layout.host, **_horovod_phase(
        tf, grads, opts.seconds, opts.rounds, opts.probes, opts.steps)}, root=0)
    after = _alone(world, grads, opts.probes)     # the host's drift across the Horovod phase
    if layout.rank == 0:
        before = [t for r in spread[0] for t in r["alone"]]
        growth = _growth(cpu[0]["live"], before + after)
        _report(opts, layout, spread, cpu, growth, _window(cpu[0]["overlap"], growth))
    world.Barrier()
    return 0


def _deviations(probes: List[List[float]]) -> List[float]:
    """Each node's median pass over the center, the median of every node's passes together (a
    record's ranks are centred alike: hpcdl.model.measured.centred)."""
    center = statistics.median(v for p in probes for v in p)
    return [statistics.median(p) / center for p in probes]


def _growth(live: List[List[float]], alone: List[float]) -> dict:
    """The first node's pass beside a live exchange of n nodes over its pass alone (passes
    alone timed before and after the Horovod phase, so the host's drift across it cancels):
    how much longer a node computes in an n-node training than alone, what the model carries
    beyond the calibration (:mod:`hpcdl.model.loop_share`)."""
    center = statistics.median(alone)
    return {"ratio": statistics.median(t for r in live for t in r) / center,
            "rounds": [statistics.median(r) / center for r in live], "alone_s": center,
            "live_s": statistics.median(t for r in live for t in r)}


def _window(overlap: List[dict], growth: dict) -> Optional[dict]:
    """The share of the first node's pass (beside a live exchange, :func:`_growth`) its steps
    hid exchange behind: (pass + exchange alone - step) / pass of the medians, in [0, 1], as
    the model reads a calibration run's (:mod:`hpcdl.model.parts`); None on one rank."""
    if not overlap:
        return None
    step = statistics.median(t for r in overlap for t in r["step"])
    exchange = statistics.median(t for r in overlap for t in r["exchange"])
    c = growth["live_s"]
    return {"share": min(1.0, max(0.0, (c + exchange - step) / c)), "step_s": step,
            "exchange_s": exchange, "pass_s": c,
            "rounds": [{"step_s": statistics.median(r["step"]),
                        "exchange_s": statistics.median(r["exchange"])} for r in overlap]}


def _report(opts, layout, spread: List[List[dict]], cpu: List[dict], growth: dict,
            window: Optional[dict]) -> None:
    """Rank 0: the figures printed and added to the two files."""
    n = layout.size
    machine, facts = machine_of(layout.host)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = (f"hpcdl bench allocation --rounds {opts.rounds} --probes {opts.probes} "
               f"--steps {opts.steps} --seconds {opts.seconds:g} on {n} node(s)")
    rounds = [_deviations([rank[r]["together"] for rank in spread]) for r in range(opts.rounds)]
    centers = [statistics.median(v for rank in spread for v in rank[r]["together"])
               for r in range(opts.rounds)]
    crowd = [statistics.median(t / a for t, a in zip(r["together"], r["alone"]))
             for r in spread[0]]
    cycle = os.environ.get("HOROVOD_CYCLE_TIME", "1")
    idle = max((c["idle"][1] + c["idle"][2]) / c["idle"][0] for c in cpu)
    taken = sorted(c["busy"][2] / (c["busy"][1] + c["busy"][2]) for c in cpu)
    print(f"# {command}; machine: {machine or 'unnamed'}")
    for r, devs in enumerate(rounds):
        print(f"spread round {r + 1}: slowest node {max(devs):.3f}x the center of {n} "
              f"({centers[r] * 1e3:.1f} ms a pass); the first node {crowd[r]:.3f}x as long as "
              "alone")
    print(f"loop: idle {idle * 1e3:.1f} ms of CPU per s; beside compute the other threads took "
          + ", ".join(f"{t * 100:.1f}%" for t in taken) + f" of a rank's CPU (cycle {cycle} ms)")
    print(f"growth: the first node's pass beside a live exchange of {n} took "
          f"{growth['live_s'] * 1e3:.1f} ms, {growth['ratio']:.3f}x alone "
          f"({growth['alone_s'] * 1e3:.1f} ms); by round "
          + ", ".join(f"{r:.3f}x" for r in growth["rounds"]))
    if window:
        print(f"overlap: a step took {window['step_s'] * 1e3:.1f} ms, its exchange alone "
              f"{window['exchange_s'] * 1e3:.1f} ms, the pass {window['pass_s'] * 1e3:.1f} ms: "
              f"{window['share'] * 100:.0f}% of the pass hid exchange")
    extra = {"time": stamp, "command": command}
    link = (facts or {}).get("link_rate")
    if n > 1:
        sdoc = merged(Path(opts.spread), SPREAD_SCHEMA, machine, n)
        sdoc.setdefault("spread", {})[str(n)] = rounds
        sdoc.setdefault("center", {})[str(n)] = centers      # seconds of one pass, by round
        sdoc.setdefault("crowd", {})[str(n)] = crowd        # together over alone, by round
        sdoc.update(extra)
        sdoc["made_for"].update(coupled=False, rounds=opts.rounds, link_rate=link,
                                one_node=layout.num_nodes == 1)
        _write(Path(opts.spread), sdoc)
        print(f"# spread at {n} nodes added to {opts.spread}")
    share = {"median": statistics.median(taken), "busiest": taken[-1], "idle_cpu_s_per_s": idle}
    ldoc = merged(Path(opts.loop), LOOP_SCHEMA, machine, n)
    ldoc.setdefault("shares", {}).setdefault(cycle, {})[str(n)] = share
    ldoc.setdefault("growth", {}).setdefault(cycle, {})[str(n)] = growth
    if window:
        ldoc.setdefault("window", {}).setdefault(cycle, {})[str(n)] = window
    ldoc.update(extra)
    ldoc["made_for"].update(rounds=1, seconds=opts.seconds, link_rate=link,
                            one_node=layout.num_nodes == 1)
    _write(Path(opts.loop), ldoc)
    print(f"# loop share at {n} node(s) added to {opts.loop}")
