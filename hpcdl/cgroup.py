"""What this process's cgroup grants: the CPU quota as a number of cores, and the CPU time it
used and how often the quota held it back (a container's, a Slurm job's, a rehearsal node's).
cgroup v1 and v2, read from ``/proc/self/cgroup`` and ``/proc/self/mountinfo``; standard
library only, so :mod:`hpcdl.cluster` can decide thread counts before TensorFlow starts."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple


def cgroup_cpu_limit(proc_cgroup: Optional[str] = None,
                     mountinfo: Optional[str] = None) -> Optional[float]:
    """The CPUs this process's cgroup grants, as a number of cores (0.2 for a fifth of one), or
    None when no quota applies. The tightest quota of the process's cgroup and its ancestors,
    cgroup v2 (``cpu.max``) or v1 (``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``)."""
    found = _limiting_cgroup(proc_cgroup, mountinfo)
    return found[2] if found else None


def _limiting_cgroup(proc_cgroup: Optional[str] = None, mountinfo: Optional[str] = None
                     ) -> Optional[Tuple[Path, bool, float, int]]:
    """(folder, cgroup v2?, cores, period in µs) of the cgroup with the tightest CPU quota among
    this process's and its ancestors; None when none has one."""
    try:
        proc_cgroup = proc_cgroup if proc_cgroup is not None else \
            Path("/proc/self/cgroup").read_text()
        mountinfo = mountinfo if mountinfo is not None else \
            Path("/proc/self/mountinfo").read_text()
    except OSError:
        return None
    limits = []
    for line in proc_cgroup.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        v2 = hier == "0" and controllers == ""
        if not v2 and "cpu" not in controllers.split(","):
            continue
        mount = _cgroup_mount(mountinfo, v2)
        if mount is None:
            continue
        parts = [s for s in path.split("/") if s]
        for k in range(len(parts) + 1):
            folder = mount.joinpath(*parts[:k])
            qp = _quota_period(folder, v2)
            if qp:
                limits.append((folder, v2, qp[0] / qp[1], qp[1]))
    return min(limits, key=lambda t: t[2]) if limits else None


def cgroup_cpu_usage(found: Optional[Tuple[Path, bool, float, int]] = None) -> Optional[dict]:
    """The CPU the cgroup that limits this process has used and been throttled for, in seconds
    since it was made ({"cores", "period_us", "usage_s", "throttled_s", "periods",
    "throttled_periods"}), or None without a quota. Two readings apart say how much of a
    stretch of time the quota held the cgroup's processes back. ``found``:
    :func:`_limiting_cgroup`'s answer, where known."""
    found = found or _limiting_cgroup()
    if found is None:
        return None
    folder, v2, cores, period = found
    try:
        stat = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines()
                    if len(line.split()) == 2)
        if v2:
            usage = int(stat["usage_usec"]) / 1e6
            throttled = int(stat["throttled_usec"]) / 1e6
        else:
            usage = int((folder / "cpuacct.usage").read_text()) / 1e9 \
                if (folder / "cpuacct.usage").exists() else None
            throttled = int(stat["throttled_time"]) / 1e9
        return {"cores": cores, "period_us": period,
                "usage_s": usage, "throttled_s": throttled,
                "periods": int(stat["nr_periods"]), "throttled_periods": int(stat["nr_throttled"])}
    except (OSError, KeyError, ValueError):
        return None


def _cgroup_mount(mountinfo: str, v2: bool) -> Optional[Path]:
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, fs = left.split(), right.split()
        if len(fields) < 5 or not fs:
            continue
        if v2 and fs[0] == "cgroup2":
            return Path(fields[4])
        if not v2 and fs[0] == "cgroup" and "cpu" in fs[-1].split(","):
            return Path(fields[4])
    return None


def _quota_period(folder: Path, v2: bool) -> Optional[Tuple[int, int]]:
    """(quota, period) in microseconds of a cgroup with a CPU quota, else None."""
    try:
        if v2:
            quota, _, period = (folder / "cpu.max").read_text().strip().partition(" ")
            return None if quota == "max" else (int(quota), int(period or 100000))
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return (quota, period) if quota > 0 and period > 0 else None
