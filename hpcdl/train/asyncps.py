"""Asynchronous data parallelism through a parameter server: Downpour SGD and bounded staleness.

``hpcdl train --backend ps-async --staleness S``. Rank 0 holds the parameters in a server thread
(or, with ``--ps-dedicated``, as its only work); the workers (every rank, or every rank but 0)
compute gradients on their shard against the parameters they last pulled, push them, and pull
the parameters the server then holds. A push is applied as it arrives, on its own, with the
learning rate of one worker's batch (the linear rule of the sync run's global batch, divided
by the workers): DistBelief's Downpour SGD when nothing bounds the staleness. With S a worker
that has pushed more than S updates beyond the slowest worker still running waits for its
parameters until that one catches up (stale-synchronous parallel, Ho et al. 2013). With S = 0
the server waits for one push of every worker, adds them in rank order, divides by their
number and applies that as one update with the sync run's learning rate: the synchronous
parameter server, giving the weights ``--backend ps`` gives.

The staleness of an update is the number of updates the server applied between the worker's
pull and the arrival of its push. Nothing here busy-waits: the server polls for pushes with
``Iprobe`` and a sleep that grows to a millisecond while idle, and a worker waiting for its
parameters polls its receive the same way, so that on a node with few cores the server thread,
the workers and TensorFlow's threads are not starved by a spinning MPI call. The server thread
needs MPI_THREAD_MULTIPLE (Horovod asks for it at ``hvd.init()``); a dedicated server does not.

Training ends when every worker has made its steps, or when the server stops it: a target
reached in an evaluation of the server's parameters, or a worker asking to stop (a signal, a
stop file, the time limit), after which each worker gets "stop" in place of its parameters.
A dead worker or server ends the job through the launcher, as for the other backends.
"""
from __future__ import annotations

import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import checkpoint
from .control import (Evaluations, fault_from_env, IDLE_MAX, inject_fault, poll, straggler,
                      target_missed)
from .figures import iteration_rates, summarize_values
from .interface import Mode, written_by
from .ps_server import _TAG_HDR, _TAG_PARAMS, _TAG_PUSH, Server, ServerLog, _mpi
from .replica import Replica
from .runtime import make_plan
from .. import cluster
from ..errors import UserError

NAME = "ps-async"
SERVER = 0


def staleness_arg(text: str) -> Optional[int]:
    """``--staleness``: an integer >= 0, or ``inf``/``none`` for no bound (Downpour)."""
    if text.lower() in ("inf", "none", "downpour"):
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        import argparse
        raise argparse.ArgumentTypeError(f"expected an integer >= 0 or inf, got '{text}'")
    return value


def staleness_label(bound: Optional[int]) -> str:
    return "inf" if bound is None else str(bound)


def workers_of(size: int, dedicated: bool) -> List[int]:
    """The ranks that train: all of them, or all but the server."""
    if dedicated and size < 2:
        raise UserError("--ps-dedicated needs at least 2 ranks: one server and one worker")
    return list(range(1 if dedicated else 0, size))


# --- the workers and the run ------------------------------------------------------------------------

@dataclass
class WorkerLog:
    """What one worker measured per step after warm-up: input, compute, waiting for parameters."""

    steps: int = 0
    input_times: List[float] = field(default_factory=list)
    comp_times: List[float] = field(default_factory=list)
    wait_times: List[float] = field(default_factory=list)
    step_times: List[float] = field(default_factory=list)
    iter_times: List[float] = field(default_factory=list)
    first_loss: Optional[float] = None
    stopped: bool = False


def check_threads(comm) -> None:
    MPI = _mpi()
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise UserError("--backend ps-async runs its server in a thread beside rank 0's worker, "
                        "which needs MPI_THREAD_MULTIPLE, and this MPI gives "
                        f"level {MPI.Query_thread()}: use --ps-dedicated (rank 0 serves only), "
                        "or an MPI built with thread support")


def work(rep, comm, n: int, watch, slow_s: float, fault, warmup: int, per_iter: int,
         server_alive=lambda: None, start: int = 0) -> WorkerLog:
    """This worker's steps: batch, gradients, push, pull; ends early when told to stop.
    ``server_alive()`` raises when rank 0's server thread has failed (else its reply never
    comes)."""
    np, plan = rep.np, rep.plan
    MPI = _mpi()
    push = np.empty(n + 2, dtype=np.float32)
    hdr = np.empty(2, dtype=np.int64)
    params = np.empty(n, dtype=np.float32)
    log, t_iter, in_iter = WorkerLog(steps=start), 0.0, 0
    warmup = max(warmup, start + 1) if start else warmup
    for step in range(start, plan.steps):
        if fault is not None and step == fault[0]:
            inject_fault(fault[1], step, rep.rt.layout)
        t0 = time.perf_counter()
        x, y = rep.batch(step)
        t1 = time.perf_counter()
        loss, grads = rep.compute_grads(x, y)
        off = 0
        for g in grads:
            a = g.numpy().ravel()
            push[off:off + a.size] = a
            off += a.size
        if slow_s:
            time.sleep(slow_s)
        push[n], push[n + 1] = float(loss), 1.0 if watch.reason() else 0.0
        t2 = time.perf_counter()
        reqs = [comm.Irecv(hdr, source=SERVER, tag=_TAG_HDR),
                comm.Irecv(params, source=SERVER, tag=_TAG_PARAMS),
                comm.Isend(push, dest=SERVER, tag=_TAG_PUSH)]
        poll(lambda: server_alive() or MPI.Request.Testall(reqs))
        if log.first_loss is None:
            log.first_loss = float(loss)
        log.steps = step + 1
        if hdr[1]:
            log.stopped = True
            break
        off = 0
        for v in rep.variables:
            size = int(np.prod(v.shape))
            v.assign(params[off:off + size].reshape(v.shape))
            off += size
        t3 = time.perf_counter()
        if step >= warmup:
            log.input_times.append(t1 - t0)
            log.comp_times.append(t2 - t1)
            log.wait_times.append(t3 - t2)
            log.step_times.append(t3 - t1)
            t_iter, in_iter = t_iter + t3 - t0, in_iter + 1
            if in_iter == per_iter:
                log.iter_times.append(t_iter)
                t_iter, in_iter = 0.0, 0
    return log


@dataclass
class AsyncResult:
    worker: Optional[WorkerLog]
    server: Optional[ServerLog]
    stopped: Optional[str]
    wall: float
    step: int
    checkpoint: Optional[str] = None     # written when training stopped early


def run(rep, opts, watch, workers: List[int], bound: Optional[int], ckpt_dir=None,
        found=None) -> AsyncResult:
    """Serve (rank 0) and work (the workers) until training ends; then every rank holds the
    server's parameters. ``found``: the checkpoint to resume (:class:`~.interface.Found`);
    with ``ckpt_dir`` the server checkpoints every --checkpoint-every updates and when asked to
    stop. Collective: every rank calls it."""
    rt, plan = rep.rt, rep.plan
    MPI = _mpi()
    comm = MPI.COMM_WORLD.Dup()
    serving, working = rt.rank == SERVER, rt.rank in workers
    if serving and working:
        check_threads(comm)
    server = _make_server(rep, opts, comm, workers, bound, ckpt_dir, found) if serving else None
    rep.broadcast_state()                   # every worker starts from the server's weights
    pushes = rt.hvd.broadcast_object(found.meta["pushes"] if found and rt.root else None,
                                     root_rank=0, name="hpcdl.async.resume")
    t_run = time.perf_counter()
    thread = _serve(server, rt, t_run, in_thread=working) if serving else None
    wlog = None
    if working:
        slow = straggler(rep, opts.slow_rank)
        late = slow[1] if slow else 0.0        # an input delay counts here as compute does
        start = int((pushes or {}).get(str(rt.rank), 0))
        rep.seek(start)

        def server_alive():
            if server is not None and server.log.error is not None:
                raise RuntimeError(f"the parameter server thread failed: "
                                   f"{server.log.error!r}") from server.log.error
        wlog = work(rep, comm, sum(int(rep.np.prod(v.shape)) for v in rep.variables), watch,
                    late, fault_from_env(rt.rank), plan.warmup, plan.per_iter, server_alive,
                    start)
    if thread is not None:
        poll(lambda: not thread.is_alive(), IDLE_MAX, 0.05)
    if server is not None and server.log.error is not None:
        raise server.log.error
    wall = time.perf_counter() - t_run
    stopped, path = _finish(server, opts, ckpt_dir) if serving else (None, None)
    if serving:
        for v_model, v_server in zip(rep.model.variables, server.model.variables):
            v_model.assign(v_server)
    stopped, path = rt.hvd.broadcast_object((stopped, path), root_rank=0, name="hpcdl.async.stop")
    rep.broadcast_state()                   # the server's parameters, on every rank
    step = server.clock if serving else 0
    comm.Free()
    return AsyncResult(wlog, server.log if serving else None, stopped, wall, step, path)


def _make_server(rep, opts, comm, workers, bound, ckpt_dir, found) -> Server:
    """Rank 0's server, restored from ``found``, its parameters copied into rank 0's replica."""
    plan = rep.plan
    server = Server(rep, opts, comm, workers, bound, plan.steps)
    per_update = plan.global_batch if bound == 0 else plan.batch
    updates = plan.steps if bound == 0 else plan.steps * len(workers)
    server.evals = Evaluations(opts, per_update, updates)
    if rep.rt.rank not in workers:
        server.fault = fault_from_env(rep.rt.rank)
    if ckpt_dir is not None:
        server.save = lambda srv: save_checkpoint(srv, opts, ckpt_dir)
    if found:
        server.restore(found.arrays, found.meta)
    for v_model, v_server in zip(rep.model.variables, server.model.variables):
        v_model.assign(v_server)
    return server


def _serve(server: Server, rt, t_run: float, in_thread: bool):
    """Serve in a thread beside rank 0's worker (returned), or here until training ends."""
    def body():
        try:
            server.serve(t_run, rt.say)
        except BaseException as exc:      # noqa: BLE001 - reported by the main thread
            server.log.error = exc
    if not in_thread:
        body()
        return None
    thread = threading.Thread(target=body, name="hpcdl-ps-server", daemon=True)
    thread.start()
    return thread


def _finish(server: Server, opts, ckpt_dir):
    """(why training stopped early or None, the checkpoint written then or None); a target not
    reached is recorded as such."""
    target = server.evals.target
    if target and server.log.target is None and not server.stop_reason:
        server.log.target = target_missed(target, server.clock)
    if not server.stop_reason or server.stop_reason == "target reached":
        return None, None
    if ckpt_dir is None:
        return server.stop_reason, None
    path = save_checkpoint(server, opts, ckpt_dir)
    checkpoint.mark_interrupted(ckpt_dir, server.clock, server.stop_reason)
    return server.stop_reason, str(path)


def save_checkpoint(server: Server, opts, ckpt_dir):
    """An atomic, verified checkpoint of the server: its parameters and optimizer, its clock
    and each worker's pushes (where each worker's data continues)."""
    rep = server.rep
    meta = {"mode": NAME, "workload": opts.workload, "seed": opts.seed, "size": rep.rt.size,
            "backend": NAME,
            "staleness": staleness_label(server.bound), "batch_size": rep.plan.batch,
            "lr": rep.plan.lr, "lr_warmup_steps": opts.lr_warmup_steps,
            "clock": server.clock,
            "pushes": {str(w): n for w, n in server.log.pushes.items()}}
    return checkpoint.save(ckpt_dir, server.clock, server.arrays(), meta,
                           keep=opts.keep_checkpoints)


def summarize(rep, res: AsyncResult, workers: List[int], bound: Optional[int],
              dedicated: bool) -> dict:
    """The run's figures (a collective): throughput from every worker's timed iterations,
    staleness and updates from the server, the held-out metric of the server's parameters."""
    rt, plan, hvd = rep.rt, rep.plan, rep.rt.hvd
    w = res.worker
    mine = None
    if w is not None:
        rate = iteration_rates(plan.batch * plan.per_iter, w.iter_times)
        mine = {"rank": rt.rank, "host": rt.layout.host, "steps": w.steps, "rate": rate,
                "step": summarize_values(w.step_times), "input_s": _med(w.input_times),
                "compute_s": _med(w.comp_times), "wait_s": _med(w.wait_times),
                "wait_total_s": float(sum(w.wait_times)), "first_loss": w.first_loss}
    every = [m for m in hvd.allgather_object(mine) if m is not None]
    hosts = hvd.allgather_object(rt.layout.host)
    out = rep.evaluate()
    out["digests"] = hvd.allgather_object(rep.digest())
    if not rt.root:
        return out
    log = res.server
    slowest = min(every, key=lambda m: m["rate"].get("overall", math.inf))
    total = {k: sum(m["rate"].get(k, 0.0) for m in every) for k in ("mean", "median", "overall")}
    total.update(n=slowest["rate"].get("n", 0),
                 ci95=math.sqrt(sum(m["rate"].get("ci95", 0.0) ** 2 for m in every)))
    step = {k: max(m["step"].get(k, 0.0) for m in every)
            for k in ("mean", "std", "ci95", "min", "median", "p99", "max")}
    step["n"] = min(m["step"].get("n", 0) for m in every)
    comp, wait = slowest["compute_s"], slowest["wait_s"]
    split = {"method": "async", "compute_s": comp, "wait_s": wait}
    if comp and step.get("median"):
        split["text"] = (f"compute {comp / step['median'] * 100:.0f}% / push and pull "
                         f"{(wait or 0) / step['median'] * 100:.0f}% (slowest worker)")
    train_s = max(log.wall - log.eval_time, 1e-9)
    out.update({
        "throughput": total, "throughput_per_rank": slowest["rate"], "step_time": step,
        "split": split, "wall_time_s": res.wall,
        "final_loss": log.curve[-1][1] if log.curve else float("nan"),
        "first_loss": every[0]["first_loss"], "loss_curve": log.curve, "hosts": hosts,
        "net": [None] * rt.size,
        "async": {"staleness_bound": bound, "dedicated": dedicated, "workers": len(workers),
                  "updates": log.updates, "updates_per_s": log.updates / train_s,
                  "samples_per_update": plan.global_batch if bound == 0 else plan.batch,
                  "staleness": staleness_summary(log.staleness), "lead_max": log.lead_max,
                  "apply_s": log.apply_s, "per_worker": [
                      {**{k: m[k] for k in ("rank", "host", "steps", "compute_s", "wait_s",
                                            "wait_total_s")},
                       "held_s": log.held_s.get(m["rank"], 0.0),
                       "pushes": log.pushes.get(m["rank"], 0),
                       "throughput": m["rate"].get("overall")} for m in every]}})
    if log.evals:
        out["evals"] = log.evals
    if log.target:
        out["target"] = log.target
    return out


def staleness_summary(values: List[int]) -> dict:
    """Histogram (staleness -> updates), mean, p95 and max of the applied updates' staleness."""
    if not values:
        return {"n": 0}
    vals = sorted(values)
    hist: Dict[str, int] = {}
    for v in vals:
        hist[str(v)] = hist.get(str(v), 0) + 1
    p95 = vals[min(len(vals) - 1, max(0, math.ceil(0.95 * len(vals)) - 1))]
    return {"n": len(vals), "mean": sum(vals) / len(vals), "p95": p95, "max": vals[-1],
            "hist": hist}


def _med(values):
    return statistics.median(values) if values else None


# --- the mode -----------------------------------------------------------------------------------------

class AsyncPS(Mode):
    """A parameter server at rank 0; workers push and pull without waiting for each other."""

    name = NAME
    backend = NAME
    unit = "update"
    help = "an asynchronous parameter server at rank 0 (Downpour, or stale-synchronous)"

    def add_arguments(self, group) -> None:
        group.add_argument("--staleness", type=staleness_arg, default=None, metavar="S",
                           help=f"{NAME}: a worker more than S updates ahead of the slowest waits "
                                "(stale-synchronous parallel); 0: the server averages one push of "
                                "every worker per update (the synchronous parameter server); inf "
                                "(default): no bound, Downpour SGD")
        group.add_argument("--ps-dedicated", action="store_true",
                           help=f"{NAME}: rank 0 only serves the parameters (default: it trains "
                                "too, its server in a thread)")

    def refuse_others(self, opts) -> None:
        if opts.staleness is not None or opts.ps_dedicated:
            raise UserError(f"--staleness and --ps-dedicated are options of --backend {NAME}")

    def validate(self, opts) -> None:
        if opts.compression != "none":
            raise UserError(f"--backend {NAME} pushes and pulls float32: --compression "
                            f"{opts.compression} is not offered with it")
        if opts.timeline:
            raise UserError(f"--timeline records Horovod's allreduces, and --backend {NAME} "
                            "makes none while training")
        workers_of(cluster.discover().size, opts.ps_dedicated)   # before TensorFlow starts

    def trainers(self, opts, size):
        return workers_of(size, opts.ps_dedicated)

    def replica(self, rt, wl, opts):
        workers = self.trainers(opts, rt.size)
        plan = make_plan(opts, wl, len(workers))
        index = workers.index(rt.rank) if rt.rank in workers else 0
        rep = Replica(rt, wl, plan, opts, shard=(index, len(workers)))
        rep.seek(0)
        return rep

    def header(self, rt, plan, opts):
        return [f"Parameter server at rank 0{' (dedicated)' if opts.ps_dedicated else ''}, "
                f"staleness bound {staleness_label(opts.staleness)}, {plan.steps} steps per worker"]

    def refuse(self, found, opts, size):
        if written_by(found.meta) != NAME:
            return (f"checkpoint {found.path} was written by a synchronous run; --backend {NAME} "
                    "resumes only its own (its server's clock and each worker's position)")
        return None

    def train(self, rep, opts, watch, ckpt_dir, found):
        workers = self.trainers(opts, rep.rt.size)
        return run(rep, opts, watch, workers, opts.staleness, ckpt_dir, found)

    def summarize(self, rep, loop, opts):
        return summarize(rep, loop, self.trainers(opts, rep.rt.size), opts.staleness,
                         opts.ps_dedicated)

    def progress(self, loop, plan):
        return f"after {loop.step} updates"

    def params(self, opts, rt):
        return {"staleness": staleness_label(opts.staleness), "ps_dedicated": opts.ps_dedicated}
