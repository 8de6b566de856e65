"""The asynchronous parameter server's server (:mod:`.asyncps`): the parameters and their
optimizer on rank 0, the rule of when a worker's push is applied and when it is answered
(Downpour, a staleness bound, or S = 0's synchronous update), and what it measured. The
workers' side, the run and its figures are :mod:`.asyncps`; the two share the tags below."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .control import evaluate_alone, inject_fault, poll, reached, target_reached
from ..errors import UserError

_TAG_PUSH, _TAG_HDR, _TAG_PARAMS = 21, 22, 23


@dataclass
class ServerLog:
    """What the server measured: per update its staleness, per worker its pushes and held time."""

    staleness: List[int] = field(default_factory=list)
    updates: int = 0
    pushes: Dict[int, int] = field(default_factory=dict)
    held_s: Dict[int, float] = field(default_factory=dict)     # replies held by the bound
    lead_max: int = 0      # the most pushes a worker answered was ahead of the slowest running
    curve: List[list] = field(default_factory=list)            # [updates, mean loss, wall s]
    evals: List[dict] = field(default_factory=list)
    eval_time: float = 0.0
    target: Optional[dict] = None
    stopped: Optional[str] = None
    wall: float = 0.0
    apply_s: float = 0.0
    error: Optional[BaseException] = None


class Server:
    """The parameters, their optimizer and the rule of when a push is applied and answered."""

    def __init__(self, rep, opts, comm, workers: List[int], bound: Optional[int], steps: int):
        import numpy as np
        tf = rep.rt.tf
        self.np, self.tf, self.rep, self.comm = np, tf, rep, comm
        self.workers, self.bound, self.steps = workers, bound, steps
        self.model = tf.keras.models.clone_model(rep.model)
        self.model.set_weights(rep.model.get_weights())
        self.variables = self.model.trainable_variables
        self.shapes = [tuple(v.shape) for v in self.variables]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.n = sum(self.sizes)
        plan = rep.plan
        # S = 0: one update per global batch, the sync run's rate; else one per worker's batch.
        lr = plan.lr if bound == 0 else plan.lr * plan.batch / plan.global_batch
        self.opt = rep.wl.make_optimizer(lr)
        self.opt.build(self.variables)
        opt, variables = self.opt, self.variables

        @tf.function(autograph=rep.wl.autograph)
        def apply(grads):
            opt.apply_gradients(zip(grads, variables))
        self._apply = apply
        self.log = ServerLog(pushes={w: 0 for w in workers}, held_s={w: 0.0 for w in workers})
        self.clock = 0                                  # updates applied
        self.pulled = {w: 0 for w in workers}           # the clock each worker last pulled
        self.active = set(workers)                      # workers that have steps left
        self.stop_reason: Optional[str] = None
        self.log_every = opts.log_every
        self.evals = None                               # set by run(): control.Evaluations
        self.fault = None                # a dedicated server's HPCDL_FAULT: (update, kind)
        self.save = None                 # save(server) -> path: a checkpoint (run() sets it)
        self.checkpoint_every = getattr(opts, "checkpoint_every", 0) or 0
        self._losses: List[float] = []

    # state
    def arrays(self) -> dict:
        """The parameters and the optimizer's state, as a checkpoint holds a replica's."""
        opt = self.opt.variables
        out = {f"model/{i}": v.numpy() for i, v in enumerate(self.model.variables)}
        out.update({f"opt/{i}": v.numpy() for i, v in enumerate(opt() if callable(opt) else opt)})
        return out

    def restore(self, arrays: dict, meta: dict) -> None:
        """Take a checkpoint of this server: parameters, optimizer, clock, pushes per worker."""
        opt = self.opt.variables
        opt = list(opt() if callable(opt) else opt)
        n_model = sum(1 for k in arrays if k.startswith("model/"))
        if n_model != len(self.model.variables) or len(arrays) - n_model != len(opt):
            raise UserError("the checkpoint does not fit this model and optimizer (was it "
                            "written by another workload?)")
        for i, v in enumerate(self.model.variables):
            v.assign(arrays[f"model/{i}"])
        for i, v in enumerate(opt):
            v.assign(arrays[f"opt/{i}"])
        self.clock = self.log.updates = int(meta["clock"])
        for w in self.workers:
            self.log.pushes[w] = int(meta["pushes"].get(str(w), 0))
            self.pulled[w] = self.clock
        self.active = {w for w in self.workers if self.log.pushes[w] < self.steps}

    # parameters
    def params(self):
        return self.np.concatenate([v.numpy().ravel() for v in self.variables]).astype(
            self.np.float32, copy=False)

    def apply(self, flat) -> None:
        tf, out, off = self.tf, [], 0
        for v, shape, size in zip(self.variables, self.shapes, self.sizes):
            out.append(tf.constant(flat[off:off + size].reshape(shape), dtype=v.dtype))
            off += size
        t0 = time.perf_counter()
        self._apply(out)
        self.log.apply_s += time.perf_counter() - t0

    # the loop
    def serve(self, t_run: float, say) -> None:
        """Receive pushes until every worker is done or stopped; answer each as the bound allows."""
        np, comm, MPI = self.np, self.comm, _mpi()
        buf = np.empty(self.n + 2, dtype=np.float32)    # gradient, loss, stop request
        pending: Dict[int, np.ndarray] = {}             # S = 0: this round's pushes
        held: Dict[int, float] = {}                     # worker -> since when its reply waits
        status = MPI.Status()
        while self.active or held or pending:
            poll(lambda: comm.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG_PUSH, status=status))
            src = status.Get_source()
            comm.Recv(buf, source=src, tag=_TAG_PUSH)
            stopping = self.stop_reason
            self.log.pushes[src] += 1
            self._losses.append(float(buf[self.n]))
            if buf[self.n + 1] and self.stop_reason is None:
                self.stop_reason = "a worker asked to stop"
            if self.log.pushes[src] >= self.steps:
                self.active.discard(src)
            if self.bound == 0:
                # every worker makes the same steps, so every round completes, a stop too
                pending[src] = buf[:self.n].copy()
                if len(pending) < len(self.workers):
                    continue
                acc = None
                for w in sorted(pending):                # rank order, as --backend ps adds
                    acc = pending[w].copy() if acc is None else np.add(acc, pending[w], out=acc)
                acc /= np.float32(len(pending))
                self._update(acc, [0] * len(pending), t_run, say)
                answer, pending = sorted(pending), {}
            else:
                if stopping is None:                      # nothing is applied after a stop
                    self.log.staleness.append(self.clock - self.pulled[src])
                    self._update(buf[:self.n], None, t_run, say)
                answer = [src]
            now = time.perf_counter()
            for w in answer:
                held[w] = now
            for w in self._releasable(held):
                since = held.pop(w)
                if w not in answer:                  # held by the bound since its push came
                    self.log.held_s[w] += time.perf_counter() - since
                self._reply(w)
        self.log.wall = time.perf_counter() - t_run

    def _releasable(self, held: Dict[int, float]) -> List[int]:
        """The held workers that may go on: all when stopping, else those within the bound of
        the slowest worker still running (a worker that has made its steps bounds no one)."""
        if self.stop_reason or self.bound in (None, 0) or not self.active:
            return list(held)
        slowest = min(self.log.pushes[w] for w in self.active)
        return [w for w in held if self.log.pushes[w] - slowest <= self.bound]

    def _update(self, grad, stale, t_run, say) -> None:
        if stale is not None:
            self.log.staleness.extend(stale)
        self.apply(grad)
        self.clock += 1
        self.log.updates = self.clock
        if self.fault is not None and self.clock == self.fault[0]:
            inject_fault(self.fault[1], self.clock, self.rep.rt.layout)
        if self.save and self.checkpoint_every and self.clock % self.checkpoint_every == 0 \
                and self.active:
            self.save(self)
        if self.clock % self.log_every == 0 or not self.active:
            loss = statistics.fmean(self._losses) if self._losses else float("nan")
            self._losses = []
            self.log.curve.append([self.clock, loss, time.perf_counter() - t_run])
            say(f"Update {self.clock}: loss {loss:.6g} ({time.perf_counter() - t_run:.1f} s)")
        if self.evals is not None and self.evals.due(self.clock):
            self._evaluate(t_run)

    def _evaluate(self, t_run) -> None:
        t0 = time.perf_counter()
        ev = {"step": self.clock, "samples": self.clock * self.evals.batch, "wall_s": t0 - t_run,
              "time_s": t0 - t_run - self.log.eval_time,
              **evaluate_alone(self.rep, self.model)}
        self.log.evals.append(ev)
        self.log.eval_time += time.perf_counter() - t0
        target = self.evals.target
        if target and self.log.target is None and reached(target, ev):
            self.log.target = target_reached(target, self.clock, ev)
            self.stop_reason = self.stop_reason or "target reached"

    def _reply(self, w: int) -> None:
        np = self.np
        stop = self.stop_reason is not None
        self.comm.Send(np.array([self.clock, 1 if stop else 0], dtype=np.int64), dest=w,
                       tag=_TAG_HDR)
        if stop:
            self.active.discard(w)
        else:
            mine = self.log.pushes[w]
            slowest = min((self.log.pushes[v] for v in self.active), default=mine)
            self.log.lead_max = max(self.log.lead_max, mine - slowest)
            self.pulled[w] = self.clock
        # the parameters go with a stop too: the worker has posted its receive for them
        self.comm.Send(self.params(), dest=w, tag=_TAG_PARAMS)


def _mpi():
    from mpi4py import MPI
    return MPI
