"""Validate, run, submit and report scaling studies (``hpcdl study ...``).

The top level imports only the standard library: ``hpcdl study report --help`` must answer at
once, and a report never needs TensorFlow, Horovod or mpi4py.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import time
from pathlib import Path

from .. import checks, machine, study as _study
from . import lock as rootlock
from ..errors import UserError
from ..launch import batch, status, study_local, submit


def register(subparsers, name: str, help_text: str) -> None:
    p = subparsers.add_parser(name, help=help_text, description=(
        "Scaling studies: a study file in jobs/ names the workload, strong or weak scaling, the "
        "rank or node counts, repeats and backend/compression axes. 'run' executes it here "
        "through mpirun, 'submit' through Slurm, 'report' turns results/<study>/runs.jsonl into "
        "tables, plots and a communication model."))
    sub = p.add_subparsers(dest="study_command", metavar="SUBCOMMAND")
    _set_default_main(p)

    v = sub.add_parser("validate", help="check study files and list their runs",
                       description="Check study files; print each one's runs, or the first "
                                   "error naming the file, the key and what is allowed.")
    v.add_argument("studies", nargs="+", metavar="STUDY.toml")
    v.add_argument("--quiet", "-q", action="store_true", help="only errors")
    v.set_defaults(_main=validate_main)

    r = sub.add_parser("run", help="run a study's points here through mpirun, skipping recorded ones",
                       description="Run every point of a study on this machine through mpirun "
                                   "under a timeout, appending each record to "
                                   "results/<study>/runs.jsonl. Points already recorded are "
                                   "skipped, so an interrupted study continues where it stopped.")
    r.add_argument("study", metavar="STUDY.toml")
    r.add_argument("--force", action="store_true", help="run recorded points again (adds records)")
    r.add_argument("--limit", type=int, default=None, metavar="K", help="run at most K points")
    r.add_argument("--timeout", type=float, default=None,
                   help="seconds per point (default: the study's run.timeout)")
    r.add_argument("--results-root", default=None,
                   help="folder that holds results/<study> (default $HPCDL_RESULTS_ROOT or results)")
    r.add_argument("--dry-run", action="store_true", help="print the mpirun commands, run nothing")
    r.add_argument("--stream", action="store_true", help="show the ranks' output as it comes")
    r.add_argument("--allocation", default="", metavar="'OPTIONS'",
                   help="more options of 'hpcdl bench allocation', which a study with [model] "
                        "forecast runs first at each rank count its files lack")
    r.add_argument("--report", action="store_true", help="write the report when the runs are done")
    _add_wait(r)
    r.set_defaults(_main=run_main)

    rep = sub.add_parser("report", help="tables, plots and the communication model of a study",
                         description="Make report.md, CSV tables and PNG plots from a study's "
                                     "runs.jsonl: throughput, speedup, efficiency, Karp-Flatt, "
                                     "compute/exchange split, and the alpha-beta-gamma model "
                                     "calibrated on the runs (or on a bench fit) and extrapolated "
                                     "to cluster networks.")
    add_report_arguments(rep)
    _add_wait(rep)
    rep.set_defaults(_main=report_main)

    s = sub.add_parser("submit", help="submit a study to Slurm (one job per point, report chained)",
                       description="Write one job script per point not yet recorded and submit "
                                   "them with sbatch, the report job chained after them.")
    add_submit_arguments(s)
    _add_wait(s)
    s.set_defaults(_main=submit_main)
    st = sub.add_parser("status", help="show the Slurm jobs and recorded points of a study",
                        description="Per point: the latest job, its state from squeue and "
                                    "sacct -c, and whether the point is recorded.")
    add_status_arguments(st)
    st.set_defaults(_main=status_main)
    res = sub.add_parser("residuals", help="pool studies' held-out errors for the reports' bands",
                         description="Collect the held-out points of these studies' reports "
                                     "(report.json) into a residuals file: a report's band is "
                                     "then conformal over the other studies on its kind of "
                                     "machine. Written beside the studies as "
                                     "forecast-residuals.json, each report reads it; render "
                                     "the reports again after.")
    res.add_argument("folders", nargs="+", metavar="RESULTS",
                     help="results/<study> folders, each with its report.json")
    res.add_argument("--out", required=True, metavar="PATH",
                     help="the file to write (the results root's forecast-residuals.json)")
    res.set_defaults(_main=residuals_main)


def _add_wait(p) -> None:
    p.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                   help="where another study run, submit or report holds the results root, "
                        "wait up to SECONDS for it (default: refuse at once, naming it)")


def _set_default_main(p) -> None:
    def _usage(opts):
        p.print_help()
        return 2
    p.set_defaults(_main=_usage)


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="RESULTS",
                   help="results/<study> folder, its runs.jsonl, or the study's .toml")
    p.add_argument("--out", default=None, help="where to write the report (default: the results folder)")
    p.add_argument("--fit", default=None,
                   help="calibrate the exchange model from a 'hpcdl bench fit' file (fit.json) "
                        "instead of the study's [model] fit or its own runs; a declared "
                        "calibrate = {nodes_max} still calibrates the rest and predicts the others")
    p.add_argument("--exchange-bench", default=None, metavar="PATTERN",
                   help="the held-out points' exchange from the 'hpcdl tune' files at their node "
                        "count (a path with {nodes}, {ranks}, {ranks_per_node}, {network}), "
                        "instead of the study's [model] calibrate.exchange or the model's")
    p.add_argument("--loop-bench", default=None, metavar="PATH",
                   help="a loop file (hpcdl bench allocation --loop): the held-out Horovod "
                        "points' compute grows with the share Horovod's loop takes of a node at "
                        "their node count against the calibration's")
    p.add_argument("--spread-bench", default=None, metavar="PATH",
                   help="a spread file (hpcdl bench allocation --spread): the held-out "
                        "points' slowest rank is drawn from how far the allocation's nodes lay "
                        "apart computing at once at their node count")
    p.add_argument("--forecast", default=None, metavar="N,N,...",
                   help="node counts the model forecasts (default: the study's [model] forecast, "
                        "else 16,64,256; 'none' for none)")
    p.add_argument("--algorithm", choices=("ring", "ps"), default=None,
                   help="exchange algorithm of the model (default: ps for the ps backend, else ring)")
    p.add_argument("--networks", default=None, metavar="NAME,NAME,...",
                   help="the named networks the forecast is drawn on (default: the study's "
                        "[model] networks, else all of hpcdl's; 'none' for none)")
    p.add_argument("--residuals", default=None, metavar="PATH",
                   help="a residuals file (hpcdl study residuals): the band from other studies' "
                        "held-out errors on the same kind of machine (default: the results "
                        "root's forecast-residuals.json where it exists; 'none': the study's own)")
    p.add_argument("--max-ranks", default=None, help=argparse.SUPPRESS)     # gone: --forecast
    p.add_argument("--scaling", choices=("strong", "weak"), default=None,
                   help="for records made outside a study, which declare no scaling kind")
    p.add_argument("--no-plots", action="store_true", help="tables and model only")
    p.add_argument("--study", default=None, help="only records of this study name")
    p.add_argument("--allow-mixed", action="store_true",
                   help="pool records of different code (hpcdl/), study files, processors or "
                        "machine settings (refused by default); the report lists what it mixed")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="processes that read the records (default: one per core, at most 4, "
                        "for a results file over 32 MB, else 1)")


# --- the subcommands --------------------------------------------------------------------------

def validate_main(opts) -> int:
    for path in opts.studies:
        st = _study.load(path)
        if opts.quiet:
            continue
        print(f"{path}: OK: {st.summary()}")
        for pt in st.points():
            print(f"  {pt.id}: {pt.ranks} rank(s), batch {pt.batch_size}/rank, global {pt.global_batch}"
                  + (f"; exchange: the pick in {pt.tuning_path}" if pt.tuned else ""))
    return 0


def run_main(opts) -> int:
    from .. import report
    if opts.limit is not None and opts.limit < 1:
        raise UserError(f"--limit must be >= 1, got {opts.limit}")
    if opts.timeout is not None and not opts.timeout > 0:
        raise UserError(f"--timeout must be positive, got {opts.timeout}")
    st = _study.load(opts.study, results_root=opts.results_root)
    if not st.is_local:
        raise UserError(f"{opts.study}: layout.nodes asks for several nodes; run it with "
                        f"'hpcdl study submit' on a Slurm cluster, or use layout.ranks here")
    if opts.dry_run:
        return study_local.run_study(st, force=opts.force, limit=opts.limit, dry_run=True,
                                     timeout=opts.timeout, allocation=shlex.split(opts.allocation))
    checks.check_writable(st.runs_path, "the study's results file")     # before the lock's file
    _sigterm_interrupts()
    with rootlock.hold(Path(st.results_dir).parent, f"hpcdl study run {opts.study}", opts.wait):
        rc = study_local.run_study(st, force=opts.force, limit=opts.limit, timeout=opts.timeout,
                                   stream=opts.stream, allocation=shlex.split(opts.allocation))
        if rc == 0 and opts.report:
            written = report.write_report(st.results_dir, how=report.Reading(st.name))
            print(f"Report: {written['report']}")
    return rc


def _sigterm_interrupts() -> None:
    """SIGTERM (a scheduler's or kill's) unwinds `study run` like Ctrl-C: the running point's
    job is ended (:func:`hpcdl.launch.local.run`) and the lock released; the exit is 143."""
    def _raise(signum, frame):
        raise Terminated()
    signal.signal(signal.SIGTERM, _raise)


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as an interrupt; the command exits 128 + 15."""
    exit_code = 143


def report_main(opts) -> int:
    from .. import report
    src = Path(opts.source)
    name = opts.study
    if src.suffix == ".toml":
        st = _study.load(src)
        src, name = st.results_dir, name or st.name
    if not src.exists():
        raise UserError(f"{src}: no such results folder or file")
    if opts.loop_bench and not Path(opts.loop_bench).is_file():
        raise UserError(f"--loop-bench {opts.loop_bench}: no such file (make one with "
                        "'hpcdl bench allocation' on the allocation)")
    if opts.spread_bench and not Path(opts.spread_bench).is_file():
        raise UserError(f"--spread-bench {opts.spread_bench}: no such file (make one with "
                        "'hpcdl bench allocation' on the allocation)")
    if opts.algorithm is not None:
        raise UserError("--algorithm is gone: the model takes each point's allreduce from its "
                        "records (the MPI library's choice, or the tuning file's)")
    if opts.max_ranks is not None:
        raise UserError("--max-ranks is gone with the whole-step extrapolation: the forecast's "
                        "node counts are --forecast (default 16,64,256)")
    if opts.fit and not Path(opts.fit).is_file():
        raise UserError(f"--fit {opts.fit}: no such file (make one with 'hpcdl bench fit')")
    if opts.exchange_bench:
        _check_exchange_files(opts.exchange_bench)
    if opts.residuals not in (None, "none"):
        checks.schema_file(opts.residuals, "hpcdl.residuals/1", "--residuals",
                           "hpcdl study residuals")
    runs = report.runs_file(src)           # the file write_report reads
    held = (rootlock.hold(runs.parent.parent, f"hpcdl study report {opts.source}", opts.wait)
            if runs.name == "runs.jsonl" and os.access(runs.parent.parent, os.W_OK)
            else contextlib.nullcontext())
    with held:
        given = report.Inputs(fit=opts.fit, exchange=opts.exchange_bench, loop=opts.loop_bench,
                              spread=opts.spread_bench, forecast=None if opts.forecast is None
                              else _node_counts(opts.forecast),
                              networks=_networks(opts.networks), residuals=opts.residuals)
        written = report.write_report(src, opts.out, given, report.Reading(
            name, opts.scaling, opts.allow_mixed, opts.workers), plots=not opts.no_plots)
    for kind, path in written.items():
        if kind != "files":
            print(f"{kind}: {path}")
    print(f"{len(written['files'])} file(s) written to {Path(written['report']).parent}")
    return 0


def add_submit_arguments(p) -> None:
    p.add_argument("study", help="the study file, e.g. jobs/cluster-cnn-weak.toml")
    p.add_argument("--dry-run", action="store_true",
                   help="write the job scripts and show the sbatch commands, submit nothing")
    p.add_argument("--force", action="store_true", help="submit points that are already recorded too (never one whose job is "
                        "still queued or running)")
    machine.add_submit_options(p)
    p.add_argument("--scheduler", choices=("auto", "slurm", "gridengine"), default=None,
                   help="override the study's slurm.scheduler (auto: Slurm where sbatch is "
                        "installed, else Grid Engine)")
    p.add_argument("--partition", default=None, help="override the study's slurm.partition "
                                                     "(Grid Engine: the queue)")
    p.add_argument("--account", default=None, help="override the study's slurm.account")
    p.add_argument("--time", default=None, help="override the study's slurm.time (e.g. 02:00:00)")
    p.add_argument("--setup", default=None,
                   help="shell line that makes hpcdl's Python available in the job (default: "
                        "activate the venv running this command; e.g. 'module load hpcdl')")
    p.add_argument("--export", action="append", default=[], metavar="NAME=VALUE",
                   help="set an environment variable in the job scripts (repeatable)")
    p.add_argument("--results-root", default=None,
                   help="folder that holds results/<study> (default $HPCDL_RESULTS_ROOT or results)")
    p.add_argument("--tune", nargs="?", const="", default=None, metavar="'TUNE OPTIONS'",
                   help="make the tuning files the tuned points lack first: a job per layout "
                        "runs 'hpcdl tune' (with these options, e.g. '--knobs algorithm "
                        "--rounds 1') and the layout's tuned points start after it; the "
                        "same for the files [model] calibrate.exchange names for the report")
    p.add_argument("--allocation", default="", metavar="'OPTIONS'",
                   help="more options of the 'hpcdl bench allocation' jobs a study with "
                        "[model] forecast runs for each layout its files lack (e.g. "
                        "'--seconds 5 --rounds 2')")


def submit_main(opts) -> int:
    st = _study.load(opts.study, results_root=opts.results_root)
    if opts.dry_run:
        return _submit(st, opts)
    with rootlock.hold(Path(st.results_dir).parent, f"hpcdl study submit {opts.study}", opts.wait):
        return _submit(st, opts)


def _submit(st, opts) -> int:
    """Plan the study's jobs and submit them (the caller holds the results root)."""
    for flag, value in (("--partition", opts.partition), ("--account", opts.account)):
        if value is not None and not _study.scheduler_value_ok(value):
            raise UserError(f"{flag} {value!r}: letters, digits and _ . , : = + @ % / & | ! * "
                            "[ ] ( ) - only")
    software = submit.study_software(st, opts.export, opts.setup)
    plan = submit.plan_study(st, software, force=opts.force,
                             overrides={"partition": opts.partition, "account": opts.account,
                                        "time": opts.time, "scheduler": opts.scheduler},
                             unchecked=opts.unchecked,
                             tune=None if opts.tune is None else shlex.split(opts.tune),
                             allocation=shlex.split(opts.allocation))
    if not plan.steps and not plan.tunes and not opts.force:
        for pid, job in (plan.in_flight or {}).items():
            print(f"Point {pid}: {job}, not submitted again")
        if plan.in_flight:
            print(f"{len(plan.in_flight)} point(s) of {st.name} are queued or running; nothing new "
                  "to submit ('hpcdl study status' follows them)")
            return 0
        if plan.waiting:
            print("\n".join(plan.machine.waiting(plan.waiting)))
            return 0
        print(f"Every point of {st.name} is recorded; nothing to submit (--force submits again)")
        return 0
    submit.submit_study(plan, dry_run=opts.dry_run)
    return 0


def add_status_arguments(p) -> None:
    p.add_argument("study", help="the study file (jobs/X.toml) or its results folder")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                   help="wait until every submitted job has ended (at most SECONDS); exit 1 if "
                        "one did not complete, 124 on the time limit")
    p.add_argument("--results-root", default=None,
                   help="folder that holds results/<study> (default $HPCDL_RESULTS_ROOT or results)")


def residuals_main(opts) -> int:
    from .. import report
    doc = report.write_residuals(opts.folders, opts.out)
    points = sum(len(s["points"]) for s in doc["studies"])
    print(f"{opts.out}: {points} held-out point(s) of {len(doc['studies'])} of "
          f"{len(opts.folders)} studies; studies without held-out points or on mixed machines "
          "are left out")
    return 0


def status_main(opts) -> int:
    target = Path(opts.study)
    if target.is_dir():
        results_dir, ids, name = target, None, None
    else:
        st = _study.load(opts.study, results_root=opts.results_root)
        results_dir, name = Path(st.results_dir), st.name
        ids = [str(p.id) for p in st.points()]
    if not (results_dir / "jobs" / "submitted.jsonl").is_file():
        raise UserError(f"nothing submitted for {opts.study}: no {results_dir / 'jobs' / 'submitted.jsonl'} "
                        "(run hpcdl study submit first)")
    rows = status.study_status(results_dir, ids, name)
    rc = 0
    if opts.wait is not None:
        # the submission log is polled with the schedulers: a job a tune job deleted unstarted
        # is known only to the log
        deadline = time.monotonic() + opts.wait
        while status.unfinished(results_dir):
            if time.monotonic() >= deadline:
                rc = 124
                break
            time.sleep(1.0)
        rows = status.study_status(results_dir, ids, name)
        if rc == 0 and any(r["job_id"] and r["state"] != "COMPLETED" for r in rows):
            rc = 1
    if opts.json:
        print(json.dumps(rows, indent=1))
        return rc
    used = {r["scheduler"] for r in rows if r["scheduler"]}
    print(f"# {results_dir}: states from " + " and ".join(
        batch.BY_NAME[u].tools for u in sorted(used)))
    print(f"{'point':<24} {'job':>8}  {'state':<13} {'exit':>6} {'tries':>5}  recorded  reason")
    for r in rows:
        print(f"{r['point']:<24} {r['job_id'] or '-':>8}  {r['state']:<13} {r['exit_code'] or '-':>6} "
              f"{r['attempts']:>5}  {_recorded(r['recorded']):<8}  {r['reason'] or ''}")
    return rc


def _check_exchange_files(pattern: str) -> None:
    """--exchange-bench, named on the command line: some file matches it, and every one that
    does is a tuning file whose figures hold (else one line, exit 2)."""
    import glob
    import re
    found = sorted(glob.glob(re.sub(r"\{\w+\}", "*", pattern)))
    if not found:
        raise UserError(f"--exchange-bench {pattern}: no file matches (make them with 'hpcdl "
                        "tune --out' on the allocation)")
    for path in found:
        checks.schema_file(path, "hpcdl.tuning/1", "--exchange-bench", "hpcdl tune")


def _recorded(value) -> str:
    return "-" if value is None else "yes" if value else "no"


def _networks(text):
    """--networks' named networks (none for 'none'; None where not given), each one hpcdl knows."""
    if text is None:
        return None
    from ..costmodel import PRESETS as _PRESETS      # numpy: only when a report is made
    names = tuple(n.strip() for n in text.split(",") if n.strip() and n.strip() != "none")
    unknown = [n for n in names if n not in _PRESETS]
    if unknown:
        raise UserError(f"--networks {text}: {', '.join(unknown)} unknown; choose from "
                        + ", ".join(_PRESETS) + " or 'none'")
    return names


def _node_counts(text: str):
    """--forecast's node counts (none for 'none')."""
    if text.strip().lower() == "none":
        return ()
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] < 2:
        raise UserError(f"--forecast {text}: give node counts of 2 or more, such as 16,64,256, "
                        "or none")
    return tuple(counts)
