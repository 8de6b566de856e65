"""Train a workload data-parallel across MPI ranks with Horovod (or another gradient exchange).

Run as ``mpirun -np N hpcdl train ...`` or ``srun hpcdl train ...``. Every rank builds the same
model from the same seed, trains on its own shard of each global batch, and averages gradients
through Horovod's ring-allreduce (``hvd.DistributedGradientTape``). Model and optimizer state are
broadcast from rank 0 after the first step. Rank 0 prints the result lines and appends one record
to the results file.

This module's top level imports only the standard library: TensorFlow and Horovod are imported
inside :func:`run`, after the thread counts for this rank have been exported.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import time
from pathlib import Path
from typing import Optional

from . import cluster
from .errors import EXIT_INTERRUPTED, Interrupted, UserError

BACKENDS = ("horovod",)
COMPRESSIONS = ("none", "fp16")
DEFAULT_RESULTS = "results/runs.jsonl"


# --- command line ---------------------------------------------------------------------------------

def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got '{text}'")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'")
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``hpcdl train`` (defaults of None fall back to the workload's own)."""
    w = p.add_argument_group("workload")
    w.add_argument("--workload", "-w", default="expmlp",
                   help="expmlp, mnist, cnn, or package.module:factory (default: expmlp)")
    w.add_argument("--data", default=None,
                   help="dataset path (mnist: the standard mnist.npz, or 'sklearn-digits'); "
                        "default $HPCDL_DATA")
    w.add_argument("--model", default=None, help="cnn: resnet50 (default), resnet101, vgg16, "
                                                  "mobilenetv2, densenet121, small")
    w.add_argument("--image-size", type=_positive_int, default=None, help="cnn: input resolution (224)")
    w.add_argument("--num-classes", type=_positive_int, default=None, help="cnn: classes (1000)")

    t = p.add_argument_group("training")
    t.add_argument("--steps", type=_positive_int, default=None,
                   help="optimizer steps (expmlp, mnist: 1000; cnn: warm-up + iters x batches)")
    t.add_argument("--batch-size", "-b", type=_positive_int, default=None,
                   help="per-rank batch; the global batch is this x ranks (expmlp, mnist: 100; cnn: 32)")
    t.add_argument("--lr", type=_positive_float, default=None,
                   help="learning rate at the workload's reference global batch")
    t.add_argument("--lr-scaling", choices=("linear", "none"), default="linear",
                   help="linear: lr x global batch / reference batch (Goyal et al.; = x ranks "
                        "at the reference per-rank batch); none: use --lr as is")
    t.add_argument("--lr-warmup-steps", type=_nonneg_int, default=0,
                   help="ramp the lr linearly from its unscaled value over this many steps")
    t.add_argument("--seed", type=int, default=0, help="seed of the model and the data order")
    t.add_argument("--backend", default="horovod",
                   help=f"gradient exchange: {', '.join(BACKENDS)}")
    t.add_argument("--compression", default="none", help=f"gradient compression: {', '.join(COMPRESSIONS)}")

    m = p.add_argument_group("measurement")
    m.add_argument("--warmup", type=_nonneg_int, default=None,
                   help="untimed steps at the start (default: 10, cnn: --num-warmup-batches)")
    m.add_argument("--num-warmup-batches", type=_nonneg_int, default=None, help="cnn: untimed batches (10)")
    m.add_argument("--num-batches-per-iter", type=_positive_int, default=None,
                   help="steps per timed iteration, the unit of the +- spread (10)")
    m.add_argument("--num-iters", type=_positive_int, default=None, help="cnn: timed iterations (10)")
    m.add_argument("--log-every", type=_positive_int, default=100, help="progress line every N steps")
    m.add_argument("--probes", type=_nonneg_int, default=5,
                   help="compute-only probe steps timed to split step time into compute and "
                        "exchange (horovod backend; 0 = off)")

    r = p.add_argument_group("records and checkpoints")
    r.add_argument("--results", default=None,
                   help=f"results file to append the run record to (default $HPCDL_RESULTS or {DEFAULT_RESULTS}); "
                        "'-' for none")
    r.add_argument("--study", default=None, help="study name stored in the record")
    r.add_argument("--point", default=None, help="study point id stored in the record (JSON or text)")
    r.add_argument("--declared", default=None,
                   help="the study's declarations stored in the record (JSON: scaling, study file "
                        "and hash, calibration); 'hpcdl study' passes it")
    r.add_argument("--tag", default=None, help="free text stored in the record")
    r.add_argument("--checkpoint-dir", default=None, help="where rank 0 writes checkpoints")
    r.add_argument("--checkpoint-every", type=_nonneg_int, default=0, help="checkpoint every K steps (0 = only on stop)")
    r.add_argument("--keep-checkpoints", type=_positive_int, default=2, help="checkpoints kept (2)")
    r.add_argument("--resume", nargs="?", const="latest", default=None,
                   help="continue from the newest good checkpoint in --checkpoint-dir, or from a given file")
    r.add_argument("--save-weights", default=None, help="rank 0 writes the final weights here (.npz); with '{rank}' in the path every rank does")
    r.add_argument("--max-time", type=_positive_float, default=None,
                   help="seconds of training after which to checkpoint and stop cleanly (exit 75)")
    r.add_argument("--stop-check-every", type=_positive_int, default=10,
                   help="steps between the ranks' agreement on stopping (signal, STOP file, time limit)")


def validate(opts) -> None:
    """Check the options that need no TensorFlow; raise UserError naming what to fix."""
    from .workloads import resolve
    resolve(opts.workload)
    backends = _available_backends()
    if opts.backend not in backends:
        raise UserError(f"unknown --backend '{opts.backend}': choose one of {', '.join(backends)}")
    if opts.compression not in _available_compressions():
        raise UserError(f"unknown --compression '{opts.compression}': choose one of "
                        f"{', '.join(_available_compressions())}")
    if opts.resume and not opts.checkpoint_dir and opts.resume == "latest":
        raise UserError("--resume needs --checkpoint-dir (or the path of a checkpoint file)")
    if opts.resume and opts.resume != "latest" and not Path(opts.resume).is_file():
        raise UserError(f"--resume: checkpoint file {opts.resume} does not exist")
    if opts.checkpoint_every and not opts.checkpoint_dir:
        raise UserError("--checkpoint-every needs --checkpoint-dir")
    # A missing dataset is named here, before every rank spends seconds starting TensorFlow.
    data = opts.data or os.environ.get("HPCDL_DATA")
    if opts.workload == "mnist" and data and data != "sklearn-digits" and not Path(data).is_file():
        raise UserError(f"--data {data}: no such file; give the path of the standard mnist.npz "
                        "(or HPCDL_DATA), or use --data sklearn-digits")


def _available_backends():
    try:
        from . import comm
        return tuple(getattr(comm, "BACKENDS", BACKENDS))
    except ImportError:
        return BACKENDS


def _available_compressions():
    try:
        from . import comm
        return tuple(getattr(comm, "COMPRESSIONS", COMPRESSIONS))
    except ImportError:
        return COMPRESSIONS


# --- stopping ---------------------------------------------------------------------------------------

class StopWatch:
    """Local reasons to stop early; the ranks agree on them every few steps."""

    def __init__(self, max_time: Optional[float], stop_file: Optional[Path], margin: float = 30.0):
        self.start = time.monotonic()
        self.max_time = max_time
        self.stop_file = stop_file
        self.signalled: Optional[str] = None
        self.deadline = None
        end = os.environ.get("SLURM_JOB_END_TIME")
        if end and end.isdigit():
            # Stop a margin before the job's wall-clock limit (the margin grows with the step time).
            self.deadline = int(end)
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


# --- fault injection (tests only) -------------------------------------------------------------------

def _fault_from_env(rank: int):
    """The step at which this rank fails, and how, from ``HPCDL_FAULT`` (tests only).

    ``HPCDL_FAULT="rank=1,step=37,kind=raise"``: rank 1 fails at step 37 by raising an exception
    (``raise``), killing itself with SIGKILL (``kill``), leaving with ``os._exit(3)`` (``exit``)
    or stopping in a sleep without exiting (``hang``). Unset, it is None and costs one comparison
    per step.
    """
    text = os.environ.get("HPCDL_FAULT")
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


def _inject_fault(kind: str, step: int, layout) -> None:
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


# --- helpers --------------------------------------------------------------------------------------

def _opt_variables(opt):
    v = opt.variables
    return list(v() if callable(v) else v)


def summarize(values) -> dict:
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


class _WarmupSchedule:
    """Linear ramp from ``start`` to ``target`` over ``steps`` steps (Goyal et al.)."""

    def __new__(cls, tf, start, target, steps):
        class Schedule(tf.keras.optimizers.schedules.LearningRateSchedule):
            def __call__(self, step):
                frac = tf.minimum(1.0, tf.cast(step, tf.float32) / float(steps))
                return start + (target - start) * frac

            def get_config(self):
                return {"start": start, "target": target, "steps": steps}
        return Schedule()


# --- the run --------------------------------------------------------------------------------------

def run(opts) -> int:
    """Train as ``opts`` says; return the process exit status."""
    validate(opts)
    layout = cluster.discover()
    nthreads = cluster.configure_threads(layout)
    os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", "30")
    os.environ.setdefault("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "60")
    from .comm import apply_defaults
    apply_defaults()            # Open MPI settings for ranks that share cores, before hvd.init()

    _check_horovod()
    import numpy as np
    import tensorflow as tf
    cluster.apply_tf_threads(tf, nthreads)
    try:
        import horovod.tensorflow as hvd
    except (ImportError, OSError, tf.errors.NotFoundError) as exc:
        # Typically libmpi (or another library Horovod links) does not load on this node.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot load Horovod's TensorFlow extension ({first}): load the MPI "
                        "library Horovod was built with (module load openmpi, or LD_LIBRARY_PATH), "
                        "or rebuild Horovod with scripts/setup.sh") from exc
    from . import checkpoint, records, workloads
    from .data import Sharder, even_split

    from .comm.horovod import init as init_horovod
    try:
        hvd_threads = init_horovod(hvd)    # hvd.init(); HPCDL_HOROVOD_NICE, if set, lowers its thread
    except ValueError as exc:
        raise UserError(str(exc)) from None
    layout = cluster.refine_with_horovod(layout, hvd)
    rank, size = layout.rank, layout.size
    root = rank == 0
    gpu = cluster.pin_gpu(tf, layout)

    def say(msg):              # result and progress lines: rank 0, stdout
        if root:
            print(msg, flush=True)

    tf.keras.utils.set_random_seed(opts.seed)
    wl = workloads.load(opts.workload, opts)
    model = wl.model
    variables = model.trainable_variables

    batch = opts.batch_size or wl.batch_size
    global_batch = batch * size
    is_cnn = wl.synthetic is not None
    if is_cnn:
        warmup = opts.num_warmup_batches if opts.num_warmup_batches is not None else (
            opts.warmup if opts.warmup is not None else 10)
        per_iter = opts.num_batches_per_iter or 10
        steps = opts.steps or (warmup + (opts.num_iters or 10) * per_iter)
    else:
        steps = opts.steps or wl.steps
        warmup = opts.warmup if opts.warmup is not None else min(10, steps // 10)
        per_iter = opts.num_batches_per_iter or max(1, min(10, (steps - warmup) // 10 or 1))
    if warmup >= steps:
        raise UserError(f"--warmup {warmup} leaves no timed steps of --steps {steps}")

    base_lr = opts.lr or wl.lr
    scale = global_batch / wl.ref_batch if opts.lr_scaling == "linear" else 1.0
    lr_value = base_lr * scale
    lr = (_WarmupSchedule(tf, base_lr, lr_value, opts.lr_warmup_steps)
          if opts.lr_warmup_steps and scale != 1.0 else lr_value)
    opt = wl.make_optimizer(lr)
    opt.build(variables)

    # Data: numpy arrays are sharded by index (see hpcdl.data); a tf.data dataset by shard().
    sharder = None
    dataset = None
    if isinstance(wl.train, tuple):
        x_all, y_all = wl.train
        sharder = Sharder(len(x_all), batch, rank, size, opts.seed)
    elif wl.train is not None:
        dataset = wl.train.repeat().shard(size, rank).batch(batch, drop_remainder=True)
    # else: synthetic tensors of one batch

    compression = None
    backend = None
    if opts.backend == "horovod" and opts.compression != "int8":
        compression = hvd.Compression.fp16 if opts.compression == "fp16" else hvd.Compression.none
    else:  # horovod+int8: Horovod has no int8 compressor; hpcdl.comm.horovod allgathers payloads
        from . import comm
        backend = comm.get_backend(opts.backend, compression=opts.compression)

    @tf.function
    def compute_grads(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(wl.loss(y, model(x, training=True)))
        return loss, tape.gradient(loss, variables)

    @tf.function
    def hvd_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(wl.loss(y, model(x, training=True)))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return loss

    @tf.function
    def apply_grads(grads):
        opt.apply_gradients(zip(grads, variables))

    def flat_step(x, y):
        """Compute, exchange one fused flat buffer through the backend, apply; timed in parts."""
        t0 = time.perf_counter()
        loss, grads = compute_grads(x, y)
        flat = np.concatenate([g.numpy().ravel() for g in grads])
        t1 = time.perf_counter()
        avg = backend.allreduce_mean(flat)
        t2 = time.perf_counter()
        out, off = [], 0
        for v in variables:
            n = int(np.prod(v.shape))
            out.append(tf.constant(avg[off:off + n].reshape(v.shape), dtype=v.dtype))
            off += n
        apply_grads(out)
        return loss, t1 - t0, t2 - t1

    def get_batch(step):
        if sharder is not None:
            idx = sharder.indices(step)
            return tf.constant(x_all[idx]), tf.constant(y_all[idx])
        if dataset is not None:
            return next(it)
        return wl.synthetic

    def broadcast_state():
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(_opt_variables(opt), root_rank=0)

    # --- resume -------------------------------------------------------------------------------
    start_step = 0
    resumed_from = None
    ckpt_dir = Path(opts.checkpoint_dir) if opts.checkpoint_dir else None
    if opts.resume:
        found = None
        if root:
            if opts.resume == "latest":
                found = checkpoint.latest(ckpt_dir, warn=lambda m: cluster.log(m, layout))
            else:
                try:
                    found = (Path(opts.resume),) + checkpoint.load(opts.resume)
                except checkpoint.CheckpointError as exc:
                    found = str(exc)
        found_info = hvd.broadcast_object(
            None if found is None else (found if isinstance(found, str) else
                                        (str(found[0]), found[1]["step"],
                                         found[1].get("meta", {}).get("rng"))), root_rank=0)
        if isinstance(found_info, str):
            raise UserError(found_info)
        if found_info is not None:
            if root:
                _, header, arrays = found
                _restore(model, opt, arrays, header)
            start_step = found_info[1]
            if (found_info[2] or {}).get("tf_global") is not None:
                # Every rank continues the random stream where the checkpointed run left it.
                tf.random.get_global_generator().reset(
                    np.asarray(found_info[2]["tf_global"], dtype=np.int64))
            resumed_from = {"path": found_info[0], "step": start_step}
            broadcast_state()
            say(f"Resumed from {found_info[0]} at step {start_step}")
        else:
            say(f"No checkpoint in {ckpt_dir}: starting from step 0")
    if dataset is not None:
        it = iter(dataset.skip(start_step))

    stop_file = (ckpt_dir / "STOP") if ckpt_dir else None
    if os.environ.get("HPCDL_STOP_FILE"):
        stop_file = Path(os.environ["HPCDL_STOP_FILE"])
    watch = StopWatch(opts.max_time, stop_file)
    watch.install()

    def save_checkpoint(step):
        if not root or ckpt_dir is None:
            return None
        arrays = {f"model/{i}": v.numpy() for i, v in enumerate(model.variables)}
        arrays.update({f"opt/{i}": v.numpy() for i, v in enumerate(_opt_variables(opt))})
        meta = {"workload": opts.workload, "seed": opts.seed, "size": size, "batch_size": batch,
                "global_batch": global_batch, "samples_seen": step * global_batch,
                "data_position": {"step": step, "epoch": (step // sharder.steps_per_epoch)
                                  if sharder else None},
                "rng": {"tf_global": tf.random.get_global_generator().state.numpy().tolist()}}
        return checkpoint.save(ckpt_dir, step, arrays, meta, keep=opts.keep_checkpoints)

    header = (f"# hpcdl train: workload={wl.name} ranks={size} nodes={layout.num_nodes} "
              f"batch={batch}/rank global_batch={global_batch} steps={steps} lr={lr_value:g} "
              f"backend={opts.backend} compression={opts.compression} threads/rank={nthreads}"
              + (f" gpu={gpu}" if gpu is not None else ""))
    say(header)
    if is_cnn:
        say(f"Model: {wl.info['model']}, image size {wl.info['image_size']}, "
            f"batch size {batch} per rank, {wl.info['params']:,} parameters")

    # --- the loop -----------------------------------------------------------------------------
    step_times, comp_times, exch_times, probe_times = [], [], [], []
    curve = []
    timed_steps_planned = steps - max(warmup, start_step)
    probe_at = set()
    if backend is None and opts.probes and timed_steps_planned > 0:
        first_timed = max(warmup, start_step)
        k = min(opts.probes, timed_steps_planned)
        probe_at = {first_timed + (i * timed_steps_planned) // k for i in range(k)}
    t_run = time.perf_counter()
    step = start_step
    loss_val = float("nan")
    first_loss = None
    interrupted = None
    fault = _fault_from_env(rank)
    while step < steps:
        if fault is not None and step == fault[0]:
            _inject_fault(fault[1], step, layout)
        x, y = get_batch(step)
        if step in probe_at:
            t0 = time.perf_counter()
            _, g = compute_grads(x, y)
            _ = g[-1].numpy()
            probe_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        if backend is None:
            loss = hvd_step(x, y)
            loss_val = float(loss)
            c = e = None
        else:
            loss, c, e = flat_step(x, y)
            loss_val = float(loss)
        dt = time.perf_counter() - t0
        if step == start_step and resumed_from is None:
            broadcast_state()
        if first_loss is None:
            first_loss = loss_val
        step += 1
        if step > warmup and step > start_step + (1 if resumed_from else 0):
            step_times.append(dt)
            if c is not None:
                comp_times.append(c)
                exch_times.append(e)
        watch.step_time = dt
        if step % opts.log_every == 0 or step == steps:
            avg = float(hvd.allreduce(tf.constant(loss_val), op=hvd.Average, name="hpcdl.loss"))
            curve.append([step, avg])
            say(f"Step {step}/{steps}: loss {avg:.6g} ({time.perf_counter() - t_run:.1f} s)")
        if ckpt_dir is not None and opts.checkpoint_every and step % opts.checkpoint_every == 0 and step < steps:
            save_checkpoint(step)
        if step % opts.stop_check_every == 0 and step < steps:
            local = 1.0 if watch.reason() else 0.0
            if float(hvd.allreduce(tf.constant(local), op=hvd.Max, name="hpcdl.stop")) > 0:
                interrupted = watch.reason() or "another rank asked to stop"
                break
    wall = time.perf_counter() - t_run

    if interrupted:
        path = save_checkpoint(step) if ckpt_dir is not None else None
        if path is not None:
            # The launcher's exit status may not be ours: when the first rank exits 75,
            # srun --kill-on-bad-exit terminates the others, and srun reports 143. The job script
            # reads this marker, written once the checkpoint is durable, to know the stop was clean.
            checkpoint.mark_interrupted(ckpt_dir, step, interrupted)
        # Every rank waits for rank 0's checkpoint: a launcher that ends the job when the first
        # rank exits (mpirun, srun --kill-on-bad-exit) must not kill rank 0 in mid-write.
        path = hvd.broadcast_object(None if path is None else str(path), root_rank=0, name="hpcdl.ckpt")
        msg = (f"Stopped at step {step}/{steps} ({interrupted})"
               + (f"; checkpoint {path}" if path else ("; checkpoint written by rank 0" if ckpt_dir else
                                                        "; no --checkpoint-dir, progress not saved")))
        say(msg)
        raise Interrupted(msg, path)

    # --- results --------------------------------------------------------------------------------
    # Step times of the slowest rank (steps are synchronous; the max is the honest figure).
    n_timed = len(step_times)
    n_min = int(hvd.allreduce(tf.constant(n_timed, tf.int64), op=hvd.Min, name="hpcdl.ntimed"))
    times = np.asarray(step_times[:n_min], dtype=np.float64)
    if n_min:
        times = hvd.allreduce(tf.constant(times), op=hvd.Max, name="hpcdl.times").numpy()
    iters = [times[i:i + per_iter] for i in range(0, len(times) - per_iter + 1, per_iter)] or (
        [times] if len(times) else [])
    per_rank_rates = [batch * len(t) / float(t.sum()) for t in iters if t.sum() > 0]
    rate = summarize(per_rank_rates)
    total_rate = {k: (v * size if k in ("mean", "std", "ci95", "min", "median", "p99", "max") else v)
                  for k, v in rate.items()}
    step_stats = summarize(times)

    final_loss = float(hvd.allreduce(tf.constant(loss_val), op=hvd.Average, name="hpcdl.final"))
    metrics = {"final_loss": final_loss, "first_loss": first_loss}
    if wl.test is not None:
        xt, yt = wl.test
        sl = even_split(len(xt), rank, size)
        pred = model(tf.constant(xt[sl]), training=False)
        loss_sum = float(tf.reduce_mean(wl.loss(yt[sl], pred))) * len(xt[sl])   # mean x count = sum
        sums = [loss_sum, float(len(xt[sl]))]
        if wl.accuracy:
            sums.append(float(np.sum(np.argmax(pred.numpy(), axis=1) == yt[sl])))
        tot = hvd.allreduce(tf.constant(sums, tf.float64), op=hvd.Sum, name="hpcdl.eval").numpy()
        metrics["test_loss"] = tot[0] / tot[1]
        if wl.accuracy:
            metrics["test_accuracy"] = tot[2] / tot[1]

    # Replicas must be identical: compare a digest of every rank's weights.
    flat_w = np.concatenate([v.numpy().ravel().astype(np.float32) for v in model.variables])
    digest = _digest(flat_w)
    digests = hvd.allgather_object(digest)
    hosts = hvd.allgather_object(layout.host)

    if probe_times:
        ptimes = hvd.allreduce(tf.constant(np.asarray(probe_times, dtype=np.float64)), op=hvd.Max,
                               name="hpcdl.probes").numpy()
        split = step_split(size, step_stats.get("median"), "probe", float(np.median(ptimes)))
        split["probes"] = len(ptimes)
    elif comp_times:
        c = hvd.allreduce(tf.constant(np.asarray([np.median(comp_times), np.median(exch_times)])),
                          op=hvd.Max, name="hpcdl.split").numpy()
        split = step_split(size, step_stats.get("median"), "timed", float(c[0]), float(c[1]))
    else:
        split = {"method": "none"}

    if opts.save_weights and (root or "{rank}" in opts.save_weights):
        wpath = Path(opts.save_weights.replace("{rank}", str(rank)))
        wpath.parent.mkdir(parents=True, exist_ok=True)
        np.savez(wpath, **{f"w{i}": v.numpy() for i, v in enumerate(model.variables)})

    unit = wl.unit
    if root:
        if wl.synthetic is not None:
            print(f"Img/sec per rank: {rate.get('mean', 0):.1f} +-{rate.get('ci95', 0):.1f}")
        print(f"Total {unit}/sec on {size} rank(s): {total_rate.get('mean', 0):.1f} "
              f"+-{total_rate.get('ci95', 0):.1f}")
        print(f"Step time: median {step_stats.get('median', 0) * 1e3:.3f} ms, "
              f"p99 {step_stats.get('p99', 0) * 1e3:.3f} ms over {step_stats['n']} timed steps"
              + (f"; {split['text']}" if split.get("text") else ""))
        print(f"Final loss: {final_loss:.6g}")
        if "test_accuracy" in metrics:
            print(f"Test accuracy: {metrics['test_accuracy']:.4f}")
        print(f"Replicas identical: {'yes' if len(set(digests)) == 1 else 'NO'} ({digest[:12]})")

        record = {
            "schema": records.SCHEMA, "kind": "train", "study": opts.study,
            "point": _parse_point(opts.point), "tag": opts.tag, "time": records.now_iso(),
            "declared": _parse_point(opts.declared),
            "status": "ok",
            "params": {"workload": wl.name, "batch_size": batch, "global_batch": global_batch,
                       "steps": steps, "warmup": warmup, "batches_per_iter": per_iter,
                       "lr": lr_value, "base_lr": base_lr, "lr_scaling": opts.lr_scaling,
                       "lr_warmup_steps": opts.lr_warmup_steps, "seed": opts.seed,
                       "backend": opts.backend, "compression": opts.compression,
                       "threads_per_rank": nthreads, **_workload_params(wl, opts)},
            "layout": {"size": size, "nodes": layout.num_nodes, "ranks_per_node": layout.local_size,
                       "hosts": sorted(set(hosts))},
            "metrics": {
                "throughput": {**total_rate, "unit": f"{unit}/s"},
                "throughput_per_rank": {**rate, "unit": f"{unit}/s"},
                "step_time": step_stats,
                "split": split,
                "wall_time_s": wall,
                "loss_curve": curve,
                **metrics,
            },
            "gradient_bytes": int(sum(int(np.prod(v.shape)) for v in variables) * 4),
            "replicas_identical": len(set(digests)) == 1,
            "weights_digest": digest,
            "resumed_from": resumed_from,
            "manifest": records.manifest(layout, hosts=hosts,
                                         extra={"horovod_build": _hvd_build(hvd),
                                                "horovod_thread": hvd_threads}),
        }
        path = opts.results or os.environ.get("HPCDL_RESULTS") or DEFAULT_RESULTS
        if path != "-":
            records.append(path, record)
            print(f"Record appended to {path}")
    return 0


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


def _check_horovod() -> None:
    """Raise UserError, before TensorFlow starts, when Horovod lacks its TensorFlow extension.

    Only looks at files: loading Horovod's library before TensorFlow (as ``hpcdl info`` does)
    makes TensorFlow's own import crash in the same process.
    """
    import glob
    import importlib.util
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("Horovod is not installed in this Python: run scripts/setup.sh, or pip "
                        "install horovod with HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1")
    root = list(spec.submodule_search_locations)[0]
    if not glob.glob(os.path.join(root, "tensorflow", "mpi_lib*.so")):
        raise UserError(f"Horovod at {root} is built without TensorFlow: rebuild it with "
                        "HOROVOD_WITH_TENSORFLOW=1 (scripts/setup.sh does)")


def _restore(model, opt, arrays, header):
    mv = model.variables
    ov = _opt_variables(opt)
    n_model = sum(1 for k in arrays if k.startswith("model/"))
    n_opt = sum(1 for k in arrays if k.startswith("opt/"))
    if n_model != len(mv) or n_opt != len(ov):
        raise UserError(f"checkpoint of step {header['step']} does not fit this model: it holds "
                        f"{n_model} model and {n_opt} optimizer arrays, the model has {len(mv)} and "
                        f"{len(ov)} (was it written by another workload?)")
    for i, v in enumerate(mv):
        v.assign(arrays[f"model/{i}"])
    for i, v in enumerate(ov):
        v.assign(arrays[f"opt/{i}"])


def _digest(arr) -> str:
    import hashlib
    return hashlib.sha256(arr.tobytes()).hexdigest()


def _parse_point(text):
    if text is None:
        return None
    import json
    try:
        return json.loads(text)
    except ValueError:
        return text


def _workload_params(wl, opts) -> dict:
    out = {}
    if wl.synthetic is not None:
        out.update(model=wl.info.get("model"), image_size=wl.info.get("image_size"),
                   num_classes=wl.info.get("classes"), params=wl.info.get("params"))
    if opts.data:
        out["data"] = opts.data
    return out


def _hvd_build(hvd) -> dict:
    return {"tensorflow": True, "mpi": bool(hvd.mpi_built()), "gloo": bool(hvd.gloo_built()),
            "nccl": bool(hvd.nccl_built()), "mpi_enabled": bool(hvd.mpi_enabled()),
            "gloo_enabled": bool(hvd.gloo_enabled())}


def main(opts) -> int:
    try:
        return run(opts)
    except Interrupted:
        return EXIT_INTERRUPTED
