"""Train a workload data-parallel across MPI ranks with Horovod (or another gradient exchange).

Run as ``mpirun -np N hpcdl train ...`` or ``srun hpcdl train ...``. Every rank builds the same
model from the same seed, trains on its own shard of each global batch, and averages gradients
as ``hvd.DistributedGradientTape`` does (or through another backend of ``hpcdl.comm``). Model and
optimizer state are broadcast from rank 0 after the first step. Rank 0 prints the result lines
and appends one record to the results file. The pieces are in :mod:`hpcdl.trainer`.

This module's top level imports only the standard library and ``hpcdl.comm``'s names: TensorFlow
and Horovod are imported inside :func:`run`, after the thread counts for this rank are exported.

The module runs past 400 lines on purpose: the options, their checks and the run's three shapes
(data parallel, the asynchronous parameter server of :mod:`hpcdl.asyncps`, the pipeline of
:mod:`hpcdl.pipeline`) make the one record ``hpcdl train`` writes, and read best beside it.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from . import asyncps, box, cluster, pipeline
from .comm import BACKENDS, COMPRESSIONS
from .errors import EXIT_INTERRUPTED, Interrupted, UserError

DEFAULT_RESULTS = "results/runs.jsonl"
TRAIN_BACKENDS = BACKENDS + (asyncps.NAME,)     # the exchanges and the asynchronous server


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


TARGET_METRICS = {"accuracy": "test_accuracy", "loss": "test_loss"}   # accuracy >=, loss <=


def _target(text: str):
    """``METRIC:VALUE`` of ``--target``: accuracy reached at or above VALUE, loss at or below."""
    metric, _, value = text.partition(":")
    if metric not in TARGET_METRICS or not value:
        raise argparse.ArgumentTypeError(f"expected accuracy:VALUE or loss:VALUE, got '{text}'")
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number after '{metric}:', got '{value}'")
    if math.isnan(v) or math.isinf(v):
        raise argparse.ArgumentTypeError(f"the target must be a finite number, got {value}")
    return metric, v


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'")
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _slow_rank(text: str):
    """``--slow-rank R:FACTOR``: rank R computes FACTOR (>= 1) times as long; ``R:Dms``: rank R
    spends D more milliseconds per step. (rank, factor or None, seconds or None)."""
    rank, _, value = text.partition(":")
    ms = value.endswith("ms")
    try:
        r, f = int(rank), float(value[:-2] if ms else value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected RANK:FACTOR or RANK:MSms such as 1:2 or "
                                         f"1:3ms, got '{text}'")
    if r < 0 or math.isinf(f) or not (f >= 0 if ms else f >= 1):
        raise argparse.ArgumentTypeError(f"expected a rank >= 0 and a factor >= 1 or a delay "
                                         f">= 0 ms, got '{text}'")
    return (r, None, f / 1e3) if ms else (r, f, None)


def _add_other_systems(p: argparse.ArgumentParser) -> None:
    """Options of the asynchronous parameter server, of the pipeline, and a straggler."""
    o = p.add_argument_group("asynchronous parameter server, model parallelism, stragglers")
    o.add_argument("--staleness", type=asyncps.staleness_arg, default=None, metavar="S",
                   help=f"{asyncps.NAME}: a worker more than S updates ahead of the slowest waits "
                        "(stale-synchronous parallel); 0: the server averages one push of every "
                        "worker per update (the synchronous parameter server); inf (default): "
                        "no bound, Downpour SGD")
    o.add_argument("--ps-dedicated", action="store_true",
                   help=f"{asyncps.NAME}: rank 0 only serves the parameters (default: it trains too, "
                        "its server in a thread)")
    o.add_argument("--slow-rank", type=_slow_rank, default=None, metavar="R:FACTOR",
                   help="a straggler on purpose: rank R's compute takes FACTOR times as long "
                        "(it sleeps FACTOR-1 times its compute time per step), or with R:Dms "
                        "D milliseconds longer")
    o.add_argument("--parallel", choices=pipeline.PARALLEL, default="data",
                   help="data: every rank a replica (default); pipeline: the model's layers cut "
                        "into --stages stages, one per rank, GPipe's micro-batches")
    o.add_argument("--stages", type=_positive_int, default=None,
                   help="pipeline: stages, one per rank (default: the ranks)")
    o.add_argument("--micro-batches", type=_positive_int, default=4,
                   help="pipeline: micro-batches per step, dividing the batch (4)")
    o.add_argument("--cut", choices=("time", "layers"), default="time",
                   help="pipeline: where the stages begin: time (default) times every stage a cut "
                        "could make on a micro-batch and takes the cut whose slowest stage is "
                        "fastest; layers: as many layers in each stage")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``hpcdl train`` (defaults of None fall back to the workload's own)."""
    w = p.add_argument_group("workload")
    w.add_argument("--workload", "-w", default="expmlp",
                   help="expmlp, mnist, cnn, or package.module:factory (default: expmlp)")
    w.add_argument("--data", default=None,
                   help="dataset path (mnist: the standard mnist.npz, 'mnist-5k' for 5,000 real "
                        "MNIST digits, or 'sklearn-digits'); "
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
                   help=f"gradient exchange: {', '.join(TRAIN_BACKENDS)} ({asyncps.NAME}: "
                        "asynchronous parameter server at rank 0)")
    t.add_argument("--compression", default="none", help=f"gradient compression: {', '.join(COMPRESSIONS)}")
    _add_other_systems(p)

    m = p.add_argument_group("measurement")
    m.add_argument("--warmup", type=_nonneg_int, default=None,
                   help="untimed steps at the start (default: 10, cnn: --num-warmup-batches)")
    m.add_argument("--num-warmup-batches", type=_nonneg_int, default=None, help="cnn: untimed batches (10)")
    m.add_argument("--num-batches-per-iter", type=_positive_int, default=None,
                   help="steps per timed iteration, the unit of the +- spread (10)")
    m.add_argument("--num-iters", type=_positive_int, default=None, help="cnn: timed iterations (10)")
    m.add_argument("--log-every", type=_positive_int, default=100, help="progress line every N steps")
    m.add_argument("--eval-every", type=_nonneg_int, default=0,
                   help="evaluate the held-out metric (sharded over the ranks) every N samples "
                        "seen, recorded with the step and the time (0: at the end only; with "
                        "--target: every --log-every steps)")
    m.add_argument("--target", type=_target, default=None, metavar="METRIC:VALUE",
                   help="accuracy:V or loss:V on the held-out set: training ends at the first "
                        "evaluation that reaches it, and the record has the steps, samples and "
                        "time it took, or that --steps did not reach it")
    m.add_argument("--probes", type=_nonneg_int, default=5,
                   help="steps preceded by a probe of the compute alone and, on several ranks, "
                        "the exchange alone, outside the timing (horovod none/fp16; 0 = off)")

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
    r.add_argument("--timeline", default=None, metavar="PATH",
                   help="Horovod's timeline of the timed steps to PATH (rank 0), summarised in "
                        "the record: ms per step negotiating, in the allreduce, copying to and "
                        "from the fusion buffer")
    r.add_argument("--checkpoint-dir", default=None, help="where rank 0 writes checkpoints")
    r.add_argument("--checkpoint-every", type=_nonneg_int, default=0, help="checkpoint every K steps (0 = only on stop)")
    r.add_argument("--keep-checkpoints", type=_positive_int, default=2, help="checkpoints kept (2)")
    r.add_argument("--resume", nargs="?", const="latest", default=None,
                   help="continue from the newest good checkpoint in --checkpoint-dir, or from a given file")
    r.add_argument("--save-weights", default=None, help="rank 0 writes the final weights here (.npz); with '{rank}' in the path every rank does")
    r.add_argument("--max-time", type=_positive_float, default=None,
                   help="seconds of training after which to checkpoint and stop cleanly (exit 75)")
    r.add_argument("--stop-check-every", type=_positive_int, default=10,
                   help="fewest steps between the ranks' agreements on stopping (signal, STOP file, "
                        "time limit); short steps agree about once a second (10)")


def validate(opts) -> None:
    """Check the options that need no TensorFlow; raise UserError naming what to fix."""
    from .workloads import resolve
    resolve(opts.workload)
    if opts.backend not in TRAIN_BACKENDS:
        raise UserError(f"unknown --backend '{opts.backend}': choose one of "
                        f"{', '.join(TRAIN_BACKENDS)}")
    _validate_async(opts)
    _validate_pipeline(opts)
    if opts.compression not in COMPRESSIONS:
        raise UserError(f"unknown --compression '{opts.compression}': choose one of "
                        f"{', '.join(COMPRESSIONS)}")
    if opts.resume and not opts.checkpoint_dir and opts.resume == "latest":
        raise UserError("--resume needs --checkpoint-dir (or the path of a checkpoint file)")
    if opts.resume and opts.resume != "latest" and not Path(opts.resume).is_file():
        raise UserError(f"--resume: checkpoint file {opts.resume} does not exist")
    if opts.checkpoint_every and not opts.checkpoint_dir:
        raise UserError("--checkpoint-every needs --checkpoint-dir")
    # A missing dataset is named here, before every rank spends seconds starting TensorFlow.
    data = opts.data or cluster.setting("HPCDL_DATA")
    if opts.workload == "mnist" and data and data not in ("mnist-5k", "sklearn-digits") \
            and not Path(data).is_file():
        raise UserError(f"--data {data}: no such file; give the path of the standard mnist.npz "
                        "(or HPCDL_DATA), or use --data mnist-5k or --data sklearn-digits")


def _validate_pipeline(opts) -> None:
    if opts.parallel != "pipeline":
        if opts.stages is not None:
            raise UserError("--stages is an option of --parallel pipeline")
        return
    if opts.backend != "horovod" or opts.compression != "none":
        raise UserError("--parallel pipeline sends activations between stages, not gradients: "
                        "--backend and --compression do not apply (leave them out)")
    for given, name in ((opts.timeline, "--timeline"), (opts.slow_rank, "--slow-rank")):
        if given:
            raise UserError(f"{name} is not offered with --parallel pipeline yet")


def _validate_async(opts) -> None:
    if opts.backend != asyncps.NAME:
        if opts.staleness is not None or opts.ps_dedicated:
            raise UserError(f"--staleness and --ps-dedicated are options of --backend "
                            f"{asyncps.NAME}")
        return
    if opts.compression != "none":
        raise UserError(f"--backend {asyncps.NAME} pushes and pulls float32: --compression "
                        f"{opts.compression} is not offered with it")
    if opts.timeline:
        raise UserError(f"--timeline records Horovod's allreduces, and --backend {asyncps.NAME} "
                        "makes none while training")


# --- the run --------------------------------------------------------------------------------------

def run(opts) -> int:
    """Train as ``opts`` says; return the process exit status. Horovod's order: threads and
    hvd.init(), pin the GPU, build the model, wrap the gradients' exchange, broadcast from rank 0
    after the first step, scale the learning rate with the global batch."""
    validate(opts)
    from . import trainer, trainloop, workloads
    rt = trainer.start(timeline=bool(opts.timeline))
    results = _results_path(opts)
    if rt.root and results != "-":
        from . import records
        records.check_clean(results)          # results/ holds what committed code made
    rt.tf.keras.utils.set_random_seed(opts.seed)
    wl = workloads.load(opts.workload, opts)
    _check_evaluation(wl, opts)
    if opts.backend == asyncps.NAME:
        return _run_async(opts, rt, wl, results)
    if opts.parallel == "pipeline":
        return _run_pipeline(opts, rt, wl, results)
    plan = trainer.make_plan(opts, wl, rt.size)
    rep = trainer.Replica(rt, wl, plan, opts)
    ckpt_dir = Path(opts.checkpoint_dir) if opts.checkpoint_dir else None
    start, resumed = trainer.resume(rep, opts, ckpt_dir)
    rep.seek(start)
    watch = trainloop.StopWatch(opts.max_time, _stop_file(ckpt_dir))
    watch.install()
    rt.say(_header(rt, wl, plan, opts))
    loop = trainloop.run_loop(rep, opts, start, resumed is not None, watch, ckpt_dir)
    if loop.stopped:
        _stop(rep, loop, ckpt_dir, opts)
    figures = trainloop.summarize(rep, loop)
    if opts.save_weights and (rt.root or "{rank}" in opts.save_weights):
        _save_weights(rep, opts.save_weights.replace("{rank}", str(rt.rank)))
    if rt.root:
        _print_results(wl, rt.size, figures)
        record = _record(rep, opts, figures, resumed)
        if results != "-":
            from . import records
            records.append(results, record)
            print(f"Record appended to {results}")
    return 0


def _run_async(opts, rt, wl, results) -> int:
    """Train through the asynchronous parameter server (:mod:`hpcdl.asyncps`)."""
    from . import trainer, trainloop
    workers = asyncps.workers_of(rt.size, opts.ps_dedicated)
    plan = trainer.make_plan(opts, wl, len(workers))
    index = workers.index(rt.rank) if rt.rank in workers else 0
    rep = trainer.Replica(rt, wl, plan, opts, shard=(index, len(workers)))
    rep.seek(0)
    ckpt_dir = Path(opts.checkpoint_dir) if opts.checkpoint_dir else None
    watch = trainloop.StopWatch(opts.max_time, _stop_file(ckpt_dir))
    watch.install()
    rt.say(_header(rt, wl, plan, opts))
    found = asyncps.find_checkpoint(rt, opts, ckpt_dir)
    loop = asyncps.run(rep, opts, watch, workers, opts.staleness, ckpt_dir, found)
    if loop.stopped:
        msg = (f"Stopped after {loop.step} updates ({loop.stopped}); "
               + (f"checkpoint {loop.checkpoint}" if loop.checkpoint else
                  "no --checkpoint-dir, progress not saved"))
        rt.say(msg)
        raise Interrupted(msg, loop.checkpoint)
    figures = asyncps.summarize(rep, loop, workers, opts.staleness, opts.ps_dedicated)
    if opts.save_weights and (rt.root or "{rank}" in opts.save_weights):
        _save_weights(rep, opts.save_weights.replace("{rank}", str(rt.rank)))
    if rt.root:
        _print_results(wl, len(workers), figures)
        record = _record(rep, opts, figures, {"path": str(found[0]), "step": found[1]["step"]}
                         if found else None)
        if results != "-":
            from . import records
            records.append(results, record)
            print(f"Record appended to {results}")
    return 0


def _run_pipeline(opts, rt, wl, results) -> int:
    """Train the model cut into stages, one per rank (:mod:`hpcdl.pipeline`)."""
    from . import trainer, trainloop
    stages = opts.stages or rt.size
    plan = trainer.make_plan(opts, wl, 1)           # one model, one batch per step
    rep = trainer.Replica(rt, wl, plan, opts, shard=(0, 1))
    rep.seek(0)
    ckpt_dir = Path(opts.checkpoint_dir) if opts.checkpoint_dir else None
    watch = trainloop.StopWatch(opts.max_time, _stop_file(ckpt_dir))
    watch.install()
    rt.say(_header(rt, wl, plan, opts))
    stage, loop = pipeline.run(rep, opts, watch, stages, opts.micro_batches, ckpt_dir)
    if loop.stopped:
        msg = (f"Stopped at step {loop.step}/{plan.steps} ({loop.stopped}); "
               + (f"checkpoint {loop.checkpoint}" if loop.checkpoint else
                  "no --checkpoint-dir, progress not saved"))
        rt.say(msg)
        raise Interrupted(msg, loop.checkpoint)
    figures = pipeline.summarize(rep, stage, loop)
    if opts.save_weights and rt.root:
        _save_weights(rep, opts.save_weights.replace("{rank}", str(rt.rank)))
    if rt.root:
        _print_results(wl, rt.size, figures)
        record = _record(rep, opts, figures, None)
        if results != "-":
            from . import records
            records.append(results, record)
            print(f"Record appended to {results}")
    return 0


def _check_evaluation(wl, opts) -> None:
    if (opts.target or opts.eval_every) and wl.test is None:
        raise UserError(f"--target and --eval-every need a held-out set, and workload {wl.name} "
                        "has none (a factory can return one as 'test')")
    if opts.target and opts.target[0] == "accuracy" and not wl.accuracy:
        raise UserError(f"--target accuracy:…: workload {wl.name} reports no accuracy; use "
                        "--target loss:VALUE")


def _results_path(opts) -> str:
    return opts.results or cluster.setting("HPCDL_RESULTS") or DEFAULT_RESULTS


def _stop_file(ckpt_dir):
    given = cluster.setting("HPCDL_STOP_FILE")
    return Path(given) if given else (ckpt_dir / "STOP" if ckpt_dir else None)


def _header(rt, wl, plan, opts) -> str:
    text = (f"# hpcdl train: workload={wl.name} ranks={rt.size} nodes={rt.layout.num_nodes} "
            f"batch={plan.batch}/rank global_batch={plan.global_batch} steps={plan.steps} "
            f"lr={plan.lr:g} backend={opts.backend} compression={opts.compression} "
            f"threads/rank={rt.threads}" + (f" gpu={rt.gpu}" if rt.gpu is not None else ""))
    if opts.parallel == "pipeline":
        text += (f"\nPipeline: {opts.stages or rt.size} stages, one per rank, "
                 f"{opts.micro_batches} micro-batches of {plan.batch // opts.micro_batches}")
    if opts.backend == asyncps.NAME:
        text += (f"\nParameter server at rank 0{' (dedicated)' if opts.ps_dedicated else ''}, "
                 f"staleness bound {asyncps.staleness_label(opts.staleness)}, "
                 f"{plan.steps} steps per worker")
    if wl.synthetic is not None:
        text += (f"\nModel: {wl.info['model']}, image size {wl.info['image_size']}, "
                 f"batch size {plan.batch} per rank, {wl.info['params']:,} parameters")
    return text


def _stop(rep, loop, ckpt_dir, opts) -> None:
    """Checkpoint at the step where the ranks agreed to stop, and raise Interrupted (exit 75)."""
    from . import checkpoint, trainer
    rt = rep.rt
    path = trainer.save_checkpoint(rep, ckpt_dir, loop.step, opts) if ckpt_dir else None
    if path is not None:
        # The launcher's exit status may not be ours: when the first rank exits 75,
        # srun --kill-on-bad-exit terminates the others, and srun reports 143. The job script
        # reads this marker, written once the checkpoint is durable, to know the stop was clean.
        checkpoint.mark_interrupted(ckpt_dir, loop.step, loop.stopped)
    # Every rank waits for rank 0's checkpoint: a launcher that ends the job when the first
    # rank exits (mpirun, srun --kill-on-bad-exit) must not kill rank 0 in mid-write.
    path = rt.hvd.broadcast_object(None if path is None else str(path), root_rank=0,
                                   name="hpcdl.ckpt")
    msg = (f"Stopped at step {loop.step}/{rep.plan.steps} ({loop.stopped})"
           + (f"; checkpoint {path}" if path else ("; checkpoint written by rank 0" if ckpt_dir else
                                                    "; no --checkpoint-dir, progress not saved")))
    rt.say(msg)
    raise Interrupted(msg, path)


def _save_weights(rep, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rep.np.savez(path, **{f"w{i}": v.numpy() for i, v in enumerate(rep.model.variables)})


def _print_results(wl, size, f) -> None:
    rate, total, step, split = f["throughput_per_rank"], f["throughput"], f["step_time"], f["split"]
    if wl.synthetic is not None:
        print(f"Img/sec per rank: {rate.get('mean', 0):.1f} +-{rate.get('ci95', 0):.1f}")
    print(f"Total {wl.unit}/sec on {size} rank(s): {total.get('mean', 0):.1f} "
          f"+-{total.get('ci95', 0):.1f}")
    print(f"Step time: median {step.get('median', 0) * 1e3:.3f} ms, "
          f"p99 {step.get('p99', 0) * 1e3:.3f} ms over {step['n']} timed steps"
          + (f"; {split['text']}" if split.get("text") else ""))
    print(f"Final loss: {f['final_loss']:.6g}")
    if "test_accuracy" in f:
        print(f"Test accuracy: {f['test_accuracy']:.4f}")
    if f.get("target"):
        print(target_text(f["target"]))
    a = f.get("async")
    if a:
        st = a["staleness"]
        print(f"Updates: {a['updates']} ({a['updates_per_s']:.1f}/s) of {a['samples_per_update']} "
              f"samples; staleness mean {st.get('mean', 0):.2f}, p95 {st.get('p95', 0)}, "
              f"max {st.get('max', 0)}")
    pipe = f.get("pipeline")
    if pipe:
        bytes_ = pipe["bytes_per_step"]
        print(f"Pipeline: bubble {pipe['bubble'] * 100:.1f}% measured, "
              f"{pipe['bubble_theory'] * 100:.1f}% (K-1)/(M+K-1); {bytes_:,} bytes of "
              f"activations per step, {pipe['ring_bytes_per_rank_at_k']:,.0f} per rank for a "
              f"ring allreduce of the gradients")
        print(f"Model digest: {f['digests'][0][:12]}")
        return
    same = len(set(f["digests"])) == 1
    print(f"Replicas identical: {'yes' if same else 'NO'} ({f['digests'][0][:12]})")


def target_text(t: dict) -> str:
    """One line on a run's target: when it was reached, or that it was not."""
    goal = f"{t['metric']} {'>=' if t['metric'] == 'accuracy' else '<='} {t['value']:g}"
    if t["reached"]:
        return (f"Target {goal} reached at step {t['steps']} ({t['samples']:,} samples, "
                f"{t['time_s']:.2f} s of training)")
    return f"Target {goal} not reached in {t['steps']} steps"


def _record(rep, opts, f, resumed) -> dict:
    from . import records
    rt, plan, wl = rep.rt, rep.plan, rep.wl
    metrics = {k: f[k] for k in ("step_time", "split", "wall_time_s", "loss_curve", "final_loss",
                                 "first_loss") if k in f}
    metrics.update({k: f[k] for k in ("test_loss", "test_accuracy", "evals", "target", "ranks",
                                      "timeline", "async", "pipeline") if k in f})
    metrics["throughput"] = {**f["throughput"], "unit": f"{wl.unit}/s"}
    metrics["throughput_per_rank"] = {**f["throughput_per_rank"], "unit": f"{wl.unit}/s"}
    hvd = rt.hvd
    return {
        "schema": records.SCHEMA, "kind": "train", "study": opts.study,
        "point": records.json_or_text(opts.point),
        "declared": records.json_or_text(opts.declared), "tag": opts.tag,
        "time": records.now_iso(), "status": "ok",
        "params": {"workload": wl.name, "batch_size": plan.batch, "global_batch": plan.global_batch,
                   "steps": plan.steps, "warmup": plan.warmup, "batches_per_iter": plan.per_iter,
                   "lr": plan.lr, "base_lr": plan.base_lr, "lr_scaling": opts.lr_scaling,
                   "lr_warmup_steps": opts.lr_warmup_steps, "seed": opts.seed,
                   "backend": opts.backend, "compression": opts.compression,
                   "parallel": opts.parallel,
                   **({"stages": opts.stages or rt.size, "micro_batches": opts.micro_batches,
                       "cut": opts.cut}
                      if opts.parallel == "pipeline" else {}),
                   **({"staleness": asyncps.staleness_label(opts.staleness),
                       "ps_dedicated": opts.ps_dedicated} if opts.backend == asyncps.NAME else {}),
                   "eval_every": opts.eval_every,
                   "slow_rank": _slow_label(opts.slow_rank),
                   "target": list(opts.target) if opts.target else None,
                   "threads_per_rank": rt.threads, **_workload_params(wl, opts)},
        "layout": {"size": rt.size, "nodes": rt.layout.num_nodes,
                   "ranks_per_node": rt.layout.local_size, "hosts": sorted(set(f["hosts"]))},
        "metrics": metrics,
        "gradient_bytes": rep.gradient_bytes(),
        "replicas_identical": len(set(f["digests"])) == 1 if "pipeline" not in f else None,
        "weights_digest": f["digests"][0],
        "resumed_from": resumed,
        "box": box.record_section(f["hosts"], f["net"], opts.backend, opts.compression,
                                  rep.gradient_bytes() // 4, rt.size),
        "manifest": records.manifest(rt.layout, hosts=f["hosts"], extra={"horovod_build": {
            "tensorflow": True, "mpi": bool(hvd.mpi_built()), "gloo": bool(hvd.gloo_built()),
            "nccl": bool(hvd.nccl_built()), "mpi_enabled": bool(hvd.mpi_enabled()),
            "gloo_enabled": bool(hvd.gloo_enabled())}}),
    }


def _slow_label(slow) -> "str | None":
    if not slow:
        return None
    rank, factor, delay = slow
    return f"{rank}:{factor:g}" if factor is not None else f"{rank}:{delay * 1e3:g}ms"


def _workload_params(wl, opts) -> dict:
    out = {}
    if wl.synthetic is not None:
        out.update(model=wl.info.get("model"), image_size=wl.info.get("image_size"),
                   num_classes=wl.info.get("classes"), params=wl.info.get("params"))
    if opts.data:
        out["data"] = opts.data
    return out


def main(opts) -> int:
    try:
        return run(opts)
    except Interrupted:
        return EXIT_INTERRUPTED
