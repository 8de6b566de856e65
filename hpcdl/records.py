"""Run records: the schema, the manifest, and crash-safe append/read of JSON Lines.

One record per run, one line per record. Writers append the whole line in a single ``write``
under an exclusive ``flock`` and ``fsync`` it, so several jobs of a study may append to the same
file at once and a crash leaves at most one torn last line. Readers report a torn or corrupt line
and skip it; they never rewrite the file.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Tuple
from . import __version__, cluster, stack
from .machine import SECTIONS as MACHINE_SECTIONS
from .stack import package_version
from .errors import UserError

# /2: the study's model inputs are JSON (declared.model, hpcdl.model.inputs.Inputs), where /1
# joined them into one string (declared.calibration, still read)
SCHEMA = "hpcdl.run/2"
SCRIPT_BACKEND = "script"         # the backend a record of the user's own command names
SCALINGS = ("strong", "weak")     # what a study declares its points to be (declared.scaling)
# what a record may carry beside its common keys
SECTIONS = ("gradient_bytes", "replicas_identical", "weights_digest", "resumed_from",
            MACHINE_SECTIONS[0], "command", "tuning")


class TornRecordWarning(UserWarning):
    """A line of a results file could not be parsed (a writer died mid-line, or the file was edited)."""


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def build(*, source: str, params: dict, layout: dict, metrics: dict, manifest: dict,
          study=None, point=None, declared=None, tag=None, status: str = "ok",
          **sections) -> dict:
    """A run record, assembled in this one place whoever measured the run (``hpcdl train``, the
    Keras recorder, a study point of the user's own command).

    ``point`` and ``declared`` may be given as the JSON text ``hpcdl study`` passes on. Every
    metric is kept as given; a metric that JSON cannot hold, a section not in :data:`SECTIONS`
    or a missing throughput's mean are refused with ValueError, never dropped.
    """
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise ValueError(f"unknown record section(s) {', '.join(unknown)}: add them to "
                         "records.SECTIONS")
    for name, value in metrics.items():
        try:
            json.dumps(value, default=_jsonable, allow_nan=True)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metric {name!r} cannot be recorded: {exc}") from None
    thr = metrics.get("throughput")
    if thr is not None and "mean" not in thr:
        raise ValueError("metric 'throughput' has no mean")
    rec = {"schema": SCHEMA, "kind": "train", "status": status, "source": source,
           "study": study, "point": json_or_text(point) if isinstance(point, str) else point,
           "declared": json_or_text(declared) if isinstance(declared, str) else declared,
           "tag": tag, "time": now_iso(), "params": params, "layout": layout,
           "metrics": metrics, "manifest": manifest}
    rec.update(sections)
    return rec


def layout_section(layout, hosts) -> dict:
    """The record's ``layout``: ranks, nodes, ranks per node and the hosts they ran on."""
    return {"size": layout.size, "nodes": layout.num_nodes, "ranks_per_node": layout.local_size,
            "hosts": sorted(set(hosts))}


def append(path, record: dict, *, lead: bool = False) -> Path:
    """Append one record as one line: a single write, under flock, then fsync. The whole line
    or nothing: a write that fails part-way (a full disk) is cut back off before the error is
    raised. ``lead``: start the file's every line with a newline, so that the file can itself be
    appended with ``cat`` to a results file whatever that file's last byte is."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True, separators=(",", ":"), default=_jsonable) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            # A previous writer killed mid-line leaves no newline at the end: start on a fresh line
            # so that the torn fragment stays one bad line and this record stays whole.
            size = os.fstat(fd).st_size
            if lead or (size and os.pread(fd, 1, size - 1) != b"\n"):
                line = b"\n" + line
            try:
                view = memoryview(line)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, size)      # no fragment left: shrinking needs no free space
                raise
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    return path


def append_or_keep(path, record: dict) -> Optional[Path]:
    """Append ``record`` to ``path``; where that fails (the disk filled, a permission changed
    during the run), write it to a fallback file in the working directory (else the temporary
    one) and return that file's path, so nothing measured is lost. None when appended."""
    try:
        append(path, record)
        return None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    name = f"hpcdl-record-{cluster.scheduler_facts()['job_id'] or os.getpid()}.jsonl"
    for folder in (Path.cwd(), Path(tempfile.gettempdir())):
        try:
            kept = append(folder / name, record, lead=True)
        except OSError:
            continue
        sys.stderr.write(f"hpcdl: the record could not be appended to {path} ({why}); it is in "
                         f"{kept}: append it there with 'cat {kept} >> {path}'\n")
        return kept
    raise UserError(f"the record could not be appended to {path} ({why}), nor kept in the "
                    "working or temporary directory")


def write_atomic(path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all: a temporary file beside it, fsync'd, then
    renamed over it; where the write fails (a full disk), the temporary file is removed and the
    old ``path`` stays as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return path


def read(path, *, warn: bool = True) -> List[dict]:
    """All good records of a results file (an absent file has none); torn lines are reported."""
    return list(iter_records(path, warn=warn))


def lookup(rec, *keys, default=None):
    """``rec[k1][k2]...``, or ``default`` where a key or a level is missing."""
    for k in keys:
        if not isinstance(rec, dict) or k not in rec:
            return default
        rec = rec[k]
    return rec


def recorded_point(rec: dict, study_name: str):
    """The id of the point ``rec`` records for study ``study_name``, or None.

    The one rule of what counts as recorded: a record of this study, with a point id, whose run
    ended well (status ok). ``hpcdl study run``, ``submit`` and ``status`` all ask here.
    """
    point = rec.get("point")
    if rec.get("study") != study_name or not isinstance(point, dict) or "id" not in point:
        return None
    return str(point["id"]) if rec.get("status", "ok") == "ok" else None


def ok_train(rec: dict) -> bool:
    """Whether a record is of a training run that ended well (what a report measures with)."""
    return rec.get("kind", "train") == "train" and rec.get("status", "ok") == "ok"


def json_or_text(text):
    """A record field given on a command line or in the environment: its JSON value, the text
    itself where it is not JSON, None where there is none."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def lines(path, decode=None, start: int = 0, stop: Optional[int] = None, first: int = 1
          ) -> Iterator[Tuple[int, bytes, Optional[dict], Optional[Exception]]]:
    """Each non-empty line of a results file: (its number, its bytes, the record or None, why it
    is none: torn, not JSON, or not an object). An absent file has none. ``decode(bytes)``, in
    place of ``json.loads``, may return a record with only the fields its reader uses. Only the
    lines that start in bytes [start, stop) are read (``start`` at a line's start, which is
    line number ``first``)."""
    decode = decode or json.loads
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb") as fh:
        fh.seek(start)
        pos = start
        for lineno, raw in enumerate(fh, first):
            if stop is not None and pos >= stop:
                return
            pos += len(raw)
            text = raw.strip()
            if not text:
                continue
            try:
                rec = decode(text)
                if not isinstance(rec, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError) as exc:
                yield lineno, text, None, exc
                continue
            yield lineno, text, rec, None


# What a report reads of a record (hpcdl.analysis, hpcdl.report, hpcdl.checks): the fields
# below, and of the manifest only these. A line whose shape these do not fit is read whole.
REPORT_FIELDS = (*MACHINE_SECTIONS, "command", "declared", "gradient_bytes", "kind", "layout",
                 "metrics", "params", "point", "schema", "source", "status", "study", "tag", "time",
                 "tuning")
REPORT_MANIFEST = ("code_tree", "cpu", "cpu_count", "git_commit", "hosts", "platform", "slurm",
                   "started", "versions")
REPORT_ENV = ("HPCDL_SLOW", "HOROVOD_CONTROLLER", "OMPI_MCA_coll_tuned_allreduce_algorithm",
              "OMPI_MCA_coll_tuned_use_dynamic_rules",
              "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize", "HOROVOD_CYCLE_TIME",
              "HOROVOD_FUSION_THRESHOLD", "HOROVOD_HIERARCHICAL_ALLREDUCE")


def slim_decoder():
    """``json.loads`` for results-file lines a report reads, keeping only :data:`REPORT_FIELDS`
    (of the manifest :data:`REPORT_MANIFEST`, of its env :data:`REPORT_ENV`): several times
    faster with msgspec, which skips the rest unparsed; ``json.loads`` itself where msgspec is
    not installed, or for a line msgspec cannot read as that shape (NaN literals, a manifest that
    is no object)."""
    try:
        import msgspec
    except ImportError:
        return json.loads
    unset = msgspec.UNSET
    env = msgspec.defstruct("Env", [(k, Any, unset) for k in REPORT_ENV])
    manifest = msgspec.defstruct("Manifest", [(k, Any, unset) for k in REPORT_MANIFEST]
                                 + [("env", env, unset)])
    record = msgspec.defstruct("Record", [(k, Any, unset) for k in REPORT_FIELDS]
                               + [("manifest", manifest, unset)])
    fast = msgspec.json.Decoder(record).decode
    fields = REPORT_FIELDS + ("manifest",), REPORT_MANIFEST + ("env",), REPORT_ENV

    def plain(obj, level=0):
        """The structs as dicts, their unset fields left out; what they hold is already plain
        (msgspec.to_builtins would copy all of it again)."""
        out = {}
        for f in fields[level]:
            v = getattr(obj, f)
            if v is not unset:
                out[f] = plain(v, level + 1) if f in ("manifest", "env") else v
        return out

    def decode(text):
        try:
            return plain(fast(text))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return json.loads(text)
    return decode


def iter_records(path, *, warn: bool = True) -> Iterator[dict]:
    for lineno, _, rec, exc in lines(path):
        if rec is None:
            if warn:
                warnings.warn(f"{path}:{lineno}: skipping a torn or corrupt record ({exc})",
                              TornRecordWarning, stacklevel=2)
            continue
        yield rec


def _jsonable(obj):
    try:
        import numpy as np
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# --- the manifest -------------------------------------------------------------------------------

_PACKAGE = Path(__file__).resolve().parent


def _git(*args) -> Optional[str]:
    """``git -C <this package> ARGS``'s output, or None outside a git work tree."""
    try:
        out = subprocess.run(["git", "-C", str(_PACKAGE), *args], capture_output=True, text=True,
                             timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def code_changes() -> List[str]:
    """Uncommitted changes to hpcdl's own code (tracked files under hpcdl/), as git lists them."""
    out = _git("status", "--porcelain", "-uno", "--", str(_PACKAGE))
    return [ln[3:] for ln in (out or "").splitlines() if ln.strip()]


def _git_commit() -> Optional[str]:
    """HEAD, with ``-dirty`` when hpcdl/ has uncommitted changes (results files do not count)."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return None
    return commit.strip() + ("-dirty" if code_changes() else "")


def code_tree() -> Optional[str]:
    """git's hash of hpcdl/ as committed at HEAD, with ``-dirty`` when it has uncommitted changes:
    records whose code trees match were made by the same code, whatever else the commits
    between them changed (results, docs, tests)."""
    out = _git("rev-parse", "HEAD:" + _PACKAGE.name)
    if out is None:
        return None
    return out.strip() + ("-dirty" if code_changes() else "")


def process_started() -> Optional[str]:
    """When this process started (UTC, ISO 8601 to the millisecond), from /proc; None elsewhere.

    With the record's ``time`` (when it was written) it bounds the run, interpreter start-up and
    imports included, so a report can tell whether two runs overlapped in time. Taken back from
    now by the uptime since (/proc/uptime, to 10 ms): /proc/stat's boot time is whole seconds,
    which put a run's start up to a second early, into the run before it."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])     # field 22: start time after boot
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        at = time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
    return _dt.datetime.fromtimestamp(at, _dt.timezone.utc).isoformat(timespec="milliseconds")


def check_clean(path) -> None:
    """Refuse to record into the repository's results/ while hpcdl/ has uncommitted changes.

    results/ holds what committed code made, each figure traceable to its commit; anywhere else
    (a study's own folder, build/, a scratch file) records are written whatever the tree.
    """
    top = _git("rev-parse", "--show-toplevel")
    if top is None:
        return
    results = Path(top.strip()).resolve() / "results"
    target = Path(path).resolve()
    if results != target and results not in target.parents:
        return
    changes = code_changes()
    if changes:
        raise UserError(f"{path} is in the repository's results/, which holds what committed code "
                        f"made, and hpcdl/ has uncommitted changes ({', '.join(changes[:3])}"
                        f"{', ...' if len(changes) > 3 else ''}): commit them first, or record "
                        "elsewhere (--results, RESULTS_ROOT)")


def mpi_library_version() -> Optional[str]:
    """The MPI library's own version line, from mpi4py when it is loaded, else ``mpirun --version``."""
    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None:
        try:
            return mod.Get_library_version().replace("\x00", "").strip().splitlines()[0]
        except Exception:  # noqa: BLE001 - a broken MPI must not break a record
            pass
    try:
        out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True, timeout=10)
        first = (out.stdout or out.stderr).strip().splitlines()
        return first[0] if first else None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict:
    tf = stack.tensorflow_version()
    return {
        "python": platform.python_version(),
        "hpcdl": _hpcdl_version(),
        "tensorflow": tf,
        "keras": stack.keras(tf=tf),
        "horovod": package_version("horovod"),
        "horovod_patches": "+".join(stack.horovod_patches()) or None,
        "mpi4py": package_version("mpi4py"),
        "numpy": package_version("numpy"),
        "mpi": mpi_library_version(),
    }


# The vector units a CPU's kernels (TensorFlow's oneDNN, numpy's BLAS) choose between: two
# machines that differ in these compute at different speeds with the same code.
_VECTOR_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


def cpu_identity(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The processor the run computed on, as one string: its model name, family and model, and
    the vector units it has (e.g. ``AMD EPYC (family 25 model 1; avx2 fma)``). Records made on
    processors that differ must not be pooled as one measurement: the same host name ("vm") can
    stand for machines several times apart in speed. Off Linux, what :mod:`platform` says."""
    fields = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break                      # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown"
    if "cpu family" not in fields:
        return name
    have = set(fields.get("flags", "").split())
    units = " ".join(f for f in _VECTOR_FLAGS if f in have) or "no avx2"
    return f"{name} (family {fields['cpu family']} model {fields.get('model', '?')}; {units})"


def _hpcdl_version() -> str:
    return __version__


def manifest(layout=None, hosts: Optional[Iterable[str]] = None, extra: Optional[dict] = None) -> dict:
    """Everything needed to trust a record later: code, versions, hosts, layout and settings."""
    layout = layout or cluster.discover()
    env = cluster.launcher_env()
    man = {
        "git_commit": _git_commit(),
        "code_tree": code_tree(),
        "started": cluster.setting("HPCDL_JOB_STARTED") or process_started(),
        "versions": versions(),
        "hosts": sorted(set(hosts)) if hosts else [layout.host or socket.gethostname()],
        "layout": layout.as_dict(),
        # the batch job's facts, Slurm's or Grid Engine's (its "scheduler" says which)
        "slurm": cluster.scheduler_facts(),
        "env": env,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu": cpu_identity(),
        "argv": sys.argv,
        "time": now_iso(),
    }
    if extra:
        man.update(extra)
    return man
