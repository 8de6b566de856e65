"""The options of ``hpcdl train`` and their checks before any rank starts TensorFlow."""
from __future__ import annotations

import argparse
from pathlib import Path

from . import args, modes
from .. import cluster
from ..comm import COMPRESSIONS, tuning
from ..errors import UserError
from ..workloads import mnist, resolve

DEFAULT_RESULTS = "results/runs.jsonl"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``hpcdl train`` (defaults of None fall back to the workload's own)."""
    _workload(p.add_argument_group("workload"))
    _training(p, p.add_argument_group("training"))
    _measurement(p.add_argument_group("measurement"))
    _records(p.add_argument_group("records and checkpoints"))


def _workload(w) -> None:
    w.add_argument("--workload", "-w", default="expmlp",
                   help="expmlp, mnist, cnn, or package.module:factory (default: expmlp)")
    w.add_argument("--data", default=None,
                   help="dataset path (mnist: the standard mnist.npz, 'mnist-5k' for 5,000 real "
                        "MNIST digits, or 'sklearn-digits'); "
                        "default $HPCDL_DATA")
    w.add_argument("--model", default=None, help="cnn: resnet50 (default), resnet101, vgg16, "
                                                  "mobilenetv2, densenet121, small")
    w.add_argument("--image-size", type=args.positive_int, default=None, help="cnn: input resolution (224)")
    w.add_argument("--num-classes", type=args.positive_int, default=None, help="cnn: classes (1000)")


def _training(p, t) -> None:
    t.add_argument("--steps", type=args.positive_int, default=None,
                   help="optimizer steps (expmlp, mnist: 1000; cnn: warm-up + iters x batches)")
    t.add_argument("--batch-size", "-b", type=args.positive_int, default=None,
                   help="per-rank batch; the global batch is this x ranks (expmlp, mnist: 100; cnn: 32)")
    t.add_argument("--lr", type=args.positive_float, default=None,
                   help="learning rate at the workload's reference global batch")
    t.add_argument("--lr-scaling", choices=("linear", "none"), default="linear",
                   help="linear: lr x global batch / reference batch (Goyal et al.; = x ranks "
                        "at the reference per-rank batch); none: use --lr as is")
    t.add_argument("--lr-warmup-steps", type=args.nonneg_int, default=0,
                   help="ramp the lr linearly from its unscaled value over this many steps")
    t.add_argument("--seed", type=int, default=0, help="seed of the model and the data order")
    t.add_argument("--backend", default=None,
                   help=f"gradient exchange: {', '.join(modes.TRAIN_BACKENDS)} (default: the "
                        "--tuning file's pick where 'hpcdl tune --knobs backend' chose one, else "
                        "horovod); "
                        + "; ".join(f"{m.backend}: {m.help}" for m in modes.MODES if m.backend))
    t.add_argument("--compression", default="none", help=f"gradient compression: {', '.join(COMPRESSIONS)}")
    t.add_argument("--tuning", default=None, metavar="FILE",
                   help="exchange settings from 'hpcdl tune' (its pick for --compression), put "
                        "in the environment before MPI and Horovod start; default $HPCDL_TUNING; "
                        "'default': none")
    t.add_argument("--parallel", choices=modes.PARALLEL, default="data",
                   help="data: every rank a replica (default); " + "; ".join(
                       f"{m.parallel}: {m.help}" for m in modes.MODES if m.parallel != "data"))
    t.add_argument("--slow-rank", type=args.slow_rank, default=None, metavar="R:FACTOR",
                   help="a straggler on purpose: rank R's compute takes FACTOR times as long "
                        "(it sleeps FACTOR-1 times its compute time per step), or with R:Dms "
                        "D milliseconds longer")
    for mode in modes.MODES:
        mode.add_arguments(p.add_argument_group(f"{mode.name}: {mode.help}"))


def _measurement(m) -> None:
    m.add_argument("--warmup", type=args.nonneg_int, default=None,
                   help="untimed steps at the start (default: 10, or a tenth of --steps)")
    m.add_argument("--num-warmup-batches", type=args.nonneg_int, default=None,
                   help="untimed batches (as --warmup; cnn's default 10)")
    m.add_argument("--num-batches-per-iter", type=args.positive_int, default=None,
                   help="steps per timed iteration, the unit of the +- spread (10)")
    m.add_argument("--num-iters", type=args.positive_int, default=None,
                   help="timed iterations of --num-batches-per-iter steps: the run takes warm-up "
                        "+ iterations x steps per iteration, unless --steps is given (cnn: 10)")
    m.add_argument("--log-every", type=args.positive_int, default=100, help="progress line every N steps")
    m.add_argument("--eval-every", type=args.nonneg_int, default=0,
                   help="evaluate the held-out metric (sharded over the ranks) every N samples "
                        "seen, recorded with the step and the time (0: at the end only; with "
                        "--target: every --log-every steps)")
    m.add_argument("--target", type=args.target, default=None, metavar="METRIC:VALUE",
                   help="accuracy:V or loss:V on the held-out set: training ends at the first "
                        "evaluation that reaches it, and the record has the steps, samples and "
                        "time it took, or that --steps did not reach it")
    m.add_argument("--probes", type=args.nonneg_int, default=5,
                   help="steps preceded by a probe of the compute alone and, on several ranks, "
                        "the exchange alone, outside the timing (horovod none/fp16; 0 = off)")


def _records(r) -> None:
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
    r.add_argument("--checkpoint-every", type=args.nonneg_int, default=0, help="checkpoint every K steps (0 = only on stop)")
    r.add_argument("--keep-checkpoints", type=args.positive_int, default=2, help="checkpoints kept (2)")
    r.add_argument("--resume", nargs="?", const="latest", default=None,
                   help="continue from the newest good checkpoint in --checkpoint-dir, or from a given file")
    r.add_argument("--resume-mismatch", action="store_true",
                   help="continue a checkpoint written with another workload, batch, rank count "
                        "or learning rate (refused otherwise); the record says what differed")
    r.add_argument("--save-weights", default=None, help="rank 0 writes the final weights here (.npz); with '{rank}' in the path every rank does")
    r.add_argument("--max-time", type=args.positive_float, default=None,
                   help="seconds of training after which to checkpoint and stop cleanly (exit 75)")
    r.add_argument("--stop-check-every", type=args.positive_int, default=10,
                   help="fewest steps between the ranks' agreements on stopping (signal, STOP file, "
                        "time limit); short steps agree about once a second (10)")


def resolve_backend(opts) -> None:
    """``opts.backend`` as given; else, for data parallelism on more than one rank, the backend
    the tuning file's pick names (:func:`hpcdl.comm.tuning.backend_of`); else horovod.
    ``opts.backend_from`` says which (``--backend``, the tuning file, ``default``)."""
    if getattr(opts, "backend", None):
        opts.backend_from = "--backend"
        return
    picked = (tuning.backend_of(opts.tuning, opts.compression)
              if opts.parallel == "data" and cluster.discover().size > 1 else None)
    opts.backend = picked or "horovod"
    opts.backend_from = "the tuning file" if picked else "default"


def validate(opts):
    """Check the options that need no TensorFlow; the mode they choose. Raise UserError naming
    what to fix."""
    resolve(opts.workload)
    resolve_backend(opts)
    mode = modes.select(opts)
    if opts.resume and not opts.checkpoint_dir and opts.resume == "latest":
        raise UserError("--resume needs --checkpoint-dir (or the path of a checkpoint file)")
    if opts.resume and opts.resume != "latest" and not Path(opts.resume).is_file():
        raise UserError(f"--resume: checkpoint file {opts.resume} does not exist")
    if opts.checkpoint_every and not opts.checkpoint_dir:
        raise UserError("--checkpoint-every needs --checkpoint-dir")
    # A missing dataset is named here, before every rank spends seconds starting TensorFlow.
    if opts.workload == "mnist":
        mnist.check_data(opts.data or cluster.setting("HPCDL_DATA"))
    return mode
