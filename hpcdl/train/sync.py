"""Synchronous data parallelism (the default way of training): every rank a replica, the gradients
averaged by an exchange of ``hpcdl.comm`` every step, identical replicas after it.

The loop times each step and each iteration of steps with their bookkeeping, probes compute and
the exchange alone at a few steps, agrees on stopping every second or so, and checkpoints; the
run's figures come from every rank's measurements.
"""
from __future__ import annotations

import socket
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from . import checkpoint, timeline
from .control import (Evaluations, fault_from_env, inject_fault, next_interval, StopWatch,
                      straggler, target_missed)
from .figures import (iteration_rates, rank_phases, slowest_rank_iterations, step_split,
                      summarize_values)
from .interface import Mode, written_by
from .replica import Replica
from .runtime import make_plan, Plan
from .. import cluster, comm, machine
from ..errors import UserError


# --- the loop ---------------------------------------------------------------------------------------

@dataclass
class LoopResult:
    """What one rank measured: timed steps, iterations, probes, the loss, and why it stopped."""

    step: int = 0
    step_times: List[float] = field(default_factory=list)     # the step call alone
    iter_times: List[float] = field(default_factory=list)     # per_iter steps with their bookkeeping
    comp_times: List[float] = field(default_factory=list)
    exch_times: List[float] = field(default_factory=list)
    probe_times: List[float] = field(default_factory=list)       # compute alone
    probe_exch_times: List[float] = field(default_factory=list)  # the exchange alone
    probe_waits: List[float] = field(default_factory=list)       # waiting for the slowest rank
    probe_cpu: List[float] = field(default_factory=list)         # CPU s of the process (all its
    probe_exch_cpu: List[float] = field(default_factory=list)    # threads) in each probe's parts
    input_times: List[float] = field(default_factory=list)       # each timed step's input
    book_times: List[float] = field(default_factory=list)        # each timed step's bookkeeping
    ckpt_time: float = 0.0                                        # s writing checkpoints
    timeline: Optional[str] = None     # Horovod's timeline of the timed steps (--timeline)
    timeline_from: Optional[int] = None   # the first timed step it recorded (index of step_times)
    curve: List[list] = field(default_factory=list)
    first_loss: Optional[float] = None
    last_loss: object = None
    wall: float = 0.0
    stopped: Optional[str] = None
    net: Optional[dict] = None        # where links are set: the node's interface bytes while timed
    cgroup: Optional[dict] = None     # under a CPU quota: how often it held the rank back, timed
    evals: List[dict] = field(default_factory=list)   # held-out metric during training
    eval_time: float = 0.0            # s spent evaluating (not training)
    target: Optional[dict] = None     # the --target and whether and when it was reached
    checkpoint: Optional[str] = None  # written when the ranks agreed to stop early


def _input_and_probe(rep: Replica, res: LoopResult, step: int, probe: bool, slow) -> tuple:
    """(x, y, input s, probe s) of a step: its batch (and the time it took), the probe when this
    is a probe step, and a straggler's delays on purpose (``slow``: HPCDL_SLOW, or None)."""
    late_input, late_compute = ((slow[1], 0.0) if slow[0] == "input" else (0.0, slow[1])) \
        if slow else (0.0, 0.0)
    t0 = time.perf_counter()
    x, y = rep.batch(step)
    if late_input:
        time.sleep(late_input)
    t_in, probe_s = time.perf_counter() - t0, 0.0
    if probe:
        pr = rep.probe(x, y, late_compute)
        res.probe_times.append(pr.compute)
        res.probe_cpu.append(pr.compute_cpu)
        probe_s = pr.total
        if pr.exchange is not None:
            res.probe_exch_times.append(pr.exchange)
            res.probe_waits.append(pr.wait)
            res.probe_exch_cpu.append(pr.exchange_cpu)
    if late_compute:                  # a slower compute delays this rank's exchange as much
        time.sleep(late_compute)
    return x, y, t_in, probe_s


def _start_timing(rep: Replica, res: LoopResult, probes: bool):
    """At the first timed step: the probe's functions traced (where it probes), the node's
    interface counters (where :func:`hpcdl.machine.node` gave its facts, else None) and the CPU
    quota's first reading."""
    if probes:
        # traced here, outside the timed steps: a first probe that traced counted its tracing as
        # compute (one of five probes above the step)
        rep.probe(*rep.sample_batch())
    res.cgroup = cluster.cgroup_cpu_usage()
    node = rep.rt.node
    return machine.Counters(node["iface"]) if node else None


def _start_timeline(rep: Replica, res: LoopResult, timed_so_far: int) -> None:
    """Horovod's timeline from here on (rank 0 writes it)."""
    if rep.rt.root:
        Path(res.timeline).parent.mkdir(parents=True, exist_ok=True)
    rep.rt.hvd.start_timeline(str(res.timeline))
    res.timeline_from = timed_so_far


def _finish(rep: Replica, res: LoopResult, evals: "Evaluations", counters, t_run: float,
            timeline: bool) -> None:
    res.wall = time.perf_counter() - t_run
    if timeline:
        rep.rt.hvd.stop_timeline()
    if evals.target and res.target is None and not res.stopped:
        res.target = target_missed(evals.target, rep.plan.steps)
    if counters is not None:
        # every timed step exchanges once, and so does every probe that timed the exchange alone
        res.net = {"host": rep.rt.layout.host, "hostname": socket.gethostname(),
                   **counters.moved(),
                   "exchanges": len(res.step_times) + len(res.probe_exch_times)}
    res.cgroup = _quota_held_back(res.cgroup, cluster.cgroup_cpu_usage())


def _quota_held_back(start: Optional[dict], end: Optional[dict]) -> Optional[dict]:
    """Between two readings of a CPU quota's cgroup: its cores and period, the share of its
    periods in which the quota ran out (its processes then wait for the next period), the
    seconds it was held back and the CPU it used (None where the cgroup does not say)."""
    if not start or not end:
        return None
    periods = end["periods"] - start["periods"]
    return {"cores": end["cores"], "period_us": end.get("period_us"), "periods": periods,
            "throttled_share": (end["throttled_periods"] - start["throttled_periods"]) / periods
            if periods > 0 else None,
            "throttled_s": end["throttled_s"] - start["throttled_s"],
            "usage_s": None if end["usage_s"] is None or start["usage_s"] is None
            else end["usage_s"] - start["usage_s"]}


def probe_steps(plan: Plan, first: int, count: int) -> set:
    """``count`` steps spread over the timed ones, each preceded by a probe (compute alone,
    then the exchange alone)."""
    timed = plan.steps - first
    if not count or timed <= 0:
        return set()
    k = min(count, timed)
    return {first + (i * timed) // k for i in range(k)}


def run_loop(rep: Replica, opts, start_step: int, resumed: bool, watch: StopWatch,
             ckpt_dir: Optional[Path]) -> LoopResult:
    """Train from ``start_step``. After warm-up, time each step call, and each iteration of
    ``per_iter`` steps whole: input, steps and their bookkeeping (the loss curve, the ranks' stop
    agreement), without the measurement probes and checkpoints."""
    rt, plan, coll = rep.rt, rep.plan, rep.rt.coll
    first_timed = max(plan.warmup, start_step + (1 if resumed else 0))
    # Horovod's timeline records the second half of the timed steps: the first half, timed
    # without it, says what it costs
    timeline_at = first_timed + (plan.steps - first_timed) // 2 if opts.timeline else None
    probes = probe_steps(plan, first_timed, opts.probes if rep.in_graph else 0)
    fault = fault_from_env(rt.rank)
    slow = straggler(rep, opts.slow_rank)
    late = slow[1] if slow and slow[0] == "compute" else 0.0      # counts in this rank's step
    every = opts.stop_check_every
    next_check, last_check = start_step + every, (start_step, time.perf_counter())
    res = LoopResult(step=start_step, timeline=opts.timeline)
    t_run = time.perf_counter()
    t_iter, in_iter = 0.0, 0
    counters = None
    evals = Evaluations(opts, plan.global_batch, plan.steps)
    while res.step < plan.steps and res.target is None:
        step = res.step
        if step == first_timed:
            counters = _start_timing(rep, res, bool(probes))
        if step == timeline_at:
            _start_timeline(rep, res, len(res.step_times))
        if fault is not None and step == fault[0]:
            inject_fault(fault[1], step, rt.layout)
        t0 = time.perf_counter()
        x, y, t_in, probe_s = _input_and_probe(rep, res, step, step in probes, slow)
        t0 += probe_s
        ts = time.perf_counter()
        loss, c, e = rep.step(x, y)
        t1 = time.perf_counter()
        t_eval = 0.0
        if step == start_step and not resumed:
            rep.broadcast_state()         # every replica starts from rank 0's weights
        if res.first_loss is None:
            res.first_loss = float(loss)
        res.step = step = step + 1
        res.last_loss, watch.step_time = loss, t1 - ts
        timed = step > first_timed
        if timed:
            res.step_times.append(t1 - ts + late)
            res.input_times.append(t_in)
            if c is not None:
                res.comp_times.append(c)
                res.exch_times.append(e)
        if step % opts.log_every == 0 or step == plan.steps:
            avg = float(coll.allreduce([float(loss)], "mean", "hpcdl.loss")[0])
            res.curve.append([step, avg])
            rt.say(f"Step {step}/{plan.steps}: loss {avg:.6g} ({time.perf_counter() - t_run:.1f} s)")
        if evals.due(step):
            t_eval = evals.run(rep, res, step, t_run)    # not part of the timed iteration
            t0 += t_eval
        if step == next_check and step < plan.steps:
            now = time.perf_counter()
            mine = next_interval(every, step - last_check[0], now - last_check[1],
                                 opts.stop_check_every) if rt.root else 0
            stop, every = coll.allreduce([float(watch.code()), float(mine)], "max", "hpcdl.stop")
            if stop > 0:
                res.stopped = watch.agreed(stop)
                break
            every = int(every)           # rank 0's proposal: every rank agrees at the same steps
            next_check, last_check = step + every, (step, now)
        if timed:
            now = time.perf_counter()
            res.book_times.append(now - t1 - t_eval)
            t_iter, in_iter = t_iter + now - t0, in_iter + 1
            if in_iter == plan.per_iter:
                res.iter_times.append(t_iter)
                t_iter, in_iter = 0.0, 0
        if opts.checkpoint_every and step % opts.checkpoint_every == 0 and step < plan.steps:
            tc = time.perf_counter()
            save_checkpoint(rep, ckpt_dir, step, opts)
            res.ckpt_time += time.perf_counter() - tc
    _finish(rep, res, evals, counters, t_run, res.timeline_from is not None)
    return res


# --- the figures --------------------------------------------------------------------------------------

def summarize(rep: Replica, loop: LoopResult) -> dict:
    """The run's figures from every rank's measurements (a collective: every rank calls it).

    Throughput comes from the iterations of the slowest rank (the largest total time), as that
    rank timed them; step-time figures are the largest over ranks of each rank's own summary.
    Never a maximum taken per step or per iteration: the ranks wait for each other at different
    moments, and such a maximum adds every rank's jitter together.
    """
    rt, plan, coll = rep.rt, rep.plan, rep.rt.coll

    def slowest(values, op="max", name="hpcdl.max"):
        return coll.allreduce(values, op, name)

    iters, per_iter = loop.iter_times, plan.per_iter
    if not iters and loop.step_times:          # fewer timed steps than one iteration
        iters, per_iter = [float(sum(loop.step_times))], len(loop.step_times)
    times = slowest_rank_iterations(coll, iters)
    rate = iteration_rates(plan.batch * per_iter, times)
    total = {k: (v * rt.size if k != "n" else v) for k, v in rate.items()}
    own = summarize_values(loop.step_times)
    keys = ("mean", "std", "ci95", "min", "median", "p99", "max")
    step = dict(zip(keys, slowest([own.get(k, 0.0) for k in keys], name="hpcdl.steps").tolist()))
    step["n"] = int(slowest([own["n"]], "min", "hpcdl.nsteps")[0])
    out = {"throughput": total, "throughput_per_rank": rate, "step_time": step,
           "split": _split(rep, loop, step.get("median"), slowest),
           "final_loss": float(coll.allreduce([float(loop.last_loss)], "mean", "hpcdl.final")[0]),
           "first_loss": loop.first_loss, "loss_curve": loop.curve, "wall_time_s": loop.wall}
    if loop.evals and loop.evals[-1]["step"] == loop.step:
        out.update({k: v for k, v in loop.evals[-1].items() if k.startswith("test_")})
    else:
        out.update(rep.evaluate())
    if loop.evals:
        out["evals"] = loop.evals
    if loop.target:
        out["target"] = loop.target
    out["ranks"] = coll.allgather_object(rank_phases(rt.rank, rt.layout.host, loop), "hpcdl.ranks")
    if loop.timeline and rt.root:
        time.sleep(0.5)                  # Horovod's writer thread flushes the stopped timeline
        tl = timeline.summarize(loop.timeline, len(loop.step_times) - (loop.timeline_from or 0))
        out["timeline"] = tl or {"file": str(loop.timeline), "why": "no readable timeline"}
    if loop.timeline:
        out["timeline_cost"] = _timeline_cost(loop, slowest)
    out["digests"] = coll.allgather_object(rep.digest(), "hpcdl.digests")
    out["hosts"] = coll.allgather_object(rt.layout.host, "hpcdl.hosts")
    out["net"] = coll.allgather_object(loop.net, "hpcdl.net")
    return out


def _timeline_cost(loop: LoopResult, slowest) -> dict:
    """What Horovod's timeline cost a step: the median of the timed steps it recorded against
    the median of those before it, each the slowest rank's (as the step time is). One run's
    estimate, as noisy as two medians of its steps."""
    k = loop.timeline_from
    if not int(slowest([k is not None], "min", "hpcdl.tl.on")[0]):
        return {"why": "the run ended before the timeline started"}
    halves = (loop.step_times[:k], loop.step_times[k:])
    n = [int(x) for x in slowest([len(h) for h in halves], "min", "hpcdl.tl.n")]
    if min(n) < 2:
        return {"why": f"{len(loop.step_times)} timed step(s): give 4 or more"}
    without, with_ = (float(x) for x in slowest([statistics.median(h) for h in halves],
                                                 name="hpcdl.tl.median"))
    return {"with_s": with_, "without_s": without, "steps": n[1], "without_steps": n[0],
            "cost": with_ / without - 1.0}


def _split(rep, loop, step_median, slowest) -> dict:
    if loop.probe_times:
        ex = loop.probe_exch_times
        c, e = slowest([statistics.median(loop.probe_times),
                        statistics.median(ex) if ex else 0.0], name="hpcdl.probes")
        split = step_split(rep.rt.size, step_median, "probe", float(c))
        split["probes"] = len(loop.probe_times)
        if ex:
            split["exchange_alone_s"] = float(e)
        return split
    if loop.comp_times:
        c, e = slowest([statistics.median(loop.comp_times), statistics.median(loop.exch_times)],
                       name="hpcdl.split")
        return step_split(rep.rt.size, step_median, "timed", float(c), float(e))
    return {"method": "none"}


# --- checkpoints and resume -------------------------------------------------------------------------

def save_checkpoint(rep: Replica, ckpt_dir: Optional[Path], step: int, opts) -> Optional[Path]:
    """Rank 0 writes an atomic, verified checkpoint of ``step``; other ranks return None."""
    if not rep.rt.root or ckpt_dir is None:
        return None
    p = rep.plan
    meta = {"mode": "sync", "workload": opts.workload, "seed": opts.seed, "size": rep.rt.size,
            "batch_size": p.batch, "global_batch": p.global_batch,
            "lr": p.lr, "lr_warmup_steps": opts.lr_warmup_steps,
            "samples_seen": step * p.global_batch,
            "data_position": {"step": step, "epoch": (step // rep.sharder.steps_per_epoch)
                              if rep.sharder else None},
            "rng": {"tf_global": rep.rt.tf.random.get_global_generator().state.numpy().tolist()}}
    return checkpoint.save(ckpt_dir, step, rep.arrays(), meta, keep=opts.keep_checkpoints)


def restore(rep: Replica, found) -> int:
    """Every rank continues from ``found`` (rank 0 holds its arrays); the first step."""
    rt = rep.rt
    if rt.root:
        rep.restore(found.arrays, found.header)
    rng = rt.coll.broadcast_object(found.meta.get("rng") if rt.root else None, 0,
                                   "hpcdl.sync.rng")
    if (rng or {}).get("tf_global") is not None:
        # Every rank continues the random stream where the checkpointed run left it.
        rt.tf.random.get_global_generator().reset(rep.np.asarray(rng["tf_global"],
                                                                 dtype=rep.np.int64))
    rep.broadcast_state()
    return found.step


def stop(rep: Replica, loop: LoopResult, ckpt_dir, opts) -> Optional[str]:
    """Checkpoint at the step where the ranks agreed to stop; the path on every rank (or None)."""
    path = save_checkpoint(rep, ckpt_dir, loop.step, opts) if ckpt_dir else None
    if path is not None:
        # The launcher's exit status may not be ours: when the first rank exits 75,
        # srun --kill-on-bad-exit terminates the others, and srun reports 143. The job script
        # reads this marker, written once the checkpoint is durable, to know the stop was clean.
        checkpoint.mark_interrupted(ckpt_dir, loop.step, loop.stopped)
    # Every rank waits for rank 0's checkpoint: a launcher that ends the job when the first
    # rank exits (mpirun, srun --kill-on-bad-exit) must not kill rank 0 in mid-write.
    return rep.rt.coll.broadcast_object(None if path is None else str(path), 0, "hpcdl.ckpt")


# --- the mode -----------------------------------------------------------------------------------------

class Sync(Mode):
    """Every rank a replica; gradients averaged by ``--backend`` every step."""

    name = "sync"
    help = "synchronous data parallelism: the gradients averaged every step (the default)"

    def chosen(self, opts) -> bool:
        return opts.parallel == "data" and opts.backend in comm.BACKENDS

    def needs_horovod(self, opts) -> bool:
        """Only Horovod's exchange and its timeline: hpcdl's own exchanges run over mpi4py, and
        an idle Horovod beside them would only take CPU from the step (:mod:`.collectives`)."""
        return opts.backend == "horovod" or bool(opts.timeline)

    def validate(self, opts) -> None:
        if opts.compression not in comm.COMPRESSIONS:
            raise UserError(f"unknown --compression '{opts.compression}': choose one of "
                            f"{', '.join(comm.COMPRESSIONS)}")

    def replica(self, rt, wl, opts):
        plan = make_plan(opts, wl, rt.size)
        rep = Replica(rt, wl, plan, opts, exchange=comm.get_backend(opts.backend,
                                                                    opts.compression))
        rep.seek(0)
        return rep

    def refuse(self, found, opts, size):
        other = written_by(found.meta)
        if other != self.name:
            return (f"checkpoint {found.path} was written by a {other} run: resume it as it "
                    "was written")
        return None

    def train(self, rep, opts, watch, ckpt_dir, found):
        start = restore(rep, found) if found else 0
        rep.seek(start)
        loop = run_loop(rep, opts, start, found is not None, watch, ckpt_dir)
        if loop.stopped:
            loop.checkpoint = stop(rep, loop, ckpt_dir, opts)
        return loop

    def summarize(self, rep, loop, opts) -> dict:
        return summarize(rep, loop)
