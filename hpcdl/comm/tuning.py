"""The tuning file: the exchange settings ``hpcdl tune`` picked for one allocation, and how a run
takes them.

A tuning file (JSON, schema ``hpcdl.tuning/1``) names where it was measured (cluster, nodes,
ranks, ranks per node, the processor, the MPI library) and, for each gradient compression it
tuned, the pick: environment settings of Horovod and Open MPI (:data:`SETTINGS`), which must be
in the process environment before MPI and Horovod start, and, where ``hpcdl tune --knobs
backend`` searched it, the backend (:data:`PICKABLE`) whose exchange was fastest. It also keeps
every candidate's figures, so the choice can be checked later.

A run takes a tuning file from ``--tuning`` (``hpcdl train``, ``hpcdl bench allreduce``), else
from ``HPCDL_TUNING`` (which a study's ``[run] tuning`` sets for its points); ``default`` (or
``none``) in either means no tuning file. Its settings replace what the environment holds (the
job scripts export a fusion threshold, which would otherwise win), and the run's record carries
the section :func:`apply` returns: the file, its hash, the settings, what they replaced, and
where the file was made.

A pick's backend is what ``hpcdl train`` runs when no ``--backend`` is given
(:func:`backend_of`); a ``--backend`` given wins, and the file's settings apply to it all the same.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping, MutableMapping, Optional, Tuple

from .. import checks, cluster, machine, records
from ..errors import UserError

SCHEMA = "hpcdl.tuning/1"
# What a tuning file may set: the knobs of the exchange a training step runs.
SETTINGS = ("HOROVOD_CYCLE_TIME", "HOROVOD_FUSION_THRESHOLD", "HOROVOD_HIERARCHICAL_ALLREDUCE",
            "OMPI_MCA_coll_tuned_use_dynamic_rules", "OMPI_MCA_coll_tuned_allreduce_algorithm",
            "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize")
OFF = ("default", "none")
# What a pick's backend may be: Horovod, or one of hpcdl's flat exchanges over mpi4py
PICKABLE = ("horovod", "mpi", "ring")


def path_of(flag: Optional[str], env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The tuning file a run takes: ``--tuning``, else ``HPCDL_TUNING``; None for none."""
    chosen = flag if flag not in (None, "") else cluster.setting("HPCDL_TUNING", env)
    return None if chosen is None or chosen.lower() in OFF else chosen


def load(path) -> dict:
    """The tuning file at ``path``, checked; UserError naming what is wrong."""
    return _read(path)[0]


def _read(path) -> Tuple[dict, bytes]:
    """The tuning file at ``path`` checked, and its bytes (read once: the hash a record keeps is
    of the settings it applied)."""
    try:
        raw = Path(path).read_bytes()
        doc = json.loads(raw)
    except FileNotFoundError:
        raise UserError(f"tuning file {path}: no such file (make one with 'hpcdl tune', or "
                        "run with --tuning default)") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"tuning file {path}: not readable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UserError(f"tuning file {path}: not an hpcdl tuning file (schema {SCHEMA})")
    picks = doc.get("picks")
    if not isinstance(picks, dict) or not picks:
        raise UserError(f"tuning file {path}: it holds no picks")
    for comp, pick in picks.items():
        env = pick.get("env") if isinstance(pick, dict) else None
        if not isinstance(env, dict):
            raise UserError(f"tuning file {path}: the {comp} pick has no settings")
        bad = sorted(set(env) - set(SETTINGS))
        if bad:
            raise UserError(f"tuning file {path}: {', '.join(bad)} is not a setting a tuning "
                            f"file may hold ({', '.join(SETTINGS)})")
        for key, value in env.items():
            if not _valid(key, value):
                raise UserError(f"tuning file {path}: the {comp} pick's {key} = {value!r} is not "
                                f"{VALUES[key][1]}")
        if pick.get("backend", "horovod") not in PICKABLE:
            raise UserError(f"tuning file {path}: the {comp} pick's backend "
                            f"'{pick.get('backend')}' is not one a tuning file may pick "
                            f"({', '.join(PICKABLE)})")
    why = checks.input_problem(doc, SCHEMA)
    if why:
        raise UserError(f"tuning file {path}: {why}; make it again with 'hpcdl tune'")
    return doc, raw


def _number(text, integer: bool, low: float, high: float = float("inf")) -> bool:
    try:
        x = int(str(text)) if integer else float(str(text))
    except ValueError:
        return False
    return low <= x <= high


# each setting's check and what it must be, as the error says
VALUES = {
    "HOROVOD_CYCLE_TIME": (lambda v: _number(v, False, 1e-3, 1e4), "a cycle time in ms (> 0)"),
    "HOROVOD_FUSION_THRESHOLD": (lambda v: _number(v, True, 0), "a byte count (>= 0)"),
    "HOROVOD_HIERARCHICAL_ALLREDUCE": (lambda v: str(v) in ("0", "1"), "0 or 1"),
    "OMPI_MCA_coll_tuned_use_dynamic_rules": (lambda v: str(v) in ("0", "1"), "0 or 1"),
    "OMPI_MCA_coll_tuned_allreduce_algorithm": (lambda v: _number(v, True, 0, 6),
                                                "Open MPI's allreduce algorithm number (0-6)"),
    "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": (lambda v: _number(v, True, 0),
                                                            "a byte count (>= 0)"),
}


def _valid(key: str, value) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool) \
        and VALUES[key][0](value)


def settings(doc: dict, compression: str, path="the tuning file") -> dict:
    """The pick for ``compression``: environment settings as strings."""
    pick = doc["picks"].get(compression)
    if pick is None:
        raise UserError(f"{path} was tuned for {', '.join(sorted(doc['picks']))} gradients, not "
                        f"{compression}: run 'hpcdl tune --compression {compression}' on this "
                        "allocation, or train with --tuning default")
    return {k: str(v) for k, v in pick["env"].items()}


def apply(path, compression: str, environ: Optional[MutableMapping[str, str]] = None) -> dict:
    """Put the pick for ``compression`` into ``environ`` (os.environ), replacing what is there;
    return the record's ``tuning`` section. Call before MPI and Horovod start."""
    env = os.environ if environ is None else environ
    doc, raw = _read(path)
    chosen = settings(doc, compression, path)
    replaced = {k: env[k] for k in chosen if k in env and env[k] != chosen[k]}
    env.update(chosen)
    made = doc.get("made_for") or {}
    return {"file": str(path), "sha256": hashlib.sha256(raw).hexdigest(),
            "compression": compression, "settings": chosen, "replaced": replaced,
            "made_for": made, "pick": doc["picks"][compression].get("name"),
            "backend": doc["picks"][compression].get("backend", "horovod")}


def backend_of(flag: Optional[str], compression: str,
               environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The backend the pick for ``compression`` of the tuning file a run takes
    (:func:`path_of`) names; None without a file."""
    path = path_of(flag, environ)
    if path is None:
        return None
    doc = load(path)
    settings(doc, compression, path)             # a compression it was not tuned for: refused
    return doc["picks"][compression].get("backend", "horovod")


def take(flag: Optional[str], compression: str,
         environ: Optional[MutableMapping[str, str]] = None) -> dict:
    """Apply the tuning file a run takes (:func:`path_of`), if any; the record's section either
    way: where the settings came from (``--tuning``, ``HPCDL_TUNING`` or ``default``) and what
    the environment holds of :data:`SETTINGS` when there is no file."""
    env = os.environ if environ is None else environ
    path = path_of(flag, env)
    if path is None:
        return {"source": "default", "settings": {k: env[k] for k in SETTINGS if k in env}}
    section = apply(path, compression, env)
    section["source"] = "--tuning" if flag not in (None, "") else "HPCDL_TUNING"
    return section


def mismatch(section: dict, nodes: int, ranks: int, node: Optional[dict] = None) -> Optional[str]:
    """A sentence when the run's allocation is not the one the file was tuned on, else None.
    ``node``: the run's node facts (:func:`hpcdl.machine.node`), compared with the machine's
    settings the file was tuned on where it says (other links and CPU shares time the
    candidates differently)."""
    made = section.get("made_for") or {}
    if section.get("source") == "default":
        return None
    out = []
    if made.get("nodes") not in (None, nodes) or made.get("ranks") not in (None, ranks):
        out.append(f"tuning file {section['file']} was tuned on {made.get('nodes')} node(s), "
                   f"{made.get('ranks')} rank(s); this run has {nodes} node(s), {ranks} rank(s)")
    other = machine.exchange_mismatch(made, node)
    if other:
        out.append(f"tuning file {section['file']} {other}")
    return "; ".join(out) or None


def write(path, doc: dict) -> None:
    """Write ``doc`` atomically (a reader sees the old file or the new one; a full disk leaves
    the old one and no temporary file)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    records.write_atomic(p, json.dumps(doc, indent=1, sort_keys=True) + "\n")
