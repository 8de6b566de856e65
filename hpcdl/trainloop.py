"""Train one rank: the loop with probes, progress, checkpoints and the ranks' agreement on
stopping (:func:`run_loop`), and the run's figures from every rank's measurements
(:func:`summarize`, :func:`step_split`, each rank's phases :func:`rank_phases`). It runs past 400
lines on purpose: the loop, what it injects on purpose (faults, stragglers) and the figures made
of what it timed share one LoopResult, and read best together."""
from __future__ import annotations

import math
import os
import signal
import socket
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from . import box, cluster
from .errors import UserError
from .trainer import Plan, Replica, save_checkpoint

STOP_CHECK_SECONDS = 1.0      # the ranks agree on stopping about this often (at least every 10 steps)


# --- stopping ---------------------------------------------------------------------------------------

class StopWatch:
    """Local reasons to stop early; the ranks agree on them every few steps."""

    def __init__(self, max_time: Optional[float], stop_file: Optional[Path], margin: float = 30.0):
        self.start = time.monotonic()
        self.max_time = max_time
        self.stop_file = stop_file
        self.signalled: Optional[str] = None
        self.deadline = cluster.job_deadline()   # stop a margin (growing with the step) before it
        self.margin = margin
        self.step_time = 0.0

    def install(self):
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            try:
                signal.signal(sig, self._on_signal)
            except (ValueError, OSError):  # not the main thread
                pass

    def _on_signal(self, signum, frame):
        if self.signalled and signum == signal.SIGTERM:
            raise SystemExit(128 + signum)    # a second TERM: go now
        self.signalled = signal.Signals(signum).name

    def reason(self) -> Optional[str]:
        if self.signalled:
            return f"signal {self.signalled}"
        if self.stop_file is not None and self.stop_file.exists():
            return f"stop file {self.stop_file}"
        if self.max_time is not None and time.monotonic() - self.start >= self.max_time:
            return f"--max-time {self.max_time:g} s reached"
        if self.deadline is not None and time.time() + self.margin + 3 * self.step_time >= self.deadline:
            return "Slurm time limit (SLURM_JOB_END_TIME) near"
        return None


def fault_from_env(rank: int):
    """The step at which this rank fails, and how, from ``HPCDL_FAULT`` (tests only).

    ``HPCDL_FAULT="rank=1,step=37,kind=raise"``: rank 1 fails at step 37 by raising an exception
    (``raise``), killing itself with SIGKILL (``kill``), leaving with ``os._exit(3)`` (``exit``)
    or stopping in a sleep without exiting (``hang``). Unset, it is None.
    """
    text = cluster.setting("HPCDL_FAULT")
    if not text:
        return None
    try:
        spec = dict(part.split("=", 1) for part in text.split(",") if part.strip())
        target, step, kind = int(spec.get("rank", 0)), int(spec["step"]), spec.get("kind", "raise")
    except (KeyError, ValueError):
        raise UserError(f"HPCDL_FAULT='{text}': expected rank=R,step=S,kind=raise|kill|exit|hang")
    if kind not in ("raise", "kill", "exit", "hang"):
        raise UserError(f"HPCDL_FAULT kind '{kind}': choose raise, kill, exit or hang")
    return (step, kind) if target == rank else None


def inject_fault(kind: str, step: int, layout) -> None:
    # The wall-clock time lets a harness measure how long the job takes to end after the fault.
    cluster.log(f"HPCDL_FAULT: injecting '{kind}' at step {step} (t={time.time():.3f})", layout)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "exit":
        os._exit(3)
    if kind == "hang":
        while True:
            time.sleep(1)
    raise RuntimeError(f"HPCDL_FAULT: injected failure at step {step}")


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
    input_times: List[float] = field(default_factory=list)       # each timed step's input
    book_times: List[float] = field(default_factory=list)        # each timed step's bookkeeping
    ckpt_time: float = 0.0                                        # s writing checkpoints
    timeline: Optional[str] = None     # Horovod's timeline of the timed steps (--timeline)
    curve: List[list] = field(default_factory=list)
    first_loss: Optional[float] = None
    last_loss: object = None
    wall: float = 0.0
    stopped: Optional[str] = None
    net: Optional[dict] = None        # on the cluster box: the node's interface bytes while timed
    evals: List[dict] = field(default_factory=list)   # held-out metric during training
    eval_time: float = 0.0            # s spent evaluating (not training)
    target: Optional[dict] = None     # the --target and whether and when it was reached


class Evaluations:
    """When to evaluate during training, and whether the target is reached.

    Every ``every`` samples seen (a step's global batch at a time), and at the last step, every
    rank evaluates the held-out set together (:meth:`Replica.evaluate`, a collective at the same
    step on every rank, as the schedule depends on the step only). With a target (metric,
    value) and no interval, every ``log_every`` steps. ``wall_s`` is the wall-clock time since
    the first step; ``time_s`` is of training alone, the time spent evaluating left out, so that
    time to target compares rank counts, whose evaluations take different times, on their
    training.
    """

    def __init__(self, opts, global_batch: int, steps: int):
        self.target = getattr(opts, "target", None)
        every = getattr(opts, "eval_every", 0) or 0
        if not every and self.target:
            every = opts.log_every * global_batch
        self.every, self.batch, self.steps = every, global_batch, steps

    def due(self, step: int) -> bool:
        if not self.every:
            return False
        return step == self.steps or step * self.batch // self.every > (step - 1) * self.batch // self.every

    def run(self, rep, res: "LoopResult", step: int, t_run: float) -> float:
        """Evaluate at ``step``; return the seconds it took. Sets ``res.target`` once reached."""
        t0 = time.perf_counter()
        ev = {"step": step, "samples": step * self.batch, "wall_s": t0 - t_run,
              "time_s": t0 - t_run - res.eval_time, **rep.evaluate()}
        res.evals.append(ev)
        dt = time.perf_counter() - t0
        res.eval_time += dt
        if self.target and res.target is None and reached(self.target, ev):
            metric, value = self.target
            res.target = {"metric": metric, "value": value, "reached": True, "steps": step,
                          "samples": ev["samples"], "time_s": ev["time_s"]}
        return dt


def reached(target, ev: dict) -> bool:
    metric, value = target
    if metric == "accuracy":
        return ev.get("test_accuracy", -1.0) >= value
    return ev.get("test_loss", math.inf) <= value


def slow_from_env(rank: int):
    """``HPCDL_SLOW=rank=R,phase=compute|input,delay_ms=D``: rank R (every rank: ``rank=*``)
    spends D ms more per step in that phase (tests and studies of a straggler, or of a slow
    input pipeline, on purpose); None for other ranks or unset."""
    spec = cluster.setting("HPCDL_SLOW")
    if not spec:
        return None
    try:
        kv = dict(part.split("=", 1) for part in spec.split(","))
        which = None if kv["rank"] == "*" else int(kv["rank"])
        phase, delay = kv.get("phase", "compute"), float(kv["delay_ms"])
    except (KeyError, ValueError) as exc:
        raise UserError(f"HPCDL_SLOW={spec!r}: want rank=R,phase=compute|input,delay_ms=D "
                        f"({exc})") from None
    if phase not in ("compute", "input") or delay < 0:
        raise UserError(f"HPCDL_SLOW={spec!r}: phase must be compute or input, delay_ms >= 0")
    return (phase, delay / 1e3) if which in (None, rank) else None


def straggler(rep: Replica, slow_rank):
    """The delay this rank adds on purpose: ``--slow-rank R:Dms`` D ms per step; ``R:FACTOR``
    makes rank R's compute FACTOR times as long (it sleeps FACTOR - 1 times its own compute
    time of a step, timed here on its first batch, the median of ten after one untimed); else
    ``HPCDL_SLOW``. As :func:`slow_from_env` gives it."""
    rt = rep.rt
    if slow_rank is None:
        return slow_from_env(rt.rank)
    which, factor, delay = slow_rank
    if which >= rt.size:
        raise UserError(f"--slow-rank {which}:…: there are only {rt.size} ranks")
    if which != rt.rank or factor == 1 or delay == 0:
        return None
    if delay is not None:
        return "compute", delay
    x, y = rep.sample_batch()
    times = []
    for i in range(11):
        t0 = time.perf_counter()
        _, grads = rep.compute_grads(x, y)
        _ = grads[-1].numpy()
        times.append(time.perf_counter() - t0)
    delay = (factor - 1) * statistics.median(times[1:])
    cluster.log(f"--slow-rank: compute {statistics.median(times[1:]) * 1e3:.3f} ms per step, "
                f"{delay * 1e3:.3f} ms added ({factor:g}x)", rt.layout)
    return "compute", delay


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
        compute, exchange, wait, probe_s = rep.probe(x, y, late_compute)
        res.probe_times.append(compute)
        if exchange is not None:
            res.probe_exch_times.append(exchange)
            res.probe_waits.append(wait)
    if late_compute:                  # a slower compute delays this rank's exchange as much
        time.sleep(late_compute)
    return x, y, t_in, probe_s


def _start_timing(rep: Replica, node: Optional[dict], timeline: Optional[str]):
    """At the first timed step: the box node's interface counters (None off the box), and
    Horovod's timeline when asked for (rank 0 writes it)."""
    if timeline:
        if rep.rt.root:
            Path(timeline).parent.mkdir(parents=True, exist_ok=True)
        rep.rt.hvd.start_timeline(str(timeline))
    return box.Counters(node["iface"]) if node else None


def _finish(rep: Replica, res: LoopResult, evals: "Evaluations", counters, t_run: float,
            timeline: Optional[str]) -> None:
    res.wall = time.perf_counter() - t_run
    if timeline:
        rep.rt.hvd.stop_timeline()
    if evals.target and res.target is None and not res.stopped:
        metric, value = evals.target
        res.target = {"metric": metric, "value": value, "reached": False,
                      "steps": rep.plan.steps}
    if counters is not None:
        # every timed step exchanges once, and so does every probe that timed the exchange alone
        res.net = {"host": rep.rt.layout.host, "hostname": socket.gethostname(),
                   **counters.moved(),
                   "exchanges": len(res.step_times) + len(res.probe_exch_times)}


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
    rt, plan, hvd, tf = rep.rt, rep.plan, rep.rt.hvd, rep.rt.tf
    first_timed = max(plan.warmup, start_step + (1 if resumed else 0))
    probes = probe_steps(plan, first_timed, opts.probes if rep.in_graph else 0)
    fault = fault_from_env(rt.rank)
    slow = straggler(rep, opts.slow_rank)
    late = slow[1] if slow and slow[0] == "compute" else 0.0      # counts in this rank's step
    every = opts.stop_check_every
    next_check, last_check = start_step + every, (start_step, time.perf_counter())
    res = LoopResult(step=start_step, timeline=opts.timeline)
    t_run = time.perf_counter()
    t_iter, in_iter = 0.0, 0
    node = box.node_facts(rt.layout.host)
    counters = None
    evals = Evaluations(opts, plan.global_batch, plan.steps)
    while res.step < plan.steps and res.target is None:
        step = res.step
        if step == first_timed:
            counters = _start_timing(rep, node, opts.timeline)
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
            avg = float(hvd.allreduce(tf.constant(float(loss)), op=hvd.Average, name="hpcdl.loss"))
            res.curve.append([step, avg])
            rt.say(f"Step {step}/{plan.steps}: loss {avg:.6g} ({time.perf_counter() - t_run:.1f} s)")
        if evals.due(step):
            t_eval = evals.run(rep, res, step, t_run)    # not part of the timed iteration
            t0 += t_eval
        if step == next_check and step < plan.steps:
            now = time.perf_counter()
            mine = next_interval(every, step - last_check[0], now - last_check[1],
                                 opts.stop_check_every) if rt.root else 0
            stop, every = hvd.allreduce(tf.constant([1.0 if watch.reason() else 0.0, float(mine)],
                                                    tf.float64), op=hvd.Max,
                                        name="hpcdl.stop").numpy()
            if stop > 0:
                res.stopped = watch.reason() or "another rank asked to stop"
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
    _finish(rep, res, evals, counters, t_run, res.timeline)
    return res


def next_interval(every: int, steps: int, seconds: float, at_least: int) -> int:
    """Steps until the next stop agreement: about STOP_CHECK_SECONDS of the steps just seen, at
    least ``at_least``, and at most twice the last interval (steps that speed up are trusted
    slowly, so that a signal is still acted on within seconds)."""
    if steps <= 0 or seconds <= 0:
        return max(at_least, every)
    return max(at_least, min(2 * every, math.ceil(STOP_CHECK_SECONDS * steps / seconds)))


# --- the summary ------------------------------------------------------------------------------------

def summarize_values(values) -> dict:
    """mean, spread and order statistics of a list of numbers."""
    vals = sorted(float(v) for v in values)
    n = len(vals)
    if not n:
        return {"n": 0}
    mean = sum(vals) / n
    std = statistics.stdev(vals) if n > 1 else 0.0
    p99 = vals[min(n - 1, max(0, math.ceil(0.99 * n) - 1))]
    return {"n": n, "mean": mean, "std": std, "ci95": 1.96 * std, "min": vals[0],
            "median": statistics.median(vals), "p99": p99, "max": vals[-1]}


def iteration_rates(samples: int, times) -> dict:
    """Per-rank throughput of timed iterations of ``samples`` samples each: the summary of each
    iteration's rate (its mean ± 1.96σ is the headline, as tf_cnn_benchmarks gives it), and
    ``overall``, all the samples over all the time, as a script that times itself reports it
    (the mean of rates lies above it by about the rates' relative variance)."""
    times = [t for t in times if t > 0]
    out = summarize_values(samples / t for t in times)
    if times:
        out["overall"] = samples * len(times) / sum(times)
    return out


def summarize(rep: Replica, loop: LoopResult) -> dict:
    """The run's figures from every rank's measurements (a collective: every rank calls it).

    Throughput comes from the iterations of the slowest rank (the largest total time), as that
    rank timed them; step-time figures are the largest over ranks of each rank's own summary.
    Never a maximum taken per step or per iteration: the ranks wait for each other at different
    moments, and such a maximum adds every rank's jitter together.
    """
    rt, plan, np, tf, hvd = rep.rt, rep.plan, rep.np, rep.rt.tf, rep.rt.hvd

    def slowest(values, op=hvd.Max, name="hpcdl.max"):
        return hvd.allreduce(tf.constant(np.asarray(values, dtype=np.float64)), op=op,
                             name=name).numpy()

    iters, per_iter = loop.iter_times, plan.per_iter
    if not iters and loop.step_times:          # fewer timed steps than one iteration
        iters, per_iter = [float(sum(loop.step_times))], len(loop.step_times)
    times = slowest_rank_iterations(hvd, tf, iters)
    rate = iteration_rates(plan.batch * per_iter, times)
    total = {k: (v * rt.size if k != "n" else v) for k, v in rate.items()}
    own = summarize_values(loop.step_times)
    keys = ("mean", "std", "ci95", "min", "median", "p99", "max")
    step = dict(zip(keys, slowest([own.get(k, 0.0) for k in keys], name="hpcdl.steps").tolist()))
    step["n"] = int(slowest([own["n"]], hvd.Min, "hpcdl.nsteps")[0])
    out = {"throughput": total, "throughput_per_rank": rate, "step_time": step,
           "split": _split(rep, loop, step.get("median"), slowest),
           "final_loss": float(hvd.allreduce(tf.constant(float(loop.last_loss)), op=hvd.Average,
                                             name="hpcdl.final")),
           "first_loss": loop.first_loss, "loss_curve": loop.curve, "wall_time_s": loop.wall}
    if loop.evals and loop.evals[-1]["step"] == loop.step:
        out.update({k: v for k, v in loop.evals[-1].items() if k.startswith("test_")})
    else:
        out.update(rep.evaluate())
    if loop.evals:
        out["evals"] = loop.evals
    if loop.target:
        out["target"] = loop.target
    out["ranks"] = hvd.allgather_object(rank_phases(rt.rank, rt.layout.host, loop))
    if loop.timeline and rt.root:
        from . import timeline
        time.sleep(0.5)                  # Horovod's writer thread flushes the stopped timeline
        tl = timeline.summarize(loop.timeline, len(loop.step_times))
        out["timeline"] = tl or {"file": str(loop.timeline), "why": "no readable timeline"}
    out["digests"] = hvd.allgather_object(rep.digest())
    out["hosts"] = hvd.allgather_object(rt.layout.host)
    out["net"] = hvd.allgather_object(loop.net)
    return out


def spread(values) -> dict:
    """min, median, p95 and max of a phase's per-step times (n: how many)."""
    vals = sorted(float(v) for v in values)
    if not vals:
        return {"n": 0}
    return {"n": len(vals), "min": vals[0], "median": statistics.median(vals),
            "p95": vals[min(len(vals) - 1, max(0, math.ceil(0.95 * len(vals)) - 1))],
            "max": vals[-1]}


def rank_phases(rank: int, host: str, loop: LoopResult) -> dict:
    """This rank's phases per timed step, summarised (records stay small): input, the step call,
    the bookkeeping after it; from the probes, compute alone, the exchange alone and the wait for
    the slowest rank before it; and the time spent writing checkpoints."""
    def med(values):
        return statistics.median(values) if values else None
    return {"rank": rank, "host": host, "input": spread(loop.input_times),
            "step": spread(loop.step_times), "book": spread(loop.book_times),
            "compute_s": med(loop.probe_times),
            "compute_min_s": min(loop.probe_times) if loop.probe_times else None,
            "exchange_s": med(loop.probe_exch_times),
            "wait_s": med(loop.probe_waits), "ckpt_s": loop.ckpt_time}


def slowest_rank_iterations(hvd, tf, iters) -> list:
    """The iteration times of the rank whose timed iterations took longest in all, the first n
    of each rank's (n: the fewest any rank timed). A collective: every rank calls it, with
    Horovod's TensorFlow module; hpcdl's loop and the Keras ScalingRecorder both do."""
    n = int(hvd.allreduce(tf.constant([float(len(iters))], tf.float64), op=hvd.Min,
                          name="hpcdl.nit").numpy()[0])
    if not n:
        return []
    totals = [0.0] * hvd.size()
    totals[hvd.rank()] = float(sum(iters[:n]))
    totals = hvd.allreduce(tf.constant(totals, tf.float64), op=hvd.Sum,
                           name="hpcdl.iter_totals").numpy().tolist()
    slow = max(range(len(totals)), key=totals.__getitem__)
    return hvd.broadcast(tf.constant([float(t) for t in iters[:n]], tf.float64), root_rank=slow,
                         name="hpcdl.iters").numpy().tolist()


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


def step_split(size: int, step: Optional[float], method: str, compute: float,
               exchange: Optional[float] = None) -> dict:
    """How a step divides into compute and the rest, in words that claim no more than was measured.

    ``probe``: ``compute`` is a compute-only step; the rest of the step is the exchange not hidden
    behind it, the update and overhead, and at one rank only the latter (nothing is exchanged).
    ``timed``: compute and ``exchange`` were timed around the backend call itself. A probe that
    is not shorter than the step leaves the split undetermined.
    """
    out = {"method": method, "compute_s": compute}
    if not step:
        return out
    if method == "timed" and size > 1:
        out.update(exchange_s=exchange, compute_share=compute / step, exchange_share=exchange / step,
                   text=f"compute {compute / step * 100:.0f}% / exchange {exchange / step * 100:.0f}%")
        return out
    if compute >= step:
        out.update(determined=False, text=f"probed compute {compute * 1e3:.3f} ms is not shorter "
                                          "than the step: split not determined")
        return out
    rest = "update and overhead; nothing exchanged at 1 rank" if size == 1 else \
        "exchange not hidden, update, overhead"
    out.update(rest_s=step - compute, compute_share=compute / step,
               text=f"compute {compute / step * 100:.0f}% / rest {(1 - compute / step) * 100:.0f}% "
                    f"({rest})")
    return out
