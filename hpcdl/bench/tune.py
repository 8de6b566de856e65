"""Find the fastest settings of the exchange a training step runs on this allocation, and write
them to a tuning file that training, the bench and studies take (--tuning, HPCDL_TUNING). Run it
on a workstation (it starts mpirun -np N itself), inside a Slurm job (srun over the job's
tasks) or inside a Grid Engine job (mpirun over its slots).

Every launch of the ranks builds the workload's model
(from the workload options, or a study file's ``[workload]``) and times, for its real gradient
tensors, the method a training step calls (``HorovodBackend.average``: one ``hvd.allreduce`` per
tensor in a ``tf.function``, fused by Horovod's background thread), per round the slowest rank's
median over ``--iters`` exchanges.

- **Open MPI's allreduce algorithm** (the library's own choice, ring, segmented ring, Rabenseifner,
  recursive doubling) first, under the job's environment: all of them inside each launch, written
  through MPI_T (:mod:`hpcdl.comm.mpit`) and taken up by a new communicator on which Horovod is
  started again, alternating in rounds (the order rotates each round). One that took over
  :data:`PRUNE` times the fastest's time in the first round, for every compression, is not timed
  again.
- **Horovod's cycle time, fusion threshold and hierarchical allreduce** (the last only where ranks
  share a node) then, one knob at a time (coordinate descent), with the fastest algorithm, one
  setting per launch, the candidates of a knob alternating over ``--rounds`` rounds of launches.
  They cannot be varied inside one process: Horovod 0.28 keeps the values it fixed from the
  environment at its first ``hvd.init`` through ``hvd.shutdown`` and a new ``hvd.init``, and crashes (SIGSEGV in
  ``ParameterManager::BayesianParameter::SetValue``) when it starts again after a start that
  fixed both. So a launch sets them once, before Horovod's first start, and where the job's
  environment fixes both, the algorithms get a launch each. A launch of one setting also times
  the workload's forward and backward pass on one batch while that Horovod runs beside it, and a
  knob's candidates are compared by exchange + compute: on a node with a fraction of a core the
  background thread's wake-ups slow the compute, which the exchange alone never shows.
- **Stopping at the link's bound**: where the machine sets its link rate, once the
  fastest algorithm's exchange is within ``--bound`` (15%) of the ring's bytes on each link at
  the link's payload rate, the model's bound, the knobs left are not searched (docs/decisions.md).
  Elsewhere every knob is searched.
- **The job's time limit**: inside a job (:func:`hpcdl.cluster.job_deadline`) no launch starts that
  would end within :data:`END_MARGIN` of the job's end (the longest launch so far is the
  estimate), and the budget is cut to fit. After every launch the fastest setting measured so
  far is written to the tuning file, marked ``partial``: a search the limit cut short, or a job
  killed, leaves a file that training can take.
- **The result against the default**, launched alike (one algorithm per launch) and alternating
  for ``--rounds`` rounds: the file takes the result only when its median is at least
  ``--margin`` faster; else the default (the job's environment, the library's own algorithm).
  Where only the algorithm was searched, it ran beside the default in the same launches, and
  those figures decide.
  Launches of different kinds are not compared with each other (a setting restarted for each
  round and one timed within one start time differently).

- **hpcdl's own exchanges** (``--knobs backend``, not searched by default): the ring and mpi
  backends, the flat step exchange training runs with them (:func:`hpcdl.train.replica.
  flat_exchange`: the gradients gathered into one buffer, averaged, cut back), timed in the
  confirming launches before each launch's Horovod starts, with the forward and backward pass
  beside nothing: training starts no Horovod for them (:mod:`hpcdl.train.collectives`). One that
  is ``--margin`` faster than Horovod's pick, by exchange + compute, becomes the pick: its
  backend is what ``hpcdl train`` runs where no ``--backend`` is given. Horovod overlaps its
  exchange with the backward pass in a step, which these timings do not credit.

A candidate's figure is the median of its rounds. The table gives each candidate's step exchange
time, its bus bandwidth, and references measured in the same launches: the MPI library's own
``MPI_Allreduce`` of one buffer of the same bytes, and the link's limit where its rate is set.
``--budget`` bounds the time spent launching (every candidate is measured at least once). The
search follows the first compression asked for; every launch times each compression asked for,
and each takes the search's result where it is faster for it.

This module is the driver; a launch's ranks run :mod:`.tune_launch`, which prints its figures as
one JSON line the driver reads.

Not tried: Horovod over Gloo. Its controller needs horovodrun's rendezvous; with the MPI
controller, Horovod 0.28 crashes when its CPU operations are switched to Gloo.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from . import tune_launch
from . import tune_file
from .tune_file import setting_label
from .tune_launch import MARKER
from .. import cluster, costmodel
from ..costmodel import HOROVOD_DEFAULTS, wire_bytes
from ..comm import tuning
from ..errors import UserError
from ..launch.local import time_left

END_MARGIN = 60.0    # s before the job's end that no launch may run into: the file is written

MIB = 1 << 20
KNOBS = {"cycle": ("HOROVOD_CYCLE_TIME", ("1", "0.2", "5")),
         "fusion": ("HOROVOD_FUSION_THRESHOLD", (str(128 * MIB), str(32 * MIB), str(8 * MIB))),
         "hierarchical": ("HOROVOD_HIERARCHICAL_ALLREDUCE", ("0", "1"))}
# Open MPI allreduce algorithms tried, as (number, segment bytes); 0 is the library's choice
CANDIDATES = ((0, 0), (4, 0), (5, MIB), (6, 0), (3, 0))
# hpcdl's flat backends, candidates with --knobs backend
FLAT = ("ring", "mpi")


def add_arguments(p: argparse.ArgumentParser) -> None:
    tune_launch.add_workload_arguments(p, "workload (whose gradient tensors are exchanged)")
    t = p.add_argument_group("search")
    t.add_argument("--np", type=int, default=2, help="ranks of each launch on a workstation (2); "
                   "in a Slurm job, the job's tasks; in a Grid Engine job, its slots")
    t.add_argument("--compression", default="none",
                   help="gradient compressions to tune, a comma list of none and fp16 (none); "
                        "each gets its own pick")
    t.add_argument("--knobs", default="algorithm,cycle,fusion,hierarchical",
                   help="what to tune, a comma list of algorithm, cycle, fusion, hierarchical "
                        "(these four by default; what cannot apply here is skipped with the "
                        "reason) and backend (hpcdl's ring and mpi exchanges as candidates "
                        "beside Horovod; hpcdl train runs the pick's backend where no --backend "
                        "is given)")
    t.add_argument("--budget", type=float, default=300.0,
                   help="seconds of launches, after each candidate has had one (300)")
    t.add_argument("--rounds", type=int, default=2, help="rounds of launches per Horovod knob (2)")
    t.add_argument("--worker-rounds", type=int, default=3,
                   help="rounds of the algorithms inside each launch (3)")
    t.add_argument("--iters", type=int, default=5, help="timed exchanges per candidate per round (5)")
    t.add_argument("--margin", type=float, default=0.03,
                   help="a setting replaces the default only when this much faster (0.03)")
    t.add_argument("--bound", type=float, default=0.15,
                   help="stop after the algorithm once its exchange is within this share of the "
                        "link's bound for a ring (where the machine sets the link's rate); 0 "
                        "searches every knob (0.15)")
    t.add_argument("--timeout", type=float, default=900.0, help="seconds a launch may take (900)")
    p.add_argument("--out", default=None,
                   help="the tuning file (default tuning/<cluster>-<nodes>n-<ranks>r.json)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)


# --- the search: launches, the table, the tuning file ----------------------------------------------

@dataclass
class Search:
    """What the launches measured: per Horovod setting (its overrides of the job's environment)
    the launches' results."""

    opts: object
    comps: List[str]
    knobs: List[str]
    algorithms: List[Tuple[int, int]]
    deadline: float = 0.0
    hard: Optional[float] = None      # no launch starts that would end past it (the job's end)
    out: Optional[str] = None         # the tuning file, written after every launch (partial)
    runs: Dict[str, List[dict]] = field(default_factory=dict)
    skipped: List[str] = field(default_factory=list)
    launches: int = 0
    backends: List[str] = field(default_factory=list)   # hpcdl's flat backends, as candidates

    def effective(self, env: dict) -> Dict[str, str]:
        """The Horovod settings a launch with overrides ``env`` ran with."""
        return {n: str(env.get(n, os.environ.get(n, d))) for n, d in HOROVOD_DEFAULTS.items()}

    def times(self, env: dict, alg: str, comp: str) -> List[float]:
        return [t for run in self.runs.get(_key(self.effective(env)), [])
                for t in run["times"].get(alg, {}).get(comp, [])]

    def median(self, env: dict, alg: Tuple[int, int], comp: str) -> float:
        """The median of every round measured for the setting and algorithm (inf: none)."""
        ts = self.times(env, f"{alg[0]}/{alg[1]}", comp)
        return statistics.median(ts) if ts else float("inf")

    def flat_times(self, env: dict, backend: str, comp: str) -> List[float]:
        """The rounds of ``backend``'s flat exchange timed in the launches of the setting."""
        return [t for run in self.runs.get(_key(self.effective(env)), [])
                for t in (run.get("flat") or {}).get(backend, {}).get(comp, [])]

    def flat_compute(self, env: dict) -> Optional[float]:
        """The median forward and backward pass measured in the setting's launches before their
        Horovod started (as beside a flat backend in training; None: not measured)."""
        ts = [t for run in self.runs.get(_key(self.effective(env)), [])
              for t in run.get("flat_compute") or []]
        return statistics.median(ts) if ts else None

    def compute(self, env: dict, alg: str) -> Optional[float]:
        """The median forward and backward pass measured while the setting's Horovod ran
        beside it (launches of one algorithm measure it; None: not measured)."""
        ts = [t for run in self.runs.get(_key(self.effective(env)), [])
              for t in (run.get("compute") or {}).get(alg, [])]
        return statistics.median(ts) if ts else None

    def step(self, env: dict, alg: Tuple[int, int], comp: str) -> float:
        """What a Horovod knob's candidates are compared by: the exchange, plus the compute
        measured beside it (a background thread that wakes often slows the step's compute on a
        node with a fraction of a core; it makes no difference to the exchange alone)."""
        return self.median(env, alg, comp) + (self.compute(env, f"{alg[0]}/{alg[1]}") or 0.0)

    def score(self, env: dict, comp: str) -> float:
        """The setting's fastest algorithm's median."""
        return min(self.median(env, a, comp) for a in self.algorithms)


def _key(effective: dict) -> str:
    return json.dumps(sorted(effective.items()))


def _workload_args(opts) -> List[str]:
    out = []
    for flag, value in (("--study", opts.study), ("--workload", opts.workload),
                        ("--model", opts.model), ("--image-size", opts.image_size),
                        ("--num-classes", opts.num_classes)):
        if value is not None:
            out += [flag, str(value)]
    return out


def _launch(se: Search, env: dict, algorithms: List[Tuple[int, int]], flat: bool = False) -> dict:
    """One launch of the ranks with the Horovod overrides ``env`` timing ``algorithms`` (and
    with ``flat`` the search's flat backends beside Horovod); its result, kept."""
    from ..launch.local import hpcdl_command, mpirun_command, run
    setting = {"env": env, "algorithms": algorithms, "compressions": se.comps,
               "backends": se.backends if flat else []}
    o = se.opts
    longest = max((r["seconds"] for runs in se.runs.values() for r in runs), default=None)
    if se.hard is not None and longest is not None and time.monotonic() + longest > se.hard:
        raise OutOfTime(f"the job's time limit: another launch ({longest:.0f} s the longest "
                        "so far) would end past it")
    cmd = hpcdl_command(["tune", "--worker", json.dumps(setting), "--iters", str(o.iters),
                               "--worker-rounds", str(o.worker_rounds), *_workload_args(o)])
    job = cluster.scheduler_facts()
    if job.get("scheduler") == "gridengine":
        argv = cluster.gridengine_mpirun() + cmd
    elif job.get("job_id"):
        argv = cluster.srun_step() + cmd
    else:
        argv = mpirun_command(o.np, cmd)
    res = run(argv, timeout=o.timeout)
    found = [ln for ln in res.stdout.splitlines() if ln.startswith(MARKER)]
    if res.returncode != 0 or res.timed_out or not found:
        tail = " | ".join((res.stdout + res.stderr).strip().splitlines()[-5:])
        raise UserError(f"a launch of hpcdl tune {'timed out' if res.timed_out else 'failed'} "
                        f"(exit {res.returncode}, {res.elapsed:.0f} s): {tail}")
    result = json.loads(found[-1][len(MARKER):])
    result["seconds"] = res.elapsed
    se.runs.setdefault(_key(se.effective(env)), []).append(result)
    se.launches += 1
    print(f"# launch {se.launches} ({res.elapsed:.0f} s): {setting_label(se.effective(env))}: "
          + ", ".join(f"{c} {se.score(env, c) * 1e3:.2f} ms" for c in se.comps)
          + "".join(f"; {b} {c} {statistics.median(ts) * 1e3:.2f} ms"
                    for b, by in (result.get("flat") or {}).items() for c, ts in by.items() if ts),
          flush=True)
    _write_partial(se)
    return result


class OutOfTime(Exception):
    """The search stops: what it measured is the result."""


def _write_partial(se: Search) -> None:
    """The best found so far, written after each launch (atomically) and marked partial: a job
    killed at its time limit leaves a file training can take."""
    first = next(iter(se.runs.values()))[0]
    if first["ranks"] < 2:
        return
    se.out = se.out or _default_out(first)
    tuning.write(se.out, tune_file.document(se, _best_so_far(se), first, se.skipped, partial=True))


def _best_so_far(se: Search) -> Dict[str, dict]:
    """Per compression, the fastest setting measured so far (the search's unconfirmed pick)."""
    picks = {}
    for comp in se.comps:
        rows = [(statistics.median(ts), key, alg)
                for _, key, alg, ts in tune_file.rows(se, comp) if ts]
        if not rows:
            continue
        t, key, alg = min(rows)
        effective = dict(json.loads(key))
        number, segment = (int(x) for x in alg.split("/"))
        picks[comp] = {"env": tune_file.pick_env(effective, (number, segment)), "exchange_s": t,
                       "name": setting_label(effective, alg), "chosen": True, "partial": True}
    return picks


def _default_out(first: dict) -> str:
    return (f"tuning/{cluster.scheduler_facts().get('cluster') or first['host']}-"
            f"{first['nodes']}n-{first['ranks']}r.json")


def _search(se: Search) -> Tuple[dict, Tuple[int, int]]:
    """The algorithm first, under the job's environment (all of them in each launch, or one per
    launch where the environment fixes both the cycle time and the fusion threshold: Horovod
    cannot start twice then), then the Horovod knobs one at a time with the fastest algorithm
    (coordinate descent). Each stage's candidates are launched in rotating order for ``--rounds``
    rounds (fewer when the stage's share of the budget is spent, never none); the fastest is
    kept when ``--margin`` faster than the current one."""
    comp = se.comps[0]
    alg: Tuple[int, int] = (0, 0)
    stages = (["algorithm"] if len(se.algorithms) > 1 else []) + se.knobs
    if not stages or stages[0] == "hierarchical":
        _launch(se, {}, [alg])        # the default first: it tells the ranks per node
    base: dict = {}
    for i, knob in enumerate(stages):
        stop = time.monotonic() + max(0.0, se.deadline - time.monotonic()) / (len(stages) - i)
        if knob == "algorithm":
            both = all(n in os.environ for n in ("HOROVOD_CYCLE_TIME", "HOROVOD_FUSION_THRESHOLD"))
            groups = [[a] for a in se.algorithms] if both else [list(se.algorithms)]
            _rounds(se, [({}, g) for g in groups], stop)
            alg = min(se.algorithms, key=lambda a: se.median({}, a, comp))
            if not se.median({}, alg, comp) < (1 - se.opts.margin) * se.median({}, (0, 0), comp):
                alg = (0, 0)
            print(f"# algorithm: {setting_label(se.effective({}), f'{alg[0]}/{alg[1]}')}",
                  flush=True)
            near = _near_bound(se, alg, comp)
            if near and i + 1 < len(stages):
                se.skipped += [f"{k}: {near}" for k in stages[i + 1:]]
                print(f"# stopped: {near}", flush=True)
                break
            continue
        name, values = KNOBS[knob]
        first = next(iter(se.runs.values()), [{}])[0]
        if knob == "hierarchical" and first.get("ranks_per_node", 2) < 2:
            se.skipped.append("hierarchical: one rank per node, nothing to reduce within a node")
            continue
        cands, seen = [], set()
        for c in [base] + [dict(base, **{name: v}) for v in values]:
            if _key(se.effective(c)) not in seen:
                seen.add(_key(se.effective(c)))
                cands.append(c)
        _rounds(se, [(c, [alg]) for c in cands], stop)
        fastest = min(cands, key=lambda c: se.step(c, alg, comp))
        if se.step(fastest, alg, comp) < (1 - se.opts.margin) * se.step(base, alg, comp):
            base = fastest
        print(f"# {knob}: {setting_label(se.effective(base), f'{alg[0]}/{alg[1]}')}", flush=True)
    return base, alg


def _near_bound(se: Search, alg: Tuple[int, int], comp: str) -> str:
    """Why the search stops after the algorithm ("" where it goes on): the algorithm's exchange
    within ``--bound`` of the link's bound, the ring's bytes on each link at its payload rate
    (the bytes the report's model puts there); the knobs left can gain at most that."""
    first = next(iter(se.runs.values()), [{}])[0]
    limit = first.get("link_limit_s")
    if not se.opts.bound or not limit:
        return ""
    nbytes = first["bytes"]
    bound = (limit * wire_bytes(nbytes // 4, comp) / wire_bytes(nbytes // 4, "none")
             / costmodel.FRAMING)
    t = se.median({}, alg, comp)
    if t > bound * (1 + se.opts.bound):
        return ""
    return (f"the exchange {t * 1e3:.1f} ms is {t / bound:.2f}x the link's bound for a ring "
            f"({bound * 1e3:.1f} ms), within --bound {se.opts.bound:g}: not searched")


def _confirm(se: Search, base: dict, alg: Tuple[int, int]) -> Dict[str, Dict[str, List[float]]]:
    """The search's result against the default, launched alike (one algorithm per launch)
    and alternating for ``--rounds`` rounds: per side ("pick", "default") and compression, the
    rounds' times. The search's stages compared candidates within a stage; this compares the
    two that the tuning file chooses between, the same way."""
    default_env = _key(se.effective(base)) == _key(se.effective({}))
    same = default_env and alg == (0, 0)
    if se.backends:
        return _confirm_with_flat(se, base, alg, same)
    if same or (default_env and not se.knobs):
        # the search kept the default, or searched only the algorithm (which ran beside the
        # default in the same launches, alternating, restarted alike): nothing to confirm
        return {side: {c: [t for run in se.runs[_key(se.effective({}))]
                           for t in run["times"].get(f"{a[0]}/{a[1]}", {}).get(c, [])]
                       for c in se.comps}
                for side, a in (("default", (0, 0)), ("pick", alg))}
    kept, se.runs = se.runs, {}
    try:
        _rounds(se, [({}, [(0, 0)]), (base, [alg])], float("inf"))
        out = {"default": {c: se.times({}, "0/0", c) for c in se.comps},
               "pick": {c: se.times(base, f"{alg[0]}/{alg[1]}", c) for c in se.comps}}
        comp = {"default": se.compute({}, "0/0"), "pick": se.compute(base, f"{alg[0]}/{alg[1]}")}
        if None not in comp.values():       # the compute beside each, measured in these launches
            out["compute"] = comp
    finally:
        se.runs = kept
    return out


def _confirm_with_flat(se: Search, base: dict, alg: Tuple[int, int], same: bool) -> dict:
    """:func:`_confirm` where hpcdl's flat backends are candidates too: the default and the
    search's result launched alike and alternating (the default alone when the search kept it),
    each launch timing the flat backends before its Horovod starts (training starts none for
    them), so every candidate the file chooses between is measured in the same launches."""
    kept, se.runs = se.runs, {}
    sides = [("default", {}, (0, 0))] + ([] if same else [("pick", base, alg)])
    try:
        _rounds(se, [(env, [a]) for _, env, a in sides], float("inf"), flat=True)
        out = {side: {c: se.times(env, f"{a[0]}/{a[1]}", c) for c in se.comps}
               for side, env, a in sides}
        out.setdefault("pick", out["default"])
        # per Horovod setting once (an algorithm-only pick shares the default's launches' setting)
        envs = {_key(se.effective(env)): (side, env) for side, env, _ in reversed(sides)}
        out["flat"] = {side: {b: {c: se.flat_times(env, b, c) for c in se.comps}
                              for b in se.backends} for side, env in envs.values()}
        out["flat_compute"] = {side: se.flat_compute(env) for side, env in envs.values()}
        comp = {side: se.compute(env, f"{a[0]}/{a[1]}") for side, env, a in sides}
        comp.setdefault("pick", comp["default"])
        if None not in comp.values():
            out["compute"] = comp
    finally:
        se.runs = kept
    return out


def _rounds(se: Search, cands, stop: float, flat: bool = False) -> None:
    """``--rounds`` rounds of launches of ``cands`` ((overrides, algorithms) each), the order
    rotating every round; no new round once ``stop`` has passed."""
    for r in range(se.opts.rounds):
        if r and time.monotonic() > stop:
            break
        k = r % len(cands)
        for env, algs in cands[k:] + cands[:k]:
            _launch(se, env, algs, flat)


def main(opts) -> int:
    if opts.worker:
        return tune_launch.run(opts)
    comps = [c.strip() for c in opts.compression.split(",") if c.strip()]
    knobs = [k.strip() for k in opts.knobs.split(",") if k.strip()]
    bad = [k for k in knobs if k not in KNOBS and k not in ("algorithm", "backend")]
    if not comps or set(comps) - {"none", "fp16"}:
        raise UserError(f"--compression {opts.compression}: tune none, fp16 or both")
    if bad:
        raise UserError(f"--knobs: unknown {', '.join(bad)}; choose from algorithm, "
                        f"{', '.join(KNOBS)}, backend")
    if opts.budget < 0 or min(opts.rounds, opts.worker_rounds, opts.iters, opts.np) < 1 \
            or not 0 <= opts.margin < 1 or not opts.bound >= 0:
        raise UserError("--budget must be >= 0, --rounds, --worker-rounds, --iters and --np at "
                        "least 1, --margin in [0, 1), --bound >= 0")
    if cluster.discover().size > 1:
        raise UserError("run hpcdl tune itself, not under mpirun or srun: it launches the ranks")
    se = Search(opts, comps, [k for k in knobs if k not in ("algorithm", "backend")],
                list(CANDIDATES) if "algorithm" in knobs else [(0, 0)],
                backends=list(FLAT) if "backend" in knobs else [])
    started = time.monotonic()
    se.out = opts.out
    left = time_left()       # the enclosing job's, whichever scheduler runs it
    if left is not None:     # the job's end, less a margin to write the file and leave
        se.hard = started + left - END_MARGIN
        print(f"# the job ends in {left:.0f} s: no launch starts that would end "
              f"within {END_MARGIN:.0f} s of it", flush=True)
    se.deadline = min(started + opts.budget, se.hard or math.inf)
    try:
        base, alg = _search(se)
        confirm = _confirm(se, base, alg)
    except OutOfTime as exc:
        if not se.runs:
            raise UserError(f"hpcdl tune: {exc}, before any launch") from None
        print(f"# stopped: {exc}; {se.out} holds the fastest measured (partial)", flush=True)
        return 0
    first = next(iter(se.runs.values()))[0]
    skipped = list(first.get("skipped") or []) + se.skipped
    if first["ranks"] < 2:
        raise UserError("hpcdl tune needs at least 2 ranks: one rank exchanges nothing")
    picks = tune_file.picks(se, base, alg, confirm)
    print("\n".join(tune_file.table(se, picks, first)), flush=True)
    path = se.out or _default_out(first)
    tuning.write(path, tune_file.document(se, picks, first, skipped))
    print(f"# tuning file: {path} (hpcdl train --tuning {path}, or HPCDL_TUNING={path})", flush=True)
    print(f"# hpcdl tune took {time.monotonic() - started:.0f} s ({se.launches} launch(es))",
          flush=True)
    return 0
