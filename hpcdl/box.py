"""The cluster in a box (``scripts/cluster-box.sh``): what a rank on it records, and its check's verdict.

The script writes the box's settings to ``/run/hpcdl-box/box.json`` (``HPCDL_BOX`` names another
file): node names, addresses, link rate, latency and CPU share. A rank whose node is one of the
box's reads them (:func:`node_facts`) and counts the bytes its node's interface moved
(:class:`hpcdl.machine.Counters`), so a record says where it ran and what crossed the wire;
:mod:`hpcdl.machine` is how the rest of hpcdl asks about it.

``python -m hpcdl.bench.boxcheck check`` (``scripts/cluster-box.sh check``) proves the box's
isolation with real Slurm jobs and prints a table:

- compute: one compute-only probe (single-threaded numpy matrix products) on n1 alone, then on
  every node at once; each node's time must be within ``COMPUTE_SPREAD`` of the alone time;
- network: a ring allreduce (hpcdl's own ``ring`` backend) over all nodes under ``srun
  --mpi=pmix``; each node's link, both ways, must carry at least ``LINK_SHARE`` of its rate.

The verdict is written to ``check.json`` beside the box file; :func:`require_checked` is what a
study submitted to the box calls before its first job, and it refuses to start, saying why, when
the check failed or has not run on this box.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from .cluster import setting
from .errors import UserError

BOX_FILE = "/run/hpcdl-box/box.json"


def box_file(env=None) -> Path:
    return Path(setting("HPCDL_BOX", env) or BOX_FILE)


def load(env=None) -> Optional[dict]:
    """The box's settings, or None where no box is up."""
    try:
        return json.loads(box_file(env).read_text())
    except (OSError, ValueError):
        return None


def node_facts(host: str, env=None) -> Optional[dict]:
    """What a record says about the box when ``host`` is one of its nodes, else None."""
    box = load(env)
    if not box or host not in box.get("nodes", {}):
        return None
    from .costmodel import rate_bits        # numpy: only where a box is up
    return {"box": box["box"], "node": host, "nodes_in_box": box["nodes_count"],
            "link_rate": box["link_rate"], "link_bits_per_s": rate_bits(box["link_rate"]),
            "latency": box["latency"], "cpus_per_node": box["cpus_per_node"],
            "cpu_period_us": box.get("cpu_period_us"), "iface": box["nodes"][host]["iface"],
            "host": box.get("host"),
            "cores": box.get("cores")}


def record_section(hosts: list, nets: Optional[list], backend: str = "", compression: str = "none",
                   grad_count: int = 0, size: int = 0) -> Optional[dict]:
    """A run's ``box`` record: the box's settings, and per node the bytes its interface moved
    per exchange beside what the algorithm sends (``costmodel.node_bytes``), one rank per node.
    None when the run was not on the box. ``nets``: every rank's ``LoopResult.net`` (None: a run
    that counted no bytes, whose section holds the settings alone)."""
    facts = node_facts(hosts[0]) if hosts else None
    if facts is None:
        return None
    out = {k: facts[k] for k in ("box", "nodes_in_box", "link_rate", "link_bits_per_s", "latency",
                                 "cpus_per_node", "cpu_period_us", "iface", "host", "cores")}
    out["nodes"] = sorted(set(hosts), key=lambda h: (len(h), h))
    if nets is None:
        return out
    from . import costmodel
    algorithm = costmodel.algorithm_for(backend, compression)
    n = costmodel.wire_bytes(grad_count, compression)
    one_per_node = len(set(hosts)) == len(hosts) == size
    per_node = []
    for rank, net in enumerate(nets):
        if not net or not net.get("exchanges"):
            continue
        row = {"rank": rank, "node": net["host"], "hostname": net.get("hostname"),
               "tx_bytes_per_step": net["tx_bytes"] / net["exchanges"],
               "rx_bytes_per_step": net["rx_bytes"] / net["exchanges"], "steps": net["exchanges"]}
        if one_per_node:
            sent, received = costmodel.node_bytes(algorithm, n, size, root=rank == 0)
            row["expected_tx"], row["expected_rx"] = sent, received
            row["tx_vs_expected"] = row["tx_bytes_per_step"] / sent if sent else None
        per_node.append(row)
    out.update(algorithm=algorithm, payload_bytes=n, net=per_node)
    if backend == "horovod":
        out["algorithm_note"] = ("horovod: the MPI library chooses its allreduce; expected is the "
                                 "ring's count, the least any allreduce sends")
    return out


def job_exports(box: dict) -> dict:
    """What a job on the box needs: Open MPI over TCP on the box's subnet (nodes share one
    machine, so shared memory would bypass the links)."""
    return {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": box["subnet"],
            "OMPI_MCA_oob_tcp_if_include": box["subnet"]}


def set_quota(cgroup: str, cores: float, period_us: int) -> None:
    """A box node's CPU quota: ``cores`` of every ``period_us`` (cgroup v2 ``cpu.max`` or v1
    ``cpu.cfs_*``; root). The kernel's least quota is 1 ms, so 0.2 cores needs periods of 5 ms or
    more. The box's own setting is ``cluster-box.sh``'s; benchmarks change it and put it back."""
    quota = int(cores * period_us)
    if quota < 1000:
        raise UserError(f"{cores} cores of a {period_us} us period is {quota} us, under the "
                        "kernel's least quota of 1000 us")
    d = Path(cgroup)
    if (d / "cpu.max").exists():
        (d / "cpu.max").write_text(f"{quota} {period_us}")
        return
    # v1 checks the quota against the period as each is written: lift the quota first, so that no
    # order of writes is refused, then write the period and the quota
    (d / "cpu.cfs_quota_us").write_text("-1")
    (d / "cpu.cfs_period_us").write_text(str(period_us))
    (d / "cpu.cfs_quota_us").write_text(str(quota))


def check_file(env=None) -> Path:
    return box_file(env).with_name("check.json")


def require_checked(env=None) -> Optional[dict]:
    """The box's passed check, when a box is up; raises UserError, saying why, when the check
    failed, is missing or belongs to an earlier box. None where there is no box."""
    box = load(env)
    if box is None:
        return None
    try:
        v = json.loads(check_file(env).read_text())
    except (OSError, ValueError):
        raise UserError(f"the cluster box is up but its isolation was not checked: run "
                        f"scripts/cluster-box.sh check first ({check_file(env)} is missing)") from None
    if v.get("box") != box["box"]:
        raise UserError("the box's check belongs to an earlier box: run scripts/cluster-box.sh check")
    if not v.get("passed"):
        raise UserError("the cluster box failed its isolation check, so its figures would not "
                        "be a node's: " + "; ".join(v.get("reasons", [])))
    return v
