"""Train a workload across MPI ranks: 'mpirun -np N hpcdl train ...' or 'srun hpcdl train ...'.
Every rank builds the same model from the same seed and trains on its own shard of each global
batch; by default the ranks average their gradients every step as Horovod's
DistributedGradientTape does (synchronous data parallelism, identical replicas). '--backend
ps-async' trains through an asynchronous parameter server instead, and '--parallel pipeline'
cuts the model into stages on the ranks. Rank 0 prints the result lines and appends one record
of the run to the results file.
"""
from __future__ import annotations

from pathlib import Path

from . import control, options, runtime
from .interface import find_checkpoint
from .options import add_arguments, DEFAULT_RESULTS
from .. import checks, cluster, machine, records, workloads
from ..errors import EXIT_INTERRUPTED, EXIT_RECORD_ELSEWHERE, Interrupted, UserError

__all__ = ["add_arguments", "main", "run"]     # the command: its options and its run


def run(opts) -> int:
    """Train as ``opts`` says; return the process exit status. Horovod's order: threads and
    hvd.init(), pin the GPU, build the model, wrap the gradients' exchange, broadcast from rank 0
    after the first step, scale the learning rate with the global batch. The same skeleton for
    every way of training; what differs is the mode's (:mod:`hpcdl.train.modes`)."""
    mode = options.validate(opts)
    results = _results_path(opts)
    if cluster.discover().rank == 0:
        # what rank 0 will write is checked before the run starts TensorFlow or spends its
        # allocation; its exit 2 ends every rank
        if results != "-":
            records.check_clean(results)          # results/ holds what committed code made
            checks.check_writable(results, "--results")
        if opts.checkpoint_dir:
            checks.check_writable_dir(opts.checkpoint_dir, "--checkpoint-dir")
    rt = runtime.start(timeline=bool(opts.timeline), tuning=opts.tuning,
                       compression=opts.compression, horovod=mode.needs_horovod(opts))
    rt.tf.keras.utils.set_random_seed(opts.seed)
    wl = workloads.load(opts.workload, opts)
    _check_evaluation(wl, opts)
    rep = mode.replica(rt, wl, opts)
    ckpt_dir = Path(opts.checkpoint_dir) if opts.checkpoint_dir else None
    watch = control.StopWatch(opts.max_time, _stop_file(ckpt_dir))
    watch.install()
    rt.say("\n".join([_header(rt, wl, rep.plan, opts)] + mode.header(rt, rep.plan, opts)
                     + _model_line(wl, rep.plan)))
    found = find_checkpoint(rt, opts, ckpt_dir, mode, rep.plan)
    loop = mode.train(rep, opts, watch, ckpt_dir, found)
    if loop.stopped:
        msg = (f"Stopped {mode.progress(loop, rep.plan)} ({loop.stopped}); "
               + (f"checkpoint {loop.checkpoint}" if loop.checkpoint else
                  "no --checkpoint-dir, progress not saved"))
        rt.say(msg)
        raise Interrupted(msg, loop.checkpoint)
    figures = mode.summarize(rep, loop, opts)
    code = 0
    if rt.root:
        _print_results(wl, len(mode.trainers(opts, rt.size)), figures)
        record = _record(rep, opts, mode, figures, found)
        if results != "-":
            if records.append_or_keep(results, record) is not None:
                code = EXIT_RECORD_ELSEWHERE
            else:
                print(f"Record appended to {results}")
    # after the record: an artefact that cannot be written never costs the run's record
    if opts.save_weights and (rt.root or ("{rank}" in opts.save_weights and mode.replicas())):
        _save_weights(rep, opts.save_weights.replace("{rank}", str(rt.rank)))
    return code


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
    return (f"# hpcdl train: workload={wl.name} ranks={rt.size} nodes={rt.layout.num_nodes} "
            f"batch={plan.batch}/rank global_batch={plan.global_batch} steps={plan.steps} "
            f"lr={plan.lr:g} backend={opts.backend} compression={opts.compression} "
            f"threads/rank={rt.threads}" + (f" gpu={rt.gpu}" if rt.gpu is not None else "")
            + ("\nHorovod's timeline: rank 0 records the second half of the timed steps; the "
               "first half, timed without it, says what it costs (printed and recorded)"
               if opts.timeline else ""))


def _model_line(wl, plan) -> list:
    if wl.synthetic is None:
        return []
    return [f"Model: {wl.info['model']}, image size {wl.info['image_size']}, "
            f"batch size {plan.batch} per rank, {wl.info['params']:,} parameters"]


def _save_weights(rep, path) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        rep.np.savez(path, **{f"w{i}": v.numpy() for i, v in enumerate(rep.model.variables)})
    except OSError as exc:
        raise UserError(f"--save-weights {path}: cannot be written ({exc.strerror or exc}); "
                        "the run's record was kept, the weights were not saved") from None


def _print_results(wl, size, f) -> None:
    rate, total, step, split = f["throughput_per_rank"], f["throughput"], f["step_time"], f["split"]
    if wl.synthetic is not None:
        print(f"Img/sec per rank: {rate.get('mean', 0):.1f} +-{rate.get('ci95', 0):.1f}")
    print(f"Total {wl.unit}/sec on {size} rank(s): {total.get('mean', 0):.1f} "
          f"+-{total.get('ci95', 0):.1f}")
    print(f"Step time: median {step.get('median', 0) * 1e3:.3f} ms, "
          f"p99 {step.get('p99', 0) * 1e3:.3f} ms over {step['n']} timed steps"
          + (f"; {split['text']}" if split.get("text") else ""))
    if "timeline_cost" in f:
        print(timeline_cost_text(f["timeline_cost"]))
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


def timeline_cost_text(c: dict) -> str:
    """One line on what Horovod's timeline cost the timed steps, or why it was not measured."""
    if "cost" not in c:
        return f"Timeline cost: not measured ({c['why']})"
    if c["cost"] < -0.05:       # the timeline cannot speed steps up: something slowed the first half
        return (f"Timeline cost: not measured (the {c['without_steps']} timed steps before it, "
                f"median {c['without_s'] * 1e3:.3f} ms, ran slower than the {c['steps']} it "
                f"recorded, {c['with_s'] * 1e3:.3f} ms: something else slowed them)")
    return (f"Timeline cost: {c['cost'] * 100:+.1f}% a step (median {c['with_s'] * 1e3:.3f} ms "
            f"over the {c['steps']} timed steps it recorded, {c['without_s'] * 1e3:.3f} ms over "
            f"the {c['without_steps']} before it; one run's estimate)")


def target_text(t: dict) -> str:
    """One line on a run's target: when it was reached, or that it was not."""
    goal = f"{t['metric']} {'>=' if t['metric'] == 'accuracy' else '<='} {t['value']:g}"
    if t["reached"]:
        return (f"Target {goal} reached at step {t['steps']} ({t['samples']:,} samples, "
                f"{t['time_s']:.2f} s of training)")
    return f"Target {goal} not reached in {t['steps']} steps"


def _record(rep, opts, mode, f, found) -> dict:
    """The run's record (:func:`hpcdl.records.build`): every figure the mode measured is a metric."""
    rt, plan, wl = rep.rt, rep.plan, rep.wl
    metrics = {k: v for k, v in f.items() if k not in ("digests", "hosts", "net")}
    metrics["throughput"] = {**f["throughput"], "unit": f"{wl.unit}/s"}
    metrics["throughput_per_rank"] = {**f["throughput_per_rank"], "unit": f"{wl.unit}/s"}
    return records.build(
        source="train", study=opts.study, point=opts.point, declared=opts.declared,
        tag=opts.tag,
        params={"workload": wl.name, "batch_size": plan.batch, "global_batch": plan.global_batch,
                "steps": plan.steps, "warmup": plan.warmup, "batches_per_iter": plan.per_iter,
                "lr": plan.lr, "base_lr": plan.base_lr, "lr_scaling": opts.lr_scaling,
                "lr_warmup_steps": opts.lr_warmup_steps, "seed": opts.seed,
                "backend": opts.backend, "compression": opts.compression,
                "parallel": opts.parallel, **mode.params(opts, rt),
                "eval_every": opts.eval_every, "slow_rank": _slow_label(opts.slow_rank),
                "target": list(opts.target) if opts.target else None,
                "threads_per_rank": rt.threads, **_workload_params(wl, opts)},
        layout=records.layout_section(rt.layout, f["hosts"]),
        metrics=metrics,
        manifest=records.manifest(rt.layout, hosts=f["hosts"], extra=_started(rt.hvd)),
        gradient_bytes=rep.gradient_bytes(),
        replicas_identical=len(set(f["digests"])) == 1 if mode.replicas() else None,
        weights_digest=f["digests"][0],
        resumed_from=found.as_record() if found else None,
        machine=machine.record_section(f["hosts"], f["net"], opts.backend, opts.compression,
                                       rep.gradient_bytes() // 4, rt.size),
        tuning=dict(rt.tuning or {}, backend_from=getattr(opts, "backend_from", "--backend")))


def _started(hvd) -> dict:
    """The manifest's word on Horovod: what it was built with where the run started it; a run
    with nothing of Horovod's in it did not (its collectives went through mpi4py)."""
    if hvd is None:
        return {"horovod_started": False}
    return {"horovod_started": True, "horovod_build": {
        "tensorflow": True, "mpi": bool(hvd.mpi_built()), "gloo": bool(hvd.gloo_built()),
        "nccl": bool(hvd.nccl_built()), "mpi_enabled": bool(hvd.mpi_enabled()),
        "gloo_enabled": bool(hvd.gloo_enabled())}}


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
