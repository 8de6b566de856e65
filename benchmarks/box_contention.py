#!/usr/bin/env python
"""Does a box node compute more slowly when the other nodes compute too? On the cluster box all
nodes share one host, so a study's compute could grow with the node count for that reason alone.
Here k independent one-node trainings (``hpcdl train``, one rank each, no exchange between them:
a study file's workload, its first point's flags) run at once on nodes n1..nk, for k in
``--nodes``, the order alternating over ``--rounds``; per run, each rank's probes of compute
alone (first left out) as training records them.

Per k: the median over rounds of the ranks' median probe, its ratio to k = 1's, and the CPU
seconds a probe took (the process's, all threads). Nothing exchanges, so what changes with k is
the host: its other nodes' load, not the training's own peers.

    scripts/cluster-box.sh up 8 --link 200mbit --cpus-per-node 0.2 && scripts/cluster-box.sh check
    python -m benchmarks.box_contention --study jobs/box-cnn-weak5.toml --rounds 3 \\
        --json results/tuning/box-spread.json > results/box-contention.txt

With ``--json PATH`` it also writes the nodes' spread as a spread file (``hpcdl.host-spread/1``):
per k and round, each node's median probe over the round's center (the median of all its
nodes' probes, as a record's ranks are centred), and the machine setting it measured. ``hpcdl
study report --spread-bench PATH`` (or a study's ``calibrate = { spread = ... }``) predicts a
held-out point's slowest rank from the spread measured at the largest node count <= its own
(:mod:`hpcdl.model.host_spread`).

The runs are plain ``srun`` steps beside each other (the box's licence would queue them one after
another), so on the box the script refuses to start while a job is queued or running there.
Inside a Slurm allocation (``sbatch``/``salloc`` on a cluster, or on the box) it runs them on the
allocation's first k nodes instead, one step per node, and the spread file names the processor
(and the box's settings, on the box) that the allocation's records will carry::

    sbatch -N 8 --wrap "python -m benchmarks.box_contention --study jobs/my.toml \\
        --json tuning/spread.json"

With ``--coupled`` the k nodes run one k-rank training instead (the study's first point, its
backend exchanging between them, one job at a time under the box's licence): each rank's probes
then time its compute as a held-out point's do, with Horovod's loop agreeing with the k-1 others
every cycle and Open MPI waiting beside the compute. Independent nodes show only the host's
share of the spread; on the box's 0.2-core nodes the training's own ranks lay wider apart (the
slowest rank's median 1.12x the median rank's at 8 nodes, against 1.03-1.05x for independent
nodes: ``results/heldout-check.txt``). The file says which it measured (``made_for.coupled``)::

    python -m benchmarks.box_contention --study jobs/box-cnn-weak5.toml --coupled \\
        --nodes 2,4,8 --rounds 3 --json results/tuning/box-spread-coupled.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]

from hpcdl import box, records, study
from hpcdl.analysis import provenance
from hpcdl.model import host_spread
from hpcdl.bench.boxcheck import job_env


def _placement(b: dict) -> tuple:
    """(the node names, srun's extra options, the environment, what they are): inside a Slurm
    allocation its nodes, else the box's n1..nN (refused while a job runs on the box)."""
    job = os.environ.get("SLURM_JOB_ID")
    extra = ["--mpi=pmix"] if b else []
    env = dict(job_env(b) if b else os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if job:
        names = subprocess.run(["scontrol", "show", "hostnames",
                                os.environ.get("SLURM_JOB_NODELIST", "")],
                               capture_output=True, text=True).stdout.split()
        if not names:
            raise SystemExit(f"job {job}: scontrol names none of its nodes")
        return names, extra, env, f"the {len(names)} node(s) of Slurm job {job}"
    if not b:
        raise SystemExit("neither inside a Slurm allocation (sbatch -N K ...) nor on the cluster "
                         "box (scripts/cluster-box.sh up 8 ...)")
    queued = subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip()
    if queued:
        raise SystemExit(f"jobs are queued or running on the box; this runs beside none:\n{queued}")
    return [f"n{i}" for i in range(1, int(b["nodes_count"]) + 1)], extra, env, "the box's nodes"


def _one(names, extra, args, env, scratch: Path, timeout: float) -> list:
    """One-node trainings at once on each of ``names``; per node (median probe, median CPU a
    probe, the probes)."""
    procs, outs = [], []
    for name in names:
        out = scratch / f"k{len(names)}-{name}-{time.monotonic_ns()}.jsonl"
        outs.append(out)
        procs.append(subprocess.Popen(
            ["srun", "--quiet", f"--time={int(timeout // 60) + 1}", "-N1", "-n1", "-w", name,
             "--cpus-per-task=1", *extra, "--chdir", str(ROOT), sys.executable, "-m",
             "hpcdl", "train", *args, "--results", str(out)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    fails = []
    for n, p in zip(names, procs):
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        if p.returncode != 0:
            fails.append(f"{n}: exit {p.returncode}: {err.strip()[-500:]}")
    if fails:
        raise SystemExit(f"{len(names)} node(s): " + "; ".join(fails))
    return [x for path in outs for x in _ranks(path)]


def _coupled(names, extra, args, env, scratch: Path, timeout: float) -> list:
    """One training of len(names) ranks, one per node, exchanging as the study's runs do (under
    the box's licence where there is one); per rank (median probe, median CPU a probe, the
    probes)."""
    out = scratch / f"coupled-k{len(names)}-{time.monotonic_ns()}.jsonl"
    k = len(names)
    try:
        # srun's --time ends the job on the nodes; the timeout ends this process's wait for it
        res = subprocess.run(
            ["srun", "--quiet", f"--time={int(timeout // 60) + 1}", f"-N{k}", f"-n{k}",
             "--ntasks-per-node=1", "-w", ",".join(names), "--cpus-per-task=1",
             "--kill-on-bad-exit=1", *extra, "--chdir", str(ROOT), sys.executable, "-m",
             "hpcdl", "train", *args, "--results", str(out)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{k} ranks on {','.join(names)}: no result within {timeout:.0f} s "
                         f"(srun stopped; raise --timeout if the nodes are this slow)") from None
    if res.returncode != 0:
        raise SystemExit(f"{k} ranks: exit {res.returncode}: {res.stderr.strip()[-500:]}")
    return _ranks(out)


def _ranks(path: Path) -> list:
    """Per rank of the record at ``path``: (median probe, median CPU a probe, the probes)."""
    out = []
    for rank in records.read(path)[-1]["metrics"]["ranks"]:
        probes = rank["compute_probes_s"][1:]          # the first traces the graph
        if not probes:
            raise SystemExit(f"{path}: no probes past the first (give the study's runs probes)")
        out.append((statistics.median(probes), rank["compute_cpu_s"], probes))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", required=True, help="the study file whose workload is trained")
    ap.add_argument("--nodes", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0, help="s per run")
    ap.add_argument("--json", default="", metavar="PATH",
                    help="also write the nodes' spread as a spread file here")
    ap.add_argument("--coupled", action="store_true",
                    help="one k-rank training per k (its ranks exchanging), not k one-node ones")
    opts = ap.parse_args()
    b = box.load()
    names, extra, env, where = _placement(b)
    if opts.coupled and b:
        extra = extra + [f"--licenses={b.get('licence', 'box')}:1"]
    run = _coupled if opts.coupled else _one
    nodes = [int(n) for n in opts.nodes.split(",")]
    if max(nodes) > len(names):
        raise SystemExit(f"--nodes {opts.nodes}: {where} are only {len(names)}")
    point = study.load(opts.study).points()[0]
    args = _without(point.train_args("-"),
                    ("--results", "--study", "--point", "--declared", "--checkpoint-dir"))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    command = (f"python -m benchmarks.box_contention --study {opts.study} --nodes {opts.nodes} "
               f"--rounds {opts.rounds}" + (" --coupled" if opts.coupled else "")
               + (f" --json {opts.json}" if opts.json else ""))
    print(f"# command: {command}")
    print(f"# commit: {commit}; processor: {records.cpu_identity()}; on {where}"
          + (f"; box: {b['nodes_count']} nodes, {b['cpus_per_node']} cores each, links "
             f"{b['link_rate']}" if b else ""))
    print(f"# hpcdl train {' '.join(args)}")
    got = {k: [] for k in nodes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(opts.rounds):
            order = nodes if r % 2 == 0 else nodes[::-1]
            for k in order:
                t0 = time.monotonic()
                ranks = run(names[:k], extra, args, env, Path(tmp), opts.timeout)
                got[k].append(ranks)
                print(f"# round {r + 1}, {k} node(s) {'in one job' if opts.coupled else 'at once'}"
                      f" ({time.monotonic() - t0:.0f} s): median probe per node "
                      + " ".join(f"{x[0]:.3f}" for x in ranks) + " s", flush=True)
    _table(got, nodes)
    if opts.json:
        _write(Path(opts.json), command, b, names[0], args, got, opts.rounds, opts.coupled)
    return 0


def _write(path: Path, command: str, b: Optional[dict], first: str, args, got: dict,
           rounds: int, coupled: bool) -> None:
    """The spread file: per k, each round's nodes' median probe over the round's center, for the
    machine setting the records made there carry (the processor; on the box its settings too)."""
    facts = box.node_facts(first) if b else None
    machine = provenance.machine_setting({"manifest": {"cpu": records.cpu_identity()},
                                          "box": facts})
    spread = {str(k): [host_spread.deviations([x[2] for x in ranks]) for ranks in runs]
              for k, runs in got.items()}
    doc = {"schema": host_spread.SCHEMA, "command": command,
           "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "made_for": {"machine": machine, "link_rate": b["link_rate"] if b else None,
                        "rounds": rounds, "coupled": coupled,
                        "train": list(args)},
           "spread": spread}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"# wrote {path}")


def _without(args, flags):
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        out.append(a)
    return out


def _table(got: dict, nodes) -> None:
    def center(k, i):         # per round: the median node's median probe (i 0) or CPU (i 1)
        return statistics.median(statistics.median(x[i] for x in ranks) for ranks in got[k])
    base = center(nodes[0], 0)
    print(f"{'nodes at once':>13} {'compute(s)':>10} {'vs ' + str(nodes[0]):>6} "
          f"{'slowest/median':>14} {'CPU/probe(s)':>12} {'rounds':>6}")
    for k in nodes:
        slow = statistics.median(max(x[0] for x in ranks) / statistics.median(x[0] for x in ranks)
                                 for ranks in got[k])
        print(f"{k:>13} {center(k, 0):>10.3f} {center(k, 0) / base:>6.3f} {slow:>14.3f} "
              f"{center(k, 1):>12.3f} {len(got[k]):>6}")
    print("# compute: per round the median node's median probe (compute alone, first probe left "
          "out), then the median over rounds; slowest/median: the slowest node's over the median "
          "node's, median over rounds; CPU/probe: the process's CPU seconds in a probe")


if __name__ == "__main__":
    sys.exit(main())
