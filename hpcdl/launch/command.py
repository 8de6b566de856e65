"""A study point that runs the user's own command ([workload] command) instead of hpcdl train.

The launchers (``hpcdl study run`` here, a study's Slurm job there) start the command on every
rank with the point's environment (:func:`environment`): the study, the point and where hpcdl's
Keras callback (:class:`hpcdl.train.keras.ScalingRecorder`) may write. The rank output goes to a log.
When the command has ended, :func:`finish` writes the point's one record into the study's
results: the callback's record when the script has the callback, else a record of its own, each
with the command's exit status, its wall time and the figures its output printed on lines that
the study's ``[scrape]`` patterns match, marked as scraped. A pattern that matched nothing is
recorded as "no match", never as a zero. ``python -m hpcdl.launch.command SPEC.json --exit-status
RC --started T0 --ended T1`` does the same in a job script. Standard library only.
"""
from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .. import cluster, machine, records
from ..records import SCRIPT_BACKEND

__all__ = ["Spec", "spec_for", "environment", "scrape", "finish", "WALL_UNIT"]

# A callback-free script's throughput, when it prints none: the work of one run per hour (strong
# scaling: the whole run's work; weak: each rank's share, so N ranks do N units)
WALL_UNIT = "runs/h (wall time, start-up included)"
# the figures that are a point's throughput (samples per second), all ranks or one rank's
THROUGHPUT_FIGURES = ("throughput", "throughput_per_rank")
_KEEP_VALUES = 64               # matches kept per figure in a record


@dataclass
class Spec:
    """All that the end of a command's point needs to know, written before the command starts
    (a job script's step-<point>.json): the point, its command and where things go."""

    study: str
    scaling: str
    point: dict
    declared: str               # the study's declarations, JSON
    argv: List[str]             # the command, placeholders filled in
    workload: str
    scrape: Dict[str, str]
    results: str                # the study's runs.jsonl
    callback: str               # where the script's ScalingRecorder writes ({results})
    log: str                    # the ranks' output
    launcher: str = "mpirun"
    env: Dict[str, str] = field(default_factory=dict)

    def save(self, path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, path) -> "Spec":
        return cls(**json.loads(Path(path).read_text()))


def spec_for(study, point, results_dir=None, launcher: str = "mpirun") -> Spec:
    """The spec of one point of a command study; its files live in the study's results folder
    (``points/<id>.jsonl`` for the callback's record, ``logs/<id>.log`` for the output)."""
    rdir = Path(results_dir or study.results_dir).resolve()
    callback = rdir / "points" / f"{point.id}.jsonl"
    spec = Spec(study=study.name, scaling=study.scaling, point=point.as_dict(),
                declared=point.declared, argv=point.script_argv(str(callback)),
                workload=point.workload, scrape=dict(study.scrape),
                results=str(rdir / "runs.jsonl"), callback=str(callback),
                log=str(rdir / "logs" / f"{point.id}.log"), launcher=launcher)
    spec.env = environment(spec)
    return spec


def with_threads(argv: Sequence[str], python: Optional[str] = None) -> List[str]:
    """The argv each rank starts: the command through :mod:`.with_threads`, which gives it the
    threads hpcdl train would take."""
    return [python or sys.executable, "-m", "hpcdl.launch.with_threads", *argv]


def environment(spec: Spec) -> Dict[str, str]:
    """What every rank of the command gets: hpcdl's Keras callback reads its study, point,
    declarations and results file from here, so the script needs no hpcdl options."""
    return {"HPCDL_STUDY": spec.study,
            "HPCDL_POINT": json.dumps(spec.point, sort_keys=True, separators=(",", ":")),
            "HPCDL_DECLARED": spec.declared, "HPCDL_RESULTS": spec.callback}


def prepare(spec: Spec) -> None:
    """Before a (fresh or requeued) attempt: the folders exist, and no callback record or log of
    an earlier attempt is left to be taken for this one's."""
    for path in (Path(spec.callback), Path(spec.log)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)


def scrape(text: str, patterns: Dict[str, str]) -> Dict[str, dict]:
    """Each figure's value on the last output line its pattern matches (first group, or the
    group named 'value'), with the line; ``value`` None and why, where no line gave a number."""
    out = {}
    lines = text.splitlines()
    for name, pattern in patterns.items():
        rx = re.compile(pattern)
        values, last, unparsed = [], None, 0
        for line in lines:
            m = rx.search(line)
            if not m:
                continue
            try:
                values.append(float(m.group("value") if "value" in rx.groupindex else m.group(1)))
                last = line
            except (TypeError, ValueError):
                unparsed += 1
        fig = {"pattern": pattern, "matches": len(values), "scraped": True}
        if values:
            fig.update(value=values[-1], line=last.strip(), values=values[-_KEEP_VALUES:])
        else:
            fig.update(value=None, why=("no line of the output matched" if not unparsed else
                                        f"{unparsed} line(s) matched without a number in the group"))
        out[name] = fig
    return out


def _callback_record(path) -> Optional[dict]:
    recs = records.read(path, warn=False) if Path(path).exists() else []
    return recs[-1] if recs else None


def job_hosts(nodelist: Optional[str]) -> List[str]:
    """The hosts of a Slurm job's node list (scontrol expands it), else this host."""
    if nodelist:
        try:
            res = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                                 text=True, timeout=30)
            if res.returncode == 0 and res.stdout.split():
                return res.stdout.split()
        except (OSError, subprocess.SubprocessError):
            pass
        return [nodelist]
    return [socket.gethostname()]


def _throughput(spec: Spec, scraped: Dict[str, dict], wall: float) -> Dict[str, dict]:
    """metrics.throughput (and per rank) of a callback-free record: a scraped figure when the
    study names one (none when it printed none), else the runs per hour of wall time."""
    ranks = int(spec.point["ranks"])
    named = [n for n in THROUGHPUT_FIGURES if n in scraped]
    if named:
        fig = scraped[named[0]]
        if fig["value"] is None:
            return {}
        total = fig["value"] * (ranks if named[0] == "throughput_per_rank" else 1)
        src = f"scraped: {named[0]}" + (" x ranks" if named[0] == "throughput_per_rank" else "")
        return {"throughput": {"mean": total, "std": 0.0, "n": 1, "unit": "samples/s",
                               "source": src},
                "throughput_per_rank": {"mean": total / ranks, "std": 0.0, "n": 1,
                                        "unit": "samples/s", "source": src}}
    if not wall > 0:
        return {}
    work = ranks if spec.scaling == "weak" else 1
    return {"throughput": {"mean": 3600.0 * work / wall, "std": 0.0, "n": 1, "unit": WALL_UNIT,
                           "source": "wall time"}}


def record(spec: Spec, exit_status: int, wall: float, output: str,
           timed_out: bool = False, hosts: Optional[List[str]] = None) -> dict:
    """The point's record: the callback's (when the script has it) or one from what the
    launcher saw, with the command's exit status, wall time and scraped figures."""
    status = "timeout" if timed_out else ("ok" if exit_status == 0 else "failed")
    scraped = scrape(output, spec.scrape)
    cb = _callback_record(spec.callback)
    block = {"argv": spec.argv, "exit_status": exit_status, "timed_out": timed_out,
             "wall_time_s": wall, "log": spec.log, "recorder": cb is not None,
             "scraped": scraped}
    if cb is not None:
        rec = dict(cb)
        if status != "ok":
            rec["status"] = status
        rec["params"] = {**(cb.get("params") or {}), "workload": spec.workload,
                         "command": spec.argv}
        rec["study"], rec["point"] = spec.study, spec.point
        rec["declared"] = records.json_or_text(spec.declared)
        rec["command"] = block
        return rec
    hosts = hosts or [socket.gethostname()]
    p = spec.point
    layout = cluster.Layout(size=int(p["ranks"]), local_size=int(p["ranks_per_node"]),
                            num_nodes=int(p["nodes"]), host=hosts[0], launcher=spec.launcher)
    metrics = {**_throughput(spec, scraped, wall), "wall_time_s": wall,
               "split": {"method": "none", "why": "a script without hpcdl's callback is seen from "
                         "outside: its wall time and what it prints, not its steps"}}
    return records.build(
        source="command", status=status, study=spec.study, point=p, declared=spec.declared,
        params={"workload": spec.workload, "batch_size": p["batch_size"],
                "global_batch": p["global_batch"], "backend": SCRIPT_BACKEND,
                "compression": "none", "command": spec.argv},
        layout=records.layout_section(layout, hosts), metrics=metrics, command=block,
        machine=machine.record_section(hosts),
        manifest=records.manifest(layout, hosts=hosts, extra={"recorder": "none (command)"}))


def finish(spec: Spec, exit_status: int, wall: float, timed_out: bool = False,
           hosts: Optional[List[str]] = None) -> dict:
    """Append the point's record to the study's results (whatever its status: a failed run's
    record tells why, and does not count as recorded), and return it."""
    log = Path(spec.log)
    output = log.read_text(errors="replace") if log.exists() else ""
    rec = record(spec, exit_status, wall, output, timed_out, hosts)
    records.append(spec.results, rec)
    return rec


def summary(rec: dict) -> List[str]:
    """Progress lines about a finished command point."""
    cmd = rec.get("command") or {}
    out = [f"exit status {cmd.get('exit_status')}, wall time {cmd.get('wall_time_s', 0):.1f} s, "
           + ("record from hpcdl's callback" if cmd.get("recorder") else
              "no hpcdl callback: wall time and scraped figures only")]
    for name, fig in (cmd.get("scraped") or {}).items():
        out.append(f"scraped {name}: " + (f"{fig['value']:g} ({fig['line']!r})"
                                          if fig["value"] is not None else
                                          f"NO MATCH ({fig['why']}; pattern {fig['pattern']!r})"))
    thr = records.lookup(rec, "metrics", "throughput")
    if thr:
        out.append(f"throughput {thr['mean']:.4g} {thr['unit']}"
                   + (f" ({thr['source']})" if thr.get("source") else ""))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpcdl.launch.command",
                                description="Record a study point whose command has ended "
                                            "(what a command study's job script runs last).")
    p.add_argument("spec", help="the point's step-<id>.json, written by 'hpcdl study submit'")
    p.add_argument("--exit-status", type=int, required=True)
    p.add_argument("--started", type=float, required=True, help="epoch seconds")
    p.add_argument("--ended", type=float, required=True, help="epoch seconds")
    opts = p.parse_args(argv)
    spec = Spec.load(opts.spec)
    rec = finish(spec, opts.exit_status, opts.ended - opts.started,
                 hosts=job_hosts(cluster.scheduler_facts().get("nodelist")))
    for line in summary(rec):
        print(f"[hpcdl] {line}", flush=True)
    print(f"[hpcdl] record ({rec['status']}) appended to {spec.results}", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
