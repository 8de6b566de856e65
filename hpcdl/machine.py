"""Where a run ran and where a study's jobs go, behind one interface: hosts under ``mpirun``, a
Slurm or Grid Engine cluster, or the cluster in a box (:mod:`hpcdl.box`), which rehearses a
cluster on one host with links whose rate it sets.

- A record's ``machine`` section (:func:`record_section`) names the kind and what its figures
  depend on there: nodes, link rate, CPU share, the instance. :func:`of_record` reads it back,
  an older record's ``box`` section too; analysis asks :func:`link_rate`, :func:`setting`,
  :func:`instance` and :func:`shared`, and the report asks :class:`Seen` how to run a study again.
- A study's jobs go to a :class:`Target` (:func:`target`): which link rates it runs, what every
  job exports, how jobs that share cores are kept one at a time.
- A rank asks :func:`node` for its node's facts and :class:`Counters` for its interface's bytes.

Standard library only, as is the box's module until a box is up (its byte counts need numpy).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .errors import UserError

SECTIONS = ("machine", "box")     # a record's section: its name now, and before (box runs only)
BOX_UP = "scripts/cluster-box.sh up"
BOX_ENV = "eval \"$(scripts/cluster-box.sh env | sed 's/^/export /')\""   # this shell on its cell
# the settings that make two box runs' machines differ (its link rate is a study's network axis)
BOX_SETTINGS = ("nodes_in_box", "cpus_per_node", "cpu_period_us", "latency", "host", "cores")
# what an exchange's timing depends on, where the machine sets it: a tuning file made elsewhere
# times its candidates differently
EXCHANGE_KEYS = ("link_rate", "latency", "cpus_per_node", "cpu_period_us")


# --- records: what a run says about where it ran ------------------------------------------------

def node(host: str) -> Optional[dict]:
    """This node's facts where the machine sets them (a box node's links and CPU share), else
    None."""
    from . import box
    return box.node_facts(host)


def record_section(hosts: list, nets: Optional[list] = None, backend: str = "",
                   compression: str = "none", grad_count: int = 0, size: int = 0) -> dict:
    """A run's ``machine`` section: its kind (``box``, else the scheduler whose job ran it or
    ``mpirun``) and nodes; on a box its settings and, where the run counted them (``nets``:
    every rank's ``LoopResult.net``), the bytes each node's interface moved."""
    from . import box
    from .cluster import scheduler_facts
    sec = box.record_section(hosts, nets, backend, compression, grad_count, size)
    if sec is not None:
        return {"kind": "box", **sec}
    return {"kind": scheduler_facts().get("scheduler") or "mpirun",
            "nodes": sorted(set(hosts), key=lambda h: (len(h), h))}


def of_record(rec: dict) -> dict:
    """A record's machine section ({} where it has none)."""
    sec = rec.get("machine")
    if isinstance(sec, dict):
        return sec
    old = rec.get("box")
    return dict(old, kind="box") if isinstance(old, dict) else {}


def link_rate(rec: dict) -> str:
    """The links' rate the machine set for a record ("200mbit"; "" where it set none)."""
    return str(of_record(rec).get("link_rate") or "")


def link_bits(rec: dict) -> float:
    """The same in bits per second (0.0 where none was set)."""
    return float(of_record(rec).get("link_bits_per_s") or 0.0)


def instance(rec: dict) -> Optional[str]:
    """The machine instance a record ran on where one host carried all its nodes (a box's name
    changes each time it is brought up), else None."""
    sec = of_record(rec)
    return str(sec["box"]) if sec.get("kind") == "box" and sec.get("box") else None


def setting(rec: dict) -> str:
    """The processor (where the record names it) and the machine's settings it ran on, as one
    string: records of one setting are alike ("" for an older record of hosts only)."""
    cpu = (rec.get("manifest") or {}).get("cpu")
    sec = of_record(rec)
    parts = [f"cpu {cpu}"] if cpu else []
    if sec.get("kind") == "box":
        parts.append("box " + ", ".join(f"{k}={sec[k]}" for k in BOX_SETTINGS
                                        if sec.get(k) not in (None, "")))
    return "; ".join(parts)


def setting_at(host: str, cpu: str) -> Tuple[str, Optional[dict]]:
    """(the :func:`setting` of a record made now on ``host`` with processor ``cpu``, the node's
    facts there or None)."""
    facts = node(host)
    rec = {"manifest": {"cpu": cpu}, **({"machine": {"kind": "box", **facts}} if facts else {})}
    return setting(rec), facts


def kind_of(setting_text: Optional[str]) -> str:
    """The kind of machine a :func:`setting` string is: "box" for the cluster in a box, whatever
    its processor, links and quotas; else the string itself ("" where records do not say)."""
    text = setting_text or ""
    return "box" if text.startswith("box ") or "; box " in text else text


def kind_label(kind: str) -> str:
    """A :func:`kind_of` in words."""
    return "the box" if kind == "box" else "this machine"


def cpu_of(setting_text: str) -> str:
    """The processor a :func:`setting` string names, else ""."""
    return setting_text.split("; box ")[0][4:] if setting_text.startswith("cpu ") else ""


def shared(rec: dict) -> Tuple[str, frozenset]:
    """What a run shared with other runs: the one host of its instance, or its hosts."""
    inst = instance(rec)
    if inst is not None:
        return "box", frozenset([inst])
    man = rec.get("manifest") or {}
    return "hosts", frozenset(man.get("hosts") or (rec.get("layout") or {}).get("hosts") or [])


def exchange_setting(host: str) -> Optional[dict]:
    """What a run's exchange timing depends on where ``host`` is a node whose machine sets its
    links and CPU share (for a tuning file's ``made_for``), else None."""
    facts = node(host)
    return {k: facts.get(k) for k in ("box",) + EXCHANGE_KEYS} if facts else None


def exchange_mismatch(made_for: dict, facts: Optional[dict]) -> Optional[str]:
    """Where a tuning file was made on another setting of the machine a run is on now, the
    words that say which settings differ, else None."""
    then = made_for.get("machine") or made_for.get("box")
    if not then or not facts:
        return None
    differ = [k for k in EXCHANGE_KEYS if then.get(k) != facts.get(k)]
    if not differ:
        return None
    return ("was tuned on a cluster box with " + ", ".join(f"{k}={then.get(k)}" for k in differ)
            + "; this run's box has " + ", ".join(f"{k}={facts.get(k)}" for k in differ))


def link_bits_at(host: str) -> Optional[float]:
    """The link rate (bits per second) at ``host`` where the machine sets it, else None."""
    facts = node(host)
    return float(facts["link_bits_per_s"]) if facts and facts.get("link_bits_per_s") else None


class Counters:
    """Bytes an interface of this process's network namespace sent and received since this was
    made. Read from /proc/net/dev, which follows the reader's namespace: /sys/class/net shows
    the namespace that mounted /sys, which for a slurmd started with nsenter is the host's."""

    def __init__(self, iface: str):
        self.iface = iface
        self.start = self.read()

    def read(self):
        for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
            name, _, fields = line.partition(":")
            if name.strip() == self.iface:
                f = fields.split()
                return int(f[8]), int(f[0])            # tx bytes, rx bytes
        raise UserError(f"no interface {self.iface} in this network namespace")

    def moved(self):
        now = self.read()
        return {"tx_bytes": now[0] - self.start[0], "rx_bytes": now[1] - self.start[1]}


class Seen:
    """The machines a report's records ran on, gathered record by record: enough to say how to
    run the study again on the same kind of machine."""

    def __init__(self):
        self.link_rates: set = set()
        self.nodes = 0
        self.cpus_per_node = None
        self.boxes = 0

    def add(self, rec: dict) -> None:
        sec = of_record(rec)
        if sec.get("kind") != "box":
            return
        self.boxes += 1
        self.link_rates.add(sec["link_rate"])
        self.nodes = max(self.nodes, int(sec.get("nodes_in_box") or 0))
        if self.boxes == 1:
            self.cpus_per_node = sec.get("cpus_per_node")

    def merge(self, other: "Seen") -> None:
        self.link_rates |= other.link_rates
        self.nodes = max(self.nodes, other.nodes)
        if not self.boxes:
            self.cpus_per_node = other.cpus_per_node
        self.boxes += other.boxes

    def rerun(self, submit: str, gridengine: bool) -> Optional[str]:
        """The command that runs ``submit`` again on a machine set as these records' were,
        once per link rate they recorded; None where the machine is not one hpcdl sets up."""
        if not self.boxes:
            return None
        from .costmodel import rate_bits
        rates = sorted(self.link_rates, key=rate_bits)
        cpus = self.cpus_per_node
        up = f"{BOX_UP} {self.nodes} --link $rate" + (
            f" --cpus-per-node {cpus:g}" if cpus else "") + (" --sge" if gridengine else "")
        env = f"{BOX_ENV} && " if gridengine else ""
        return (f"for rate in {' '.join(rates)}; do {up} && scripts/cluster-box.sh check && "
                f"{env}{submit}; done")


# --- submitting: the machine a study's jobs go to -----------------------------------------------

@dataclass
class Target:
    """The machine a study's jobs go to, as submit sees it: a cluster, or a box brought up on
    this host (whose settings, ``settings``, give its link rate, licence and Grid Engine)."""

    kind: str = "cluster"
    settings: Dict = field(default_factory=dict)

    @property
    def link_rate(self) -> str:
        return str(self.settings.get("link_rate") or "")

    @property
    def licence(self) -> Optional[str]:
        """A Slurm licence each job takes, so that jobs sharing the host's cores run one at a
        time."""
        return self.settings.get("licence")

    def runs(self, network: str) -> bool:
        """Whether a point that needs links of ``network`` ("": any) runs here now."""
        return not network or network == self.link_rate

    def gridengine(self, cell: Tuple) -> dict:
        """This machine's own Grid Engine settings (parallel environment, queue, consumable) a
        study's jobs use where it gives none ({} on a cluster); ``cell``: the one this shell's
        Grid Engine commands talk to."""
        if self.kind != "box":
            return {}
        sge = self.settings.get("sge") or {}
        if not sge:
            raise UserError(f"the cluster box is up without Grid Engine: bring it up with "
                            f"{BOX_UP} N --sge, or submit with --scheduler slurm")
        if cell != (sge["root"], sge["cell"]):
            raise UserError(f"Grid Engine's commands here talk to cell {cell}, not the cluster "
                            f"box's ({sge['root']}, {sge['cell']}): export its settings first, "
                            f"{BOX_ENV}")
        return sge

    def one_at_a_time(self, gridengine: bool) -> str:
        """The words that say how this machine keeps a study's jobs apart ("" where it need not)."""
        if self.kind != "box":
            return ""
        how = (f"each asks for Grid Engine's consumable '{self.settings['sge']['consumable']}=1'"
               if gridengine else f"each takes Slurm's licence '{self.licence}'")
        return f"The box runs the study's jobs one at a time ({how}), so none slows another."

    def waiting(self, points: Sequence[str]) -> List[str]:
        """One line per point that needs other links than this machine's."""
        return [f"Point {pid}: waits for a box with other links (this one has {self.link_rate}); "
                "bring that box up and submit again" for pid in points]


def target(study, unchecked: bool = False) -> Target:
    """The machine this study's jobs would run on. A study with a network axis needs a box; a box
    must have passed its isolation check, unless ``unchecked`` (a rehearsal whose figures need
    not be a node's), and have the licence that runs its jobs one at a time."""
    from . import box
    settings = box.load()
    if settings is None:
        if any(n for n in getattr(study, "networks", [""])):
            raise UserError(f"{study.name} has a network axis ({', '.join(study.networks)}): its "
                            "points run on the cluster box, and none is up here "
                            f"({BOX_UP} N --link RATE)")
        return Target()
    if unchecked:
        print("warning: submitting to the cluster box without its isolation check "
              "(--unchecked-box): the figures need not be what a node would give", file=sys.stderr)
    else:
        box.require_checked()
    if not settings.get("licence"):
        raise UserError("this cluster box was brought up without the licence that runs its jobs "
                        "one at a time (jobs side by side would share the machine's cores and "
                        f"slow each other): bring it up again ({BOX_UP} N ...)")
    return Target("box", settings)


def job_exports() -> dict:
    """What every job exports on this machine (on a box: Open MPI over its links)."""
    from . import box
    settings = box.load()
    return box.job_exports(settings) if settings else {}


def add_submit_options(p) -> None:
    """``hpcdl study submit``'s options about the machine."""
    p.add_argument("--unchecked-box", dest="unchecked", action="store_true",
                   help="on the cluster box, submit even though 'scripts/cluster-box.sh check' has "
                        "not passed (a rehearsal whose figures need not be a node's)")


def rehearse(scheduler: str) -> str:
    """How to get ``scheduler`` ("slurm" or "gridengine") on this host, for an error where none
    is."""
    return f"{BOX_UP} 4" + (" --sge" if scheduler == "gridengine" else "")
