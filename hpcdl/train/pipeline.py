"""Model parallelism: a Keras Sequential model cut into K stages on K ranks, GPipe's schedule.

``hpcdl train --parallel pipeline --stages K --micro-batches M``. Every rank builds the whole
model from the same seed and keeps its stage: a contiguous run of layers. Where the stages
begin is chosen by time (``--cut time``, the default): rank 0 times one micro-batch through
every run of layers that could be a stage, as that stage would run it, and takes the cut whose
slowest stage is fastest; ``--cut layers`` gives every stage as many layers. Each step
takes one batch (every stage reads the same one: rank 0 its inputs, the last rank its labels),
splits it into M micro-batches and runs them through the stages: each stage sends its
activations forward, the last computes the loss of each micro-batch as it arrives and sends
the gradient of its input back; when a stage has run every micro-batch forward it runs them
backward (recomputing its forward, as GPipe rematerialises), adds their gradients and applies
them with its own optimizer: a synchronous flush per step, so the loss is the one process's on
the same batch (the mean over micro-batches of their mean losses), up to the order of float
additions. There is no data parallelism beside it (hybrid data x pipeline is out of scope).

Measured per step and stage: the time computing (forward, backward, the update) and the rest,
waiting for a neighbour or its bytes; the bubble is the mean over stages of the rest's share of
the step, beside GPipe's (K - 1) / (M + K - 1) for equal stages. The bytes a step sends are the
activations forward and their gradients backward at every cut, against the 2(p - 1)/p x n a
ring allreduce of the same model's n gradient bytes sends per rank when data parallel.
Beside GPipe's figure, the record has the bubble that schedule gives for the stages' timed
costs, (M - 1) x the slowest + each once, which unequal stages raise.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from . import checkpoint
from .args import positive_int
from .control import (evaluate_alone, Evaluations, fault_from_env, inject_fault, poll,
                      target_missed)
from .figures import iteration_rates, summarize_values
from .interface import Mode, written_by
from .replica import Replica
from .runtime import make_plan
from .stages import (bubble_expected, bubble_theory, check, check_layout, choose_cut,
                     stage_functions)
from .. import cluster
from ..errors import UserError

_TAG_ACT, _TAG_GRAD = 31, 32


@dataclass
class PipeLog:
    """What one stage measured."""

    step_times: List[float] = field(default_factory=list)
    busy_times: List[float] = field(default_factory=list)
    iter_times: List[float] = field(default_factory=list)
    curve: List[list] = field(default_factory=list)
    evals: List[dict] = field(default_factory=list)
    eval_time: float = 0.0
    target: Optional[dict] = None
    first_loss: Optional[float] = None
    last_loss: float = float("nan")
    step: int = 0
    wall: float = 0.0
    stopped: Optional[str] = None
    checkpoint: Optional[str] = None      # written when training stopped early
    stage: Optional["Stage"] = None       # this rank's stage


class Stage:
    """This rank's layers, their optimizer and the step functions of one micro-batch."""

    def __init__(self, rep, stages: int, micro: int, ranges: List[Tuple[int, int]]):
        import numpy as np
        rt, tf, model = rep.rt, rep.rt.tf, rep.model
        self.rep, self.np, self.tf = rep, np, tf
        self.k, self.K, self.M = rt.rank, stages, micro
        layers = model.layers
        self.ranges = ranges
        a, b = self.ranges[self.k]
        self.layers = layers[a:b]
        self.first, self.last = self.k == 0, self.k == stages - 1
        self.variables = [v for layer in self.layers for v in layer.trainable_variables]
        self.opt = rep.wl.make_optimizer(rep.plan.lr)
        self.opt.build(self.variables)
        mb = rep.plan.batch // micro
        self.micro_batch = mb
        # the activation each cut carries, per micro-batch (shape without the batch axis)
        self.out_shape = (mb,) + tuple(layers[b - 1].output.shape[1:])
        self.in_shape = (mb,) + tuple(layers[a - 1].output.shape[1:]) if a else None
        self.costs: Optional[List[float]] = None     # s per micro-batch, as the cut timed them
        self.cut_bytes = [4 * int(np.prod(layers[e - 1].output.shape[1:]))
                          for _, e in self.ranges[:-1]]          # per sample, at each cut
        self.params = [sum(int(np.prod(v.shape)) for layer in layers[s:e]
                           for v in layer.trainable_variables) for s, e in self.ranges]
        self._functions()

    def _functions(self):
        tf, variables, opt = self.tf, self.variables, self.opt
        autograph = self.rep.wl.autograph
        self.fwd, self.bwd, self.last_fn = stage_functions(tf, self.layers, self.rep.wl.loss,
                                                           self.M, autograph)

        @tf.function(autograph=autograph)
        def apply(grads):
            opt.apply_gradients(zip(grads, variables))
        self.apply = apply

    def step(self, comm, x, y, wait) -> Tuple[float, float]:
        """One step of M micro-batches; (loss on the last stage else nan, seconds computing)."""
        np, tf, M, mb = self.np, self.tf, self.M, self.micro_batch
        busy, sends, saved = 0.0, [], []
        acc = None
        loss = 0.0
        recv_act = np.empty(self.in_shape, np.float32) if not self.first else None
        for m in range(M):
            if self.first:
                a = x[m * mb:(m + 1) * mb]
            else:
                wait(comm.Irecv(recv_act, source=self.k - 1, tag=_TAG_ACT))
                a = tf.constant(recv_act)
            t0 = time.perf_counter()
            if self.last:
                out = self.last_fn(a, y[m * mb:(m + 1) * mb])
                loss += float(out[0])
                grads, g_in = out[1:-1], out[-1]
                acc = list(grads) if acc is None else [s + g for s, g in zip(acc, grads)]
                g_in = g_in.numpy() if not self.first else None
                busy += time.perf_counter() - t0
                if g_in is not None:
                    sends.append(comm.Isend(g_in, dest=self.k - 1, tag=_TAG_GRAD))
            else:
                h = self.fwd(a).numpy()
                busy += time.perf_counter() - t0
                saved.append(a)
                sends.append(comm.Isend(h, dest=self.k + 1, tag=_TAG_ACT))
        if not self.last:
            g_out = np.empty(self.out_shape, np.float32)
            for m in range(M):
                wait(comm.Irecv(g_out, source=self.k + 1, tag=_TAG_GRAD))
                t0 = time.perf_counter()
                out = self.bwd(saved[m], tf.constant(g_out))
                grads, g_in = out[:-1], out[-1]
                acc = list(grads) if acc is None else [s + g for s, g in zip(acc, grads)]
                g_in = g_in.numpy() if not self.first else None
                busy += time.perf_counter() - t0
                if g_in is not None:
                    sends.append(comm.Isend(g_in, dest=self.k - 1, tag=_TAG_GRAD))
        t0 = time.perf_counter()
        if self.variables:
            self.apply(acc)
        busy += time.perf_counter() - t0
        wait(*sends)
        return (loss if self.last else float("nan")), busy

    def state(self) -> dict:
        """This stage's variables (v) and optimizer state (o), as arrays."""
        opt = self.opt.variables
        return {"v": [v.numpy() for v in self.variables],
                "o": [v.numpy() for v in (opt() if callable(opt) else opt)]}

    def restore(self, state: dict) -> None:
        opt = self.opt.variables
        opt = list(opt() if callable(opt) else opt)
        if len(state["v"]) != len(self.variables) or len(state["o"]) != len(opt):
            raise UserError("the checkpoint's stage does not fit this stage's layers")
        for v, a in zip(self.variables + opt, state["v"] + state["o"]):
            v.assign(a)

    def bytes_per_step(self, batch: int) -> int:
        """Bytes every cut carries in a step: activations forward, their gradients back."""
        return 2 * batch * sum(self.cut_bytes)


def _waiter(MPI):

    def wait(*reqs):
        # short sleeps: a stage's wait is the bubble being measured, so its poll must be fine
        poll(lambda: MPI.Request.Testall(list(reqs)), 1e-5, 2e-4)
    return wait


def run(rep, opts, watch, stages: int, micro: int, ckpt_dir=None, found=None) -> PipeLog:
    """Train this stage for the plan's steps, from a checkpoint with --resume (collective over
    the stages); with ``ckpt_dir``, checkpoint every --checkpoint-every steps and on a stop."""
    from mpi4py import MPI
    rt = rep.rt
    check(rep, stages, micro)
    resumed = resume_state(rep, found, stages)
    ranges, costs = ((resumed["ranges"], None) if resumed else
                     choose_cut(rep, stages, micro, opts.cut))
    stage = Stage(rep, stages, micro, ranges)
    stage.costs = costs
    log = PipeLog()
    if resumed:
        stage.restore(resumed["state"])
        log.step = resumed["step"]
        rep.seek(log.step)
    rt.say("Stages: " + "; ".join(
        f"{k}: layers {a}-{b - 1}" + (f" ({costs[k] * 1e3:.3f} ms per micro-batch)" if costs
                                      else "") for k, (a, b) in enumerate(ranges)))
    comm = MPI.COMM_WORLD.Dup()
    _loop(rep, stage, opts, watch, log, comm, MPI, ckpt_dir)
    comm.Free()
    if log.stopped and ckpt_dir is not None:
        path = save(rep, stage, opts, ckpt_dir, log.step)
        if rt.root:
            checkpoint.mark_interrupted(ckpt_dir, log.step, log.stopped)
        log.checkpoint = rt.hvd.broadcast_object(path and str(path), root_rank=0,
                                                 name="hpcdl.pipe.stop")
    log.stage = stage
    return log


def _loop(rep, stage: Stage, opts, watch, log: PipeLog, comm, MPI, ckpt_dir) -> None:
    rt, plan = rep.rt, rep.plan
    wait, fault = _waiter(MPI), fault_from_env(rt.rank)
    evals = Evaluations(opts, plan.batch, plan.steps)
    first_timed = max(plan.warmup, log.step + 1 if log.step else 0)
    t_run = time.perf_counter()
    t_iter, in_iter = 0.0, 0
    while log.step < plan.steps and log.target is None:
        step = log.step
        if fault is not None and step == fault[0]:
            inject_fault(fault[1], step, rt.layout)
        t0 = time.perf_counter()
        x, y = rep.batch(step)
        ts = time.perf_counter()
        loss, busy = stage.step(comm, x, y, wait)
        t1 = time.perf_counter()
        log.step = step = step + 1
        if step > first_timed:
            log.step_times.append(t1 - ts)
            log.busy_times.append(busy)
            t_iter, in_iter = t_iter + t1 - t0, in_iter + 1
            if in_iter == plan.per_iter:
                log.iter_times.append(t_iter)
                t_iter, in_iter = 0.0, 0
        if stage.last:
            log.last_loss = loss
            if log.first_loss is None:
                log.first_loss = loss
        if step % opts.log_every == 0 or step == plan.steps:
            value = comm.bcast(loss if stage.last else None, root=stage.K - 1)
            log.curve.append([step, value])
            rt.say(f"Step {step}/{plan.steps}: loss {value:.6g} "
                   f"({time.perf_counter() - t_run:.1f} s)")
        if evals.due(step):
            evals.run(rep, log, step, t_run, lambda: evaluate(rep, stage))
        if step % opts.stop_check_every == 0 and step < plan.steps:
            code = comm.allreduce(watch.code(), op=MPI.MAX)
            if code:
                log.stopped = watch.agreed(code)
                break
        if ckpt_dir is not None and opts.checkpoint_every and \
                step % opts.checkpoint_every == 0 and step < plan.steps:
            save(rep, stage, opts, ckpt_dir, step)
    log.wall = time.perf_counter() - t_run
    if evals.target and log.target is None and not log.stopped:
        log.target = target_missed(evals.target, plan.steps)


def save(rep, stage: Stage, opts, ckpt_dir, step: int):
    """Every stage's variables and optimizer state in one checkpoint rank 0 writes, with the
    cut (a resumed run keeps it); the path on rank 0, None elsewhere (collective)."""
    every = rep.rt.hvd.allgather_object(stage.state())
    if not rep.rt.root:
        return None
    arrays = {f"s{k}/{kind}{i}": a for k, st in enumerate(every)
              for kind in ("v", "o") for i, a in enumerate(st[kind])}
    meta = {"mode": "pipeline", "parallel": "pipeline", "workload": opts.workload, "seed": opts.seed,
            "stages": stage.K, "micro_batches": stage.M, "batch_size": rep.plan.batch,
            "lr": rep.plan.lr, "lr_warmup_steps": opts.lr_warmup_steps,
            "ranges": [list(r) for r in stage.ranges]}
    return checkpoint.save(ckpt_dir, step, arrays, meta, keep=opts.keep_checkpoints)


def resume_state(rep, found, stages: int) -> Optional[dict]:
    """This stage's part of ``found`` (rank 0 holds its arrays), the cut and the step; None
    without one (collective)."""
    out = None
    if found and rep.rt.root:
        meta, arrays = found.meta, found.arrays
        out = {"step": found.step, "ranges": [tuple(r) for r in meta["ranges"]],
               "state": [{kind: [arrays[f"s{k}/{kind}{i}"] for i in range(
                   sum(1 for n in arrays if n.startswith(f"s{k}/{kind}")))]
                          for kind in ("v", "o")} for k in range(stages)]}
    out = rep.rt.hvd.broadcast_object(out, root_rank=0, name="hpcdl.pipe.resume")
    if out:
        out["state"] = out["state"][rep.rt.rank]
    return out


def assemble(rep, stage: Stage) -> None:
    """Every stage's weights into every rank's copy of the whole model (collective)."""
    mine = [v.numpy() for layer in stage.layers for v in layer.variables]
    every = rep.rt.hvd.allgather_object(mine)
    for (a, b), arrays in zip(stage.ranges, every):
        values = [v for layer in rep.model.layers[a:b] for v in layer.variables]
        for v, arr in zip(values, arrays):
            v.assign(arr)


def evaluate(rep, stage: Stage) -> dict:
    """The held-out metric of the whole model: its weights assembled, evaluated on rank 0,
    the figures broadcast (collective)."""
    assemble(rep, stage)
    out = evaluate_alone(rep, rep.model) if rep.rt.root else None
    return rep.rt.hvd.broadcast_object(out, root_rank=0, name="hpcdl.pipe.eval")


def summarize(rep, stage: Stage, log: PipeLog) -> dict:
    """The run's figures (collective): throughput from the slowest stage's iterations, the
    bubble per stage and its mean against theory, the bytes per step against data parallel."""
    import statistics

    rt, plan, hvd = rep.rt, rep.plan, rep.rt.hvd
    mine = {"stage": stage.k, "host": rt.layout.host,
            "layers": [layer.name for layer in stage.layers],
            "params": stage.params[stage.k], "iters": log.iter_times,
            "first_loss": log.first_loss,
            "step": summarize_values(log.step_times),
            "busy_s": statistics.median(log.busy_times) if log.busy_times else None,
            "bubble": (1 - sum(log.busy_times) / sum(log.step_times)) if log.step_times
            else None}
    every = hvd.allgather_object(mine)
    hosts = hvd.allgather_object(rt.layout.host)
    out = evaluate(rep, stage)
    out["digests"] = [rep.digest()]
    if not rt.root:
        return out
    slowest = max(every, key=lambda m: sum(m["iters"]))
    rate = iteration_rates(plan.batch * plan.per_iter, slowest["iters"])
    step = {k: max(m["step"].get(k, 0.0) for m in every)
            for k in ("mean", "std", "ci95", "min", "median", "p99", "max")}
    step["n"] = min(m["step"].get("n", 0) for m in every)
    bubbles = [m["bubble"] for m in every if m["bubble"] is not None]
    measured = sum(bubbles) / len(bubbles) if bubbles else None
    theory = bubble_theory(stage.K, stage.M)
    expected = bubble_expected(stage.costs, stage.M) if stage.costs else None
    grad_bytes = rep.gradient_bytes()
    pipe_bytes = stage.bytes_per_step(plan.batch)
    out.update({
        "throughput": rate, "throughput_per_rank": {k: (v / rt.size if k != "n" else v)
                                                    for k, v in rate.items()},
        "step_time": step, "wall_time_s": log.wall,
        "split": {"method": "pipeline", "bubble": measured, "bubble_theory": theory,
                  "text": (f"bubble {measured * 100:.1f}% (GPipe's (K-1)/(M+K-1): "
                           f"{theory * 100:.1f}%"
                           + (f"; {expected * 100:.1f}% for these stages' timed costs"
                              if expected is not None else "") + ")")
                  if measured is not None else ""},
        "final_loss": log.curve[-1][1] if log.curve else float("nan"),
        "first_loss": every[-1]["first_loss"], "loss_curve": log.curve, "hosts": hosts,
        "net": [None] * rt.size,
        "pipeline": {"stages": stage.K, "micro_batches": stage.M,
                     "micro_batch": stage.micro_batch, "bubble": measured,
                     "bubble_theory": theory, "bubble_expected": expected,
                     "cut": [list(r) for r in stage.ranges],
                     "stage_costs_s": stage.costs, "per_stage": [
                         {k: m[k] for k in ("stage", "host", "layers", "params", "busy_s",
                                            "bubble")} for m in every],
                     "bytes_per_step": pipe_bytes, "cut_bytes_per_sample": stage.cut_bytes,
                     "gradient_bytes": grad_bytes,
                     "ring_bytes_per_rank_at_k": 2 * (stage.K - 1) / stage.K * grad_bytes}})
    if log.evals:
        out["evals"] = log.evals
    if log.target:
        out["target"] = log.target
    return out


# --- the mode -----------------------------------------------------------------------------------------

class Pipeline(Mode):
    """The model's layers cut into stages, one per rank; GPipe's micro-batches."""

    name = "pipeline"
    parallel = "pipeline"
    help = "model parallelism: the layers cut into stages on ranks, GPipe's micro-batches"

    def add_arguments(self, group) -> None:
        group.add_argument("--stages", type=positive_int, default=None,
                           help="pipeline: stages, one per rank (default: the ranks)")
        group.add_argument("--micro-batches", type=positive_int, default=None,
                           help="pipeline: micro-batches per step, dividing the batch (4)")
        group.add_argument("--cut", choices=("time", "layers"), default=None,
                           help="pipeline: where the stages begin: time (default) times every "
                                "stage a cut could make on a micro-batch and takes the cut whose "
                                "slowest stage is fastest; layers: as many layers in each stage")

    def chosen(self, opts) -> bool:
        return opts.parallel == "pipeline"

    def refuse_others(self, opts) -> None:
        given = [name for name, v in (("--stages", opts.stages),
                                      ("--micro-batches", opts.micro_batches),
                                      ("--cut", opts.cut)) if v is not None]
        if given:
            verb = "is an option" if len(given) == 1 else "are options"
            raise UserError(f"{' and '.join(given)} {verb} of --parallel pipeline")

    def validate(self, opts) -> None:
        opts.micro_batches = opts.micro_batches or 4
        opts.cut = opts.cut or "time"
        if opts.backend != "horovod" or opts.compression != "none":
            raise UserError("--parallel pipeline sends activations between stages, not "
                            "gradients: --backend and --compression do not apply (leave them out)")
        for given, name in ((opts.timeline, "--timeline"), (opts.slow_rank, "--slow-rank")):
            if given:
                raise UserError(f"{name} is not offered with --parallel pipeline yet")
        if opts.batch_size:                       # before TensorFlow starts, where it can tell
            size = cluster.discover().size
            check_layout(size, opts.stages or size, opts.batch_size, opts.micro_batches)

    def replica(self, rt, wl, opts):
        rep = Replica(rt, wl, make_plan(opts, wl, 1), opts, shard=(0, 1))
        rep.seek(0)
        return rep

    def header(self, rt, plan, opts):
        return [f"Pipeline: {opts.stages or rt.size} stages, one per rank, "
                f"{opts.micro_batches} micro-batches of {plan.batch // opts.micro_batches}"]

    def refuse(self, found, opts, size):
        stages = opts.stages or size
        if written_by(found.meta) != "pipeline" or found.meta.get("stages") != stages:
            return (f"checkpoint {found.path} was not written by a pipeline of {stages} stages: "
                    "resume it as it was written")
        return None

    def train(self, rep, opts, watch, ckpt_dir, found):
        return run(rep, opts, watch, opts.stages or rep.rt.size, opts.micro_batches, ckpt_dir,
                   found)

    def summarize(self, rep, loop, opts):
        return summarize(rep, loop.stage, loop)

    def params(self, opts, rt):
        return {"stages": opts.stages or rt.size, "micro_batches": opts.micro_batches,
                "cut": opts.cut}

    def replicas(self) -> bool:
        return False
