#!/usr/bin/env python
"""The training loop's own cost: ``hpcdl train`` against the bare Horovod loop on the same work.

Both run the cnn workload (the same model, synthetic batch, loss, optimizer, threads and rank
defaults, through mpirun with the same options); ``benchmarks/bare_horovod_loop.py`` is the
canonical synthetic-benchmark loop and nothing else. Rounds alternate which goes first; the
figure is, per model and rank count, the median over rounds of hpcdl's total img/s over the
bare loop's in the same round (target: >= 0.98), with its range. ``--against COMMIT`` puts
``hpcdl train`` of that commit (checked out in a temporary worktree) in the bare loop's place:
whether a change moved the loop's speed. ``--launcher srun``, inside a Slurm allocation, starts
both with the same ``srun`` step over the allocation's tasks (as the job scripts start ranks), in
the allocation's environment, threads per rank as the cluster gives them.

    python -m benchmarks.loop_overhead [--rounds 5] [--ranks 1,2] [--models resnet50:64:8:10,small:32:32:50]
    python -m benchmarks.loop_overhead --against HEAD~1 --models small:32:32:50
    sbatch -N 8 --ntasks-per-node 1 --wrap "python -m benchmarks.loop_overhead --launcher srun --models small:32:32:20"
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from hpcdl import cluster
from hpcdl.launch import local

TOTAL = re.compile(r"^Total img/sec on (\d+) rank\(s\): ([0-9.]+) \+-([0-9.]+)$", re.M)


def _work(opts, model: str, size: int, batch: int, iters: int) -> list:
    return ["--model", model, "--image-size", str(size), "--batch-size", str(batch),
            "--num-warmup-batches", str(opts.warmup), "--num-batches-per-iter", str(opts.per_iter),
            "--num-iters", str(iters)]


def _commands(opts, np_, work, against: Path = None) -> dict:
    """name -> (argv, the tree whose hpcdl it runs)."""
    def launch(command):
        if opts.launcher == "srun":
            return cluster.srun_step() + [f"--ntasks={np_}"] + command
        return local.mpirun_command(np_, command)
    train = ["train", "--workload", "cnn", "--num-classes", "1000", *work, "--results", "-"]
    out = {"hpcdl": (launch(local.hpcdl_command(train)), ROOT)}
    if against is None:
        bare = [sys.executable, str(ROOT / "benchmarks" / "bare_horovod_loop.py"), *work]
        out["bare"] = (launch(bare), ROOT)
    else:
        out["against"] = (launch(local.hpcdl_command(train)), against)
    return out


def launch(argv, tree: Path, np_, timeout, srun: bool = False, done=lambda res: True):
    """Run ``argv`` from ``tree`` with its hpcdl, threads per rank as both loops take them; the
    result, or exit with its output where it failed, timed out or ``done(result)`` is false."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    if not srun:       # under srun, the cluster's rule (its CPUs per task) for both
        env["HPCDL_THREADS"] = str(max(1, (os.cpu_count() or 1) // np_))
    res = local.run(argv, timeout=timeout, env=env, cwd=str(tree))
    if res.returncode != 0 or res.timed_out or not done(res):
        print(res.stdout[-3000:], res.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{' '.join(argv[-12:])} failed (exit {res.returncode}, timed out "
                         f"{res.timed_out})")
    return res


def _run(argv, tree: Path, np_, timeout, srun: bool = False):
    res = launch(argv, tree, np_, timeout, srun, done=lambda r: TOTAL.search(r.stdout))
    m = TOTAL.search(res.stdout)
    return float(m.group(2)), float(m.group(3))


def _models(text: str, iters: int) -> list:
    """``name:image_size:batch[:iters]`` items of --models (iters: --iters where not given)."""
    out = []
    for item in text.split(","):
        name, size, batch, n = (item.split(":") + ["", "", ""])[:4]
        out.append((name, int(size or 64), int(batch or 8), int(n or iters)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ranks", default="1,2")
    # the small CNN's step is ~15 ms: 50 iterations time it for ~7 s, as 10 do ResNet-50's
    ap.add_argument("--models", default="resnet50:64:8:10,small:32:32:50",
                    help="model:image size:batch per rank[:iterations], a comma list "
                         "(resnet50:64:8:10,small:32:32:50)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--per-iter", type=int, default=10)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--against", default=None, metavar="COMMIT",
                    help="compare with hpcdl train of this commit instead of the bare loop")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--launcher", choices=("mpirun", "srun"), default="mpirun",
                    help="srun: inside a Slurm allocation, both by one srun step over its tasks "
                         "(--ranks defaults to the allocation's)")
    opts = ap.parse_args(argv)
    if opts.launcher == "srun":
        if not os.environ.get("SLURM_JOB_ID"):
            ap.error("--launcher srun runs inside a Slurm allocation (sbatch or salloc)")
        if opts.ranks == "1,2":
            opts.ranks = os.environ.get("SLURM_NTASKS", "1")
    ranks = [int(r) for r in opts.ranks.split(",")]
    models = _models(opts.models, opts.iters)
    tree, tmp = None, None
    if opts.against:
        tmp = Path(tempfile.mkdtemp(prefix="hpcdl-against-"))
        tree = tmp / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                        opts.against], check=True, capture_output=True)
    other = "against" if tree else "bare"
    try:
        where = (f"one srun step in Slurm job {os.environ['SLURM_JOB_ID']} on "
                 f"{os.environ.get('SLURM_JOB_NODELIST', '?')}, threads/rank as the job gives"
                 if opts.launcher == "srun" else "mpirun, threads/rank = cores / ranks")
        print(f"# hpcdl train vs {'hpcdl train of ' + opts.against if tree else 'the bare Horovod loop'}: "
              f"cnn, {opts.warmup} warm-up + iterations x {opts.per_iter} steps, {where}; "
              f"{opts.rounds} rounds, first runner alternating")
        print(f"#{'model':>14} {'ranks':>5} {'round':>5} {'first':>7} {'hpcdl img/s':>16} "
              f"{other + ' img/s':>16} {'ratio':>6}")
        ratios = {(m, n): [] for m in models for n in ranks}
        for rnd in range(opts.rounds):
            for k, (model, size, batch, iters) in enumerate(models):
                for np_ in ranks:
                    cmds = _commands(opts, np_, _work(opts, model, size, batch, iters), tree)
                    order = ["hpcdl", other] if (rnd + np_ + k) % 2 == 0 else [other, "hpcdl"]
                    got = {name: _run(*cmds[name], np_, opts.timeout, opts.launcher == "srun")
                           for name in order}
                    ratio = got["hpcdl"][0] / got[other][0]
                    ratios[(model, size, batch, iters), np_].append(ratio)
                    print(f" {f'{model} {size}px':>14} {np_:>5} {rnd + 1:>5} {order[0]:>7} "
                          f"{got['hpcdl'][0]:>9.1f} +-{got['hpcdl'][1]:<5.1f} "
                          f"{got[other][0]:>9.1f} +-{got[other][1]:<5.1f} {ratio:>6.3f}", flush=True)
        for ((model, size, batch, _), np_), rs in ratios.items():
            med = statistics.median(rs)
            verdict = ("" if tree else
                       f": {'meets' if med >= 0.98 else 'misses'} the 0.98 target")
            print(f"# {model} {size}px batch {batch}, {np_} rank(s): hpcdl/{other} median "
                  f"{med:.3f} [{min(rs):.3f}-{max(rs):.3f}] over {len(rs)} rounds{verdict}")
    finally:
        if tree is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
