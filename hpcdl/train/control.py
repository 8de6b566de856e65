"""What every way of training shares in its loop: the ranks' reasons to stop, faults and
stragglers injected on purpose, evaluations during training and their target, and polling that
never spins a core.
"""
from __future__ import annotations

import math
import os
import signal
import statistics
import time
from pathlib import Path
from typing import Optional

from .. import cluster
from ..errors import UserError

STOP_CHECK_SECONDS = 1.0      # the ranks agree on stopping about this often (at least every 10 steps)
IDLE_MIN, IDLE_MAX = 2e-5, 1e-3       # s: the sleep between polls grows from, and to


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
        # USR1: Slurm's warning before the limit, Grid Engine's soft limit (s_rt) and its -notify
        # before a suspend; USR2: Grid Engine's -notify before a kill; INT: Ctrl-C, which
        # checkpoints as TERM does (a second one interrupts at once)
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
            try:
                signal.signal(sig, self._on_signal)
            except (ValueError, OSError):  # not the main thread
                pass

    def _on_signal(self, signum, frame):
        if self.signalled and signum == signal.SIGTERM:
            raise SystemExit(128 + signum)    # a second TERM: go now
        if self.signalled and signum == signal.SIGINT:
            raise KeyboardInterrupt           # a second Ctrl-C: go now
        self.signalled = signal.Signals(signum).name

    def code(self) -> int:
        """This rank's reason to stop as a number the ranks can agree on (MAX): 0 none, 1 the
        Slurm limit, 2 --max-time, 3 the stop file, 4 a signal (the order :meth:`reason` checks)."""
        text = self.reason()
        if text is None:
            return 0
        return (4 if text.startswith("signal") else 3 if text.startswith("stop file")
                else 2 if text.startswith("--max-time") else 1)

    def agreed(self, code: int) -> str:
        """Why the ranks stopped: this rank's own reason, else the one another rank gave
        (``code``, the ranks' MAX of :meth:`code`)."""
        mine = self.reason()
        if mine is not None:
            return mine
        return {4: "a signal", 3: f"stop file {self.stop_file}",
                2: f"--max-time {self.max_time:g} s reached" if self.max_time else "--max-time",
                1: "Slurm time limit (SLURM_JOB_END_TIME) near"}.get(
                    int(code), "another rank asked to stop") + " (on another rank first)"

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


def next_interval(every: int, steps: int, seconds: float, at_least: int) -> int:
    """Steps until the next stop agreement: about STOP_CHECK_SECONDS of the steps just seen, at
    least ``at_least``, and at most twice the last interval (steps that speed up are trusted
    slowly, so that a signal is still acted on within seconds)."""
    if steps <= 0 or seconds <= 0:
        return max(at_least, every)
    return max(at_least, min(2 * every, math.ceil(STOP_CHECK_SECONDS * steps / seconds)))


# --- on purpose: faults and stragglers ---------------------------------------------------------------

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


def straggler(rep, slow_rank):
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


# --- evaluations --------------------------------------------------------------------------------------

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

    def run(self, rep, res, step: int, t_run: float, evaluate=None) -> float:
        """Evaluate at ``step`` (``rep.evaluate``, or the mode's own ``evaluate()``); return the
        seconds it took. Sets ``res.target`` once reached."""
        t0 = time.perf_counter()
        ev = {"step": step, "samples": step * self.batch, "wall_s": t0 - t_run,
              "time_s": t0 - t_run - res.eval_time, **(evaluate or rep.evaluate)()}
        res.evals.append(ev)
        dt = time.perf_counter() - t0
        res.eval_time += dt
        if self.target and res.target is None and reached(self.target, ev):
            res.target = target_reached(self.target, step, ev)
        return dt


def target_reached(target, step: int, ev: dict) -> dict:
    """The record's ``target`` when the evaluation ``ev`` at ``step`` reached it."""
    return {"metric": target[0], "value": target[1], "reached": True, "steps": step,
            "samples": ev["samples"], "time_s": ev["time_s"]}


def target_missed(target, steps: int) -> dict:
    """The record's ``target`` when ``steps`` ended without reaching it (a valid outcome)."""
    return {"metric": target[0], "value": target[1], "reached": False, "steps": steps}


def reached(target, ev: dict) -> bool:
    metric, value = target
    if metric == "accuracy":
        return ev.get("test_accuracy", -1.0) >= value
    return ev.get("test_loss", math.inf) <= value


def evaluate_alone(rep, model) -> dict:
    """The held-out loss (and accuracy) of ``model`` over the whole test set, on this rank."""
    wl, tf, np = rep.wl, rep.rt.tf, rep.np
    if wl.test is None:
        return {}
    xt, yt = wl.test
    pred = model(tf.constant(xt), training=False)
    out = {"test_loss": float(tf.reduce_mean(wl.loss(yt, pred)))}
    if wl.accuracy:
        out["test_accuracy"] = float(np.mean(np.argmax(pred.numpy(), axis=1) == yt))
    return out


# --- waiting ------------------------------------------------------------------------------------------

def poll(test, idle_min: float = IDLE_MIN, idle_max: float = IDLE_MAX):
    """Call ``test()`` until it returns something true, sleeping between calls from ``idle_min``
    growing to ``idle_max`` (no spinning core); return that value."""
    delay = idle_min
    while True:
        got = test()
        if got:
            return got
        time.sleep(delay)
        delay = min(2 * delay, idle_max)
