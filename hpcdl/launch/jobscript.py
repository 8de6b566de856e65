"""Render job scripts: a pure function from typed parameters to script text.

The templates ship inside the package (``hpcdl/templates``, read with ``importlib.resources``),
with ``{{name}}`` placeholders and ``{{> part}}`` includes of ``_part.sh``. The ``#SBATCH`` lines
are sorted ``--key=value`` lines, so a rendered script can be compared with a golden file.
``python -m hpcdl.launch.jobscript`` writes the script of one training run (Slurm, or Grid
Engine as on TSUBAME). Standard library only: this runs on a login node without TensorFlow.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
import textwrap
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Tuple

from .command import with_threads
from .jobspec import DEFAULT_EXPORTS, ENV_NAME, Export, Job, Software, _hms
from .scheduler import sbatch
from ..errors import UserError

__all__ = ["Job", "Software", "Export", "DEFAULT_EXPORTS", "sbatch_options", "render_train",
           "render_study_step", "render_study_command", "render_study_tune", "render_report",
           "render_qsub", "train_command"]

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
_PARTIAL = re.compile(r"^\{\{>\s*([a-z_]+)\s*\}\}$", re.M)
# Settings that mean nothing to a Grid Engine script (it always starts ranks with mpirun).
_SLURM_ONLY = ("HPCDL_LAUNCHER", "HPCDL_SRUN_MPI")


def _dq(value: str) -> str:
    """``value`` inside double quotes, safe for bash."""
    return '"' + re.sub(r'(["\\$`])', r"\\\1", str(value)) + '"'


def _render_exports(software: Software, skip: Sequence[str] = ()) -> Tuple[str, List[str]]:
    """The settings block and the names it exports."""
    overrides = dict(software.exports)
    known = {e.name for e in DEFAULT_EXPORTS}
    items = [Export(e.name, overrides.get(e.name, e.value), e.example, e.doc) if e.name in overrides
             else e for e in DEFAULT_EXPORTS]
    items += [Export(name, value, value or "", "Set for this job.")
              for name, value in sorted(overrides.items()) if name not in known]
    lines, names = [], []
    for e in items:
        if e.name in skip:
            continue
        lines += textwrap.wrap(e.doc, 99, initial_indent="# ", subsequent_indent="# ")
        if e.value is None:
            lines.append(f"# export {e.name}={e.example}")
        else:
            lines.append(f'export {e.name}="${{{e.name}:-{_dq(e.value)[1:-1]}}}"')
            names.append(e.name)
    return "\n".join(lines), names


def sbatch_options(job: Job, preemptible: bool = True) -> List[str]:
    """The job's sbatch options, sorted by name."""
    opts = {
        "--job-name": job.name,
        "--nodes": str(job.nodes),
        "--ntasks-per-node": str(job.ntasks_per_node),
        "--time": _hms(job.seconds),
        "--output": job.output,
    }
    if job.cpus_per_task is not None:
        opts["--cpus-per-task"] = str(job.cpus_per_task)
    if job.gpus_per_node:
        opts["--gpus-per-node"] = str(job.gpus_per_node)
    if job.partition:
        opts["--partition"] = job.partition
    if job.account:
        opts["--account"] = job.account
    if preemptible and job.signal_lead is not None:
        opts["--signal"] = f"B:USR1@{job.signal_lead}"
        opts["--requeue"] = None
        opts["--open-mode"] = "append"     # a requeued attempt adds to the same output file
    for opt in job.extra:
        key, _, value = str(opt).partition("=")
        opts[key] = value if _ else None
    return [k if v is None else f"{k}={v}" for k, v in sorted(opts.items())]


def _sbatch_block(job: Job, preemptible: bool = True) -> str:
    return "\n".join(f"#SBATCH {o}" for o in sbatch_options(job, preemptible))


def train_command(train_args: Sequence[str], python: str = "python",
                  checkpoint_dir_var: Optional[str] = "$CKPT_DIR") -> str:
    """The words of ``python -m hpcdl train ARGS`` for a bash array, one option per line."""
    args = list(train_args)
    if checkpoint_dir_var and "--checkpoint-dir" not in args:
        args += ["--checkpoint-dir", checkpoint_dir_var]
    groups: List[List[str]] = [[shlex.quote(python), "-m", "hpcdl", "train"]]
    for a in args:
        word = f'"{a}"' if a == checkpoint_dir_var else shlex.quote(a)
        if a.startswith("-") or len(groups) == 1:
            groups.append([word])
        else:
            groups[-1].append(word)
    return "\n    ".join(" ".join(g) for g in groups)


# --- templates ---------------------------------------------------------------------------------------

def _load(name: str, depth: int = 0) -> str:
    text = resources.files("hpcdl").joinpath("templates", name).read_text()
    if depth > 4:
        raise RuntimeError(f"template includes nest too deep at {name}")
    return _PARTIAL.sub(lambda m: _load(f"_{m.group(1)}.sh", depth + 1).rstrip("\n"), text)


def _fill(name: str, values: Mapping[str, object]) -> str:
    text = _load(name)
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(text)} - set(values))
    if missing:
        raise RuntimeError(f"template {name} needs values for {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)


def _common(job: Job, software: Software, script_name: str, skip_exports=(),
            override: str = "exporting it before sbatch (sbatch hands the submitting shell's "
                            "environment to the job)") -> dict:
    exports, _ = _render_exports(software, skip_exports)
    return {"override": "\n# ".join(textwrap.wrap(f"Each has a default here and can be overridden "
                                                  f"by {override}. Commented lines are examples "
                                                  "that are off.", 98)),
            "nodes": job.nodes, "ranks_per_node": job.ntasks_per_node, "ranks": job.ranks,
            "job_name": job.name, "script_name": script_name,
            "signal_lead": job.signal_lead if job.signal_lead is not None else 0,
            "exports": exports, "workdir": shlex.quote(software.workdir),
            "activate": software.activate}


def render_train(job: Job, software: Software, train_args: Sequence[str], checkpoint_dir: str,
                 script_name: str = "train.sbatch") -> str:
    """the ``train.sbatch`` template for one training run."""
    if job.signal_lead is None:
        raise UserError("a training job needs signal_lead: its checkpoint-and-requeue relies on USR1")
    values = _common(job, software, script_name)
    values.update(sbatch=_sbatch_block(job), checkpoint_dir=shlex.quote(str(checkpoint_dir)),
                  train=train_command(train_args, software.python))
    return _fill("train.sbatch", values)


def render_study_step(job: Job, software: Software, study: str, study_path: str, point_id: str,
                      point: Mapping, train_args: Sequence[str], checkpoint_dir: str,
                      script_name: str = "study-step.sbatch", gridengine: Optional[Mapping] = None
                      ) -> str:
    """the ``study-step.sbatch`` template for one point of a study; with ``gridengine`` (its
    ``pe`` and ``resources``, :func:`qsub_options`) ``study-step.qsub``."""
    if job.signal_lead is None:
        raise UserError("a study step needs signal_lead: its checkpoint-and-requeue relies on USR1")
    values = _gridengine_values(job, software, script_name, gridengine) if gridengine is not None \
        else dict(_common(job, software, script_name), sbatch=_sbatch_block(job))
    values.update(checkpoint_dir=shlex.quote(str(checkpoint_dir)),
                  train=train_command(train_args, software.python), study=study,
                  study_path=study_path, point_id=point_id,
                  point_json=json.dumps(dict(point), sort_keys=True))
    return _fill("study-step.qsub" if gridengine is not None else "study-step.sbatch", values)


def render_study_command(job: Job, software: Software, study: str, study_path: str,
                         point_id: str, point: Mapping, argv: Sequence[str],
                         env: Mapping[str, str], spec_path: str, log: str,
                         script_name: str = "study-command.sbatch") -> str:
    """the ``study-command.sbatch`` template: one point of a study of the user's own command.
    It requeues when Slurm requeues it (the command starts again) and takes no USR1 warning:
    hpcdl cannot checkpoint a script it does not run."""
    job = replace(job, signal_lead=None, extra=tuple(job.extra) + ("--requeue", "--open-mode=append"))
    values = _common(job, software, script_name)
    words = [shlex.quote(a) for a in with_threads(argv, software.python)]
    values.update(sbatch=_sbatch_block(job), study=study, study_path=study_path,
                  point_id=point_id, point_json=json.dumps(dict(point), sort_keys=True),
                  spec=shlex.quote(str(spec_path)), log=shlex.quote(str(log)),
                  point_env="\n".join(f"export {k}={shlex.quote(str(v))}"
                                       for k, v in sorted(env.items())),
                  command=" ".join(words), python=shlex.quote(software.python))
    return _fill("study-command.sbatch", values)


def render_study_tune(job: Job, software: Software, study: str, study_path: str,
                      tuning_file: str, tune_args: Sequence[str],
                      script_name: str = "study-tune.sbatch",
                      gridengine: Optional[Mapping] = None) -> str:
    """the ``study-tune.sbatch`` template: ``hpcdl tune`` for a study's tuned points of one
    layout (``tune_args``: its options, ``--study`` and ``--out`` among them); with
    ``gridengine`` (:func:`qsub_options`' ``pe`` and ``resources``) ``study-tune.qsub``."""
    job = replace(job, signal_lead=None)
    values = _prep_values(job, software, script_name, gridengine)
    tune = " ".join([shlex.quote(software.python), "-m", "hpcdl", "tune"]
                    + [shlex.quote(str(a)) for a in tune_args])
    values.update(study=study, study_path=study_path, tuning_file=shlex.quote(str(tuning_file)),
                  tune=tune, seconds=job.seconds, python=shlex.quote(software.python))
    return _fill("study-tune.qsub" if gridengine is not None else "study-tune.sbatch", values)


def render_study_allocation(job: Job, software: Software, study: str, study_path: str,
                            args: Sequence[str],
                            script_name: str = "study-allocation.sbatch",
                            gridengine: Optional[Mapping] = None) -> str:
    """the ``study-allocation.sbatch`` template: ``hpcdl bench allocation`` on one layout of a
    study that asks for a forecast (``args``: its options, ``--study``, ``--spread`` and
    ``--loop`` among them); with ``gridengine``, ``study-allocation.qsub``."""
    job = replace(job, signal_lead=None)
    values = _prep_values(job, software, script_name, gridengine)
    measure = " ".join([shlex.quote(software.python), "-m", "hpcdl", "bench", "allocation"]
                       + [shlex.quote(str(a)) for a in args])
    values.update(study=study, study_path=study_path, measure=measure)
    return _fill("study-allocation.qsub" if gridengine is not None
                 else "study-allocation.sbatch", values)


def _prep_values(job: Job, software: Software, script_name: str,
                 gridengine: Optional[Mapping]) -> dict:
    """A study's preparing job (a tune, an allocation measurement) is not preempted: it holds
    no checkpoint, and a requeued run would measure again from the start."""
    if gridengine is not None:
        return _gridengine_values(job, software, script_name, gridengine, preemptible=False)
    return dict(_common(job, software, script_name), sbatch=_sbatch_block(job, preemptible=False))


def render_report(job: Job, software: Software, study: str, results_dir: str,
                  script_name: str = "report.sbatch", gridengine: Optional[Mapping] = None) -> str:
    """the ``report.sbatch`` template: ``hpcdl study report`` once every step has ended; with
    ``gridengine``, ``report.qsub``."""
    if gridengine is not None:
        values = _gridengine_values(job, software, script_name, gridengine, preemptible=False)
    else:
        values = dict(_common(job, software, script_name),
                      sbatch=_sbatch_block(job, preemptible=False))
    # --wait: a study run or submit holding the results root just then delays the report, not
    # fails it (hpcdl.study.lock)
    report = " ".join([shlex.quote(software.python), "-m", "hpcdl", "study", "report",
                       shlex.quote(str(results_dir)), "--wait", "3600"])
    values.update(study=study, results_dir=shlex.quote(str(results_dir)), report=report)
    return _fill("report.qsub" if gridengine is not None else "report.sbatch", values)


def _gridengine_hms(secs: int) -> str:
    h, rest = divmod(int(secs), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def qsub_options(job: Job, pe: Optional[str] = None, resources: Sequence[str] = (),
                 preemptible: bool = True) -> List[str]:
    """The job's ``#$`` lines for Grid Engine. ``pe``: the parallel environment, given the job's
    ranks as slots (``-pe mpi 4``); None: TSUBAME's full nodes (``-l node_f=N``). ``job.partition``
    is the queue (``-q``); ``resources`` more ``-l`` requests (a consumable, ``NAME=1``)."""
    lines = ["-S /bin/bash", f"-N {job.name}", "-cwd", "-j y",
             f"-pe {pe} {job.ranks}" if pe else f"-l node_f={job.nodes}",
             f"-l h_rt={_gridengine_hms(job.seconds)}"]
    if job.partition:
        lines.append(f"-q {job.partition}")
    if job.account and pe:
        lines.append(f"-A {job.account}")
    lines += [f"-l {r}" for r in resources]
    if preemptible and job.signal_lead is not None:     # Job keeps signal_lead under the limit
        # the soft limit sends USR1; -notify USR1/USR2 before a suspend/kill; -r y: a job that
        # exits 99 (or whose node fails) runs again
        lines += [f"-l s_rt={_gridengine_hms(job.seconds - job.signal_lead)}", "-notify", "-r y"]
    return ["#$ " + ln for ln in lines]


def _gridengine_values(job: Job, software: Software, script_name: str, ge: Mapping,
                       preemptible: bool = True) -> dict:
    """What a Grid Engine script's template needs beyond :func:`_common`: its ``#$`` lines
    (``ge``: ``pe``, ``resources``) and the variables mpirun passes on to the ranks."""
    values = _common(job, software, script_name, skip_exports=_SLURM_ONLY,
                     override="qsub -v NAME=value")
    _, names = _render_exports(software, _SLURM_ONLY)
    fwd = ["PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "HPCDL_STOP_FILE", "HPCDL_JOB_STARTED", *names]
    values.update(qsub="\n".join(qsub_options(job, ge.get("pe"), ge.get("resources") or (),
                                              preemptible)),
                  forward=" ".join(fwd))
    return values


def render_qsub(job: Job, software: Software, train_args: Sequence[str], checkpoint_dir: str,
                group: Optional[str] = None, script_name: str = "train.qsub",
                pe: Optional[str] = None, resources: Sequence[str] = ()) -> str:
    """the ``train.qsub`` template: the same run for a Grid Engine cluster, preemption-safe.

    Without ``pe``, TSUBAME's flavour: full nodes (``node_f``) and ``job.account`` (or ``group``)
    the group given to ``qsub -g``. With ``pe`` (e.g. ``mpi``, one slot per node), the job asks
    for its ranks as slots of that parallel environment.
    """
    if job.signal_lead is None:
        raise UserError("a training job needs signal_lead: its checkpoint-and-requeue relies on USR1")
    values = _gridengine_values(job, software, script_name, {"pe": pe, "resources": resources})
    group = None if pe else (group or job.account or "GROUP")
    values.update(submit=f"qsub -g {group} {script_name}" if group else f"qsub {script_name}",
                  checkpoint_dir=shlex.quote(str(checkpoint_dir)),
                  train=train_command(train_args, software.python))
    return _fill("train.qsub", values)


def parse_exports(items: Sequence[str], base: Optional[Mapping] = None) -> dict:
    out = {str(k): (None if v is None else str(v)) for k, v in dict(base or {}).items()}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not ENV_NAME.match(name):
            raise UserError(f"--export '{item}' must look like NAME=VALUE")
        out[name] = value
    return out



# --- python -m hpcdl.launch.jobscript: one training run ----------------------------------------------

def main(argv: Optional[Sequence[str]] = None) -> int:
    """Render train.sbatch (or the Grid Engine script) for one run; optionally submit it."""
    import argparse
    p = argparse.ArgumentParser(
        prog="python -m hpcdl.launch.jobscript",
        description="Write the job script of one hpcdl training run, e.g. "
                    "'python -m hpcdl.launch.jobscript --nodes 2 --time 01:00:00 -o train.sbatch -- "
                    "--workload cnn --model resnet50'. Arguments after -- go to 'hpcdl train'.")
    p.add_argument("--kind", choices=("sbatch", "qsub"), default="sbatch",
                   help="sbatch: the train.sbatch template; qsub: train.qsub (Grid Engine; "
                        "TSUBAME's node_f unless --pe)")
    p.add_argument("--pe", default=None, help="qsub: the parallel environment for the ranks' slots")
    p.add_argument("--name", default="hpcdl-train", help="job name")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--ntasks-per-node", type=int, default=1, help="ranks per node (GPUs per node on GPU nodes)")
    p.add_argument("--cpus-per-task", type=int, default=None)
    p.add_argument("--gpus-per-node", type=int, default=None)
    p.add_argument("--time", default="00:30:00")
    p.add_argument("--partition", default=None)
    p.add_argument("--account", default=None, help="Slurm account, or the TSUBAME group for qsub -g")
    p.add_argument("--signal-lead", type=int, default=120,
                   help="seconds before the time limit at which the run checkpoints (120)")
    p.add_argument("--checkpoint-dir", default="checkpoints/train",
                   help="where the run checkpoints (default checkpoints/train)")
    p.add_argument("--export", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting in the script (repeatable), e.g. NCCL_SOCKET_IFNAME=ib0")
    p.add_argument("--setup", default=None, help="shell line that makes hpcdl's Python available "
                                                 "(default: activate the venv running this)")
    p.add_argument("-o", "--output", default=None, help="write the script here (default: stdout)")
    p.add_argument("--submit", action="store_true", help="sbatch the written script, print its job id")
    p.add_argument("train_args", nargs=argparse.REMAINDER)
    opts = p.parse_args(argv)
    args = opts.train_args[1:] if opts.train_args[:1] == ["--"] else opts.train_args
    try:
        job = Job(name=opts.name, nodes=opts.nodes, ntasks_per_node=opts.ntasks_per_node,
                  cpus_per_task=opts.cpus_per_task, gpus_per_node=opts.gpus_per_node,
                  time=opts.time, partition=opts.partition, account=opts.account,
                  signal_lead=opts.signal_lead)
        software = Software.here(exports=parse_exports(opts.export), activate=opts.setup)
        ckpt = str(Path(opts.checkpoint_dir).resolve())
        name = Path(opts.output).name if opts.output else None
        if opts.kind == "qsub":
            text = render_qsub(job, software, args, ckpt, script_name=name or "train.qsub", pe=opts.pe)
        else:
            text = render_train(job, software, args, ckpt, script_name=name or "train.sbatch")
        if opts.submit and (opts.kind != "sbatch" or not opts.output):
            raise UserError("--submit needs --kind sbatch and -o FILE")
        if not opts.output:
            sys.stdout.write(text)
            return 0
        Path(opts.output).write_text(text)
        Path(opts.output).chmod(0o755)
        if opts.submit:
            print(sbatch(opts.output, cwd=Path(opts.output).resolve().parent))
    except UserError as exc:
        sys.stderr.write(f"{p.prog}: error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
