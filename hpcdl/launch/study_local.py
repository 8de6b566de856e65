"""Run the points of a study on this machine through mpirun, one after another, under a timeout.

Points already in ``results/<study>/runs.jsonl`` are skipped (unless forced), so an interrupted
study continues where it stopped. Each point's record is appended by rank 0 of its ``hpcdl train``,
or, for a study of the user's own command, by :func:`hpcdl.launch.command.finish` once it ended.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from . import command, local
from .. import checks, records
from ..errors import EXIT_INTERRUPTED, UserError


def _fmt(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def run_study(study, *, force: bool = False, limit: Optional[int] = None,
              timeout: Optional[float] = None, dry_run: bool = False,
              out: Callable[[str], None] = None, stream: bool = False,
              allocation: Sequence[str] = ()) -> int:
    """Run the study's pending points; return 0, 1 (some failed) or 75 (a point was stopped).
    A study with ``[model] forecast`` first measures, with ``hpcdl bench allocation`` (more
    options: ``allocation``), each rank count its forecast's files lack."""
    out = out or (lambda msg: print(msg, flush=True))
    runs = study.runs_path
    todo = study.points() if force else study.pending(runs)
    skipped = len(study.points()) - len(todo)
    if limit is not None:
        todo = todo[:limit]
    out(f"# {study.summary()}")
    env = _env(study)
    measured = _measure_allocation(study, allocation, timeout, dry_run, out, env)
    if measured:
        return measured
    out(f"# results: {runs}; {skipped} point(s) already recorded"
        f"{' (re-run: --force)' if skipped and not force else ''}, {len(todo)} to run")
    if not todo:
        return 0
    # a dry run made none of the exchange files the auto-tuned points run (it said how)
    made = [p for p in todo if not (dry_run and getattr(study, "auto_tuned", False)
                                    and p.tuning_file == study.exchange_files)]
    missing = study.missing_tuning(made) if hasattr(study, "missing_tuning") else []
    if missing:
        raise UserError(f"{study.name}: its tuned points need tuning files that do not exist: "
                        + "; ".join(missing))
    if not dry_run:
        checks.check_writable(runs, "the study's results file")
        if study.command:            # this process writes the records, not hpcdl train's rank 0
            records.check_clean(runs)
    limit_s = timeout or study.timeout
    failed: List[str] = []
    t_start = time.monotonic()
    done_time = 0.0
    for k, point in enumerate(todo, 1):
        spec = command.spec_for(study, point) if point.script else None
        words = (command.with_threads(spec.argv) if spec
                 else local.hpcdl_command(point.command(runs)))
        argv = local.MPIRUN.render(point.ranks, words, study.mpirun_args)
        elapsed = time.monotonic() - t_start
        eta = f", ETA {_fmt(done_time / (k - 1) * (len(todo) - k + 1))}" if k > 1 else ""
        out(f"[{k}/{len(todo)}] {point.id}: {point.ranks} rank(s), batch {point.batch_size}/rank "
            f"(global {point.global_batch}); elapsed {_fmt(elapsed)}{eta}")
        if dry_run:
            out("  " + " ".join(_quote(a) for a in argv))
            continue
        t0 = time.monotonic()
        if spec:
            res = _run_command(spec, argv, env, limit_s, stream, out)
        else:
            res = local.MPIRUN.submit(argv, limit_s, env, stream=stream)
        done_time += time.monotonic() - t0
        if res.timed_out:
            failed.append(point.id)
            out(f"  FAILED: timed out after {limit_s:g} s (run.timeout); the job was killed")
            _tail(res, out)
            continue
        if res.returncode == EXIT_INTERRUPTED and not spec:     # hpcdl train checkpointed
            out(f"  stopped early (exit {EXIT_INTERRUPTED}); run the study again to continue")
            return EXIT_INTERRUPTED
        if res.returncode != 0:
            failed.append(point.id)
            out(f"  FAILED: exit {res.returncode}")
            _tail(res, out)
            continue
        lines = [ln for ln in res.stdout.splitlines()
                 if ln.startswith(("Total ", "Step time:", "Replicas identical"))]
        for ln in lines:
            out("  " + ln)
        out(f"  done in {res.elapsed:.1f} s")
    if dry_run:
        out(f"# dry run: {len(todo)} point(s) would run; nothing ran")
        return 0
    total = time.monotonic() - t_start
    out(f"# {len(todo) - len(failed)} of {len(todo)} point(s) ran in {_fmt(total)}"
        + (f"; FAILED: {', '.join(failed)} (run the study again to retry them)" if failed else ""))
    return 1 if failed else 0


def _env(study) -> dict:
    """The ranks' environment: this one, the study's [run] env, this package importable."""
    env = dict(os.environ)
    env.update(study.env)
    # The ranks import this very package, also when it is not installed (a checkout).
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    # A command's "python" is the one running hpcdl (its venv), as in a study's job scripts.
    env["PATH"] = os.pathsep.join(p for p in (str(Path(sys.executable).parent), env.get("PATH"))
                                  if p)
    return env


def _measure_allocation(study, extra: Sequence[str], timeout: Optional[float], dry_run: bool,
                        out: Callable[[str], None], env: dict) -> int:
    """The forecast's allocation measurement at each rank count of the study its files lack, one
    after another (they rewrite the same files); 0, or 1 where one failed."""
    missing = study.allocation_missing(study.points())
    spread, loop = study.allocation_files
    if missing and not dry_run:          # what the measurements and the points will write
        checks.check_writable(study.runs_path, "the study's results file")
        for path in (spread, loop):
            checks.check_writable(Path(path), "the forecast's allocation file")
    for nodes, rpn in missing:
        words = local.hpcdl_command(["bench", "allocation", "--study", str(study.path),
                                     "--spread", spread, "--loop", loop, *extra])
        argv = local.MPIRUN.render(nodes * rpn, words, study.mpirun_args)
        res = _prep(f"{nodes * rpn} rank(s): the forecast's spread and loop share", argv,
                    timeout or study.timeout, dry_run, out, env)
        if res is None:
            continue
        if res is False:
            return 1
        for ln in res.stdout.splitlines():
            if not ln.startswith("#"):
                out("  " + ln)
        out(f"  done in {res.elapsed:.1f} s")
    return _measure_exchange(study, timeout, dry_run, out, env)


def _measure_exchange(study, timeout: Optional[float], dry_run: bool,
                      out: Callable[[str], None], env: dict) -> int:
    """The exchange files the forecast reads (:meth:`hpcdl.study.Study.lacking_exchange`), each
    made by ``hpcdl tune`` timing the algorithms (it starts its own ranks); 0, or 1 where one
    failed."""
    for path, nodes, rpn, comps, _ in study.lacking_exchange(study.points()):
        if not dry_run:
            checks.check_writable(Path(path), "the forecast's exchange file")
        argv = local.hpcdl_command(["tune", "--study", str(study.path), "--np", str(nodes * rpn),
                                    "--compression", ",".join(comps), *study.EXCHANGE_TUNE,
                                    "--out", path])
        res = _prep(f"{nodes * rpn} rank(s): the exchange of each allreduce algorithm", argv,
                    timeout or study.timeout, dry_run, out, env)
        if res is False:
            return 1
        if res is not None:
            out(f"  done in {res.elapsed:.1f} s: {path}")
    return 0


def _prep(what: str, argv, timeout: float, dry_run: bool, out: Callable[[str], None], env: dict):
    """One measurement the study's points or report need, said, then run (under ``timeout``):
    its result; None in a dry run (the command said); False where it failed (its tail said)."""
    out(f"[allocation] {what}")
    if dry_run:
        out("  " + " ".join(_quote(a) for a in argv))
        return None
    res = local.MPIRUN.submit(argv, timeout, env)
    if res.returncode != 0 or res.timed_out:
        out(f"  FAILED: {'timed out' if res.timed_out else f'exit {res.returncode}'}")
        _tail(res, out)
        return False
    return res


def _run_command(spec, argv, env, limit_s, stream, out):
    """One point of the user's own command: run it with the point's environment, its output in
    the point's log, then write the point's record and say what it holds."""
    command.prepare(spec)
    env = {**env, **spec.env}
    res = local.MPIRUN.submit(argv, limit_s, env, log=spec.log)
    rec = command.finish(spec, res.returncode, res.elapsed, res.timed_out)
    for line in command.summary(rec):
        out("  " + line)
    if stream:
        out(res.stdout.rstrip("\n"))
    out(f"  output: {spec.log}")
    return res


def _tail(res, out, n: int = 15) -> None:
    # the error a rank reports ends its stderr: last, so that it is not cut off
    text = (res.stdout or "") + (res.stderr or "")
    for ln in text.strip().splitlines()[-n:]:
        out("  | " + ln)


def _quote(arg: str) -> str:
    import shlex
    return shlex.quote(arg)
