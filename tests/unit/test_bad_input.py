"""Bad input ends in one line naming what to fix, exit status 2, and no traceback.

Each row runs the real ``hpcdl`` command in a fresh process. Rows marked (TF) start TensorFlow
before they can tell (a few seconds each); the rest fail before any heavy import.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpcdl.errors import UserError
from hpcdl.launch import local

ROOT = Path(__file__).resolve().parents[2]

GOOD_STUDY = """\
[study]
name = "bad-input"
scaling = "strong"
[workload]
name = "expmlp"
global_batch = 100
steps = 10
[layout]
ranks = [1, 2]
"""


def _study(tmp, text):
    path = tmp / "study.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def _fake_horovod_without_tf(tmp):
    """A Horovod installation whose TensorFlow extension was not built (only its Python files)."""
    pkg = tmp / "site" / "horovod"
    (pkg / "tensorflow").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0.28.1'\n")
    (pkg / "tensorflow" / "__init__.py").write_text("raise ImportError('extension not built')\n")
    return {"PYTHONPATH": f"{tmp / 'site'}{os.pathsep}{ROOT}"}


def _broken_libmpi(tmp):
    """An MPI library that cannot load (here: an empty file first on the library path)."""
    d = tmp / "badmpi"
    d.mkdir()
    (d / "libmpi.so.40").write_bytes(b"")
    return {"LD_LIBRARY_PATH": str(d)}


def _foreign_checkpoint(tmp):
    path = tmp / "ckpt-000000010.hpcdl"
    path.write_text('{"schema": "hpcdl.run/1"}\n')
    return str(path)


# (case, argv (a callable of the temp dir for files), extra env (callable), what the line names)
CASES = [
    ("unknown workload", ["train", "--workload", "resnet9000"], None, "unknown workload 'resnet9000'"),
    ("unknown backend", ["train", "--backend", "pigeon"], None, "unknown --backend 'pigeon': choose one of"),
    ("unknown compression", ["train", "--compression", "zip"], None, "unknown --compression 'zip'"),
    ("zero steps", ["train", "--steps", "0"], None, "argument --steps: must be positive, got 0"),
    ("negative batch size", ["train", "--batch-size", "-8"], None,
     "argument --batch-size/-b: must be positive, got -8"),
    ("zero max time", ["train", "--max-time", "0"], None, "argument --max-time: must be positive"),
    ("zero ranks in a study", lambda t: ["study", "validate", _study(t, GOOD_STUDY.replace("[1, 2]", "[0, 2]"))],
     None, "study.toml: layout.ranks"),
    ("ranks that do not divide the global batch", lambda t: ["study", "validate", _study(
        t, GOOD_STUDY.replace("[1, 2]", "[1, 3]"))], None,
     "study.toml: layout.ranks: 3 ranks do not divide workload.global_batch = 100"),
    ("dataset smaller than one global batch (TF)",
     ["train", "--workload", "mnist", "--data", "sklearn-digits", "--batch-size", "5000", "--results", "-"],
     None, "1437 samples cannot fill one global batch of 5000 (1 rank(s) x 5000); use fewer ranks"),
    ("study: wrong type", lambda t: ["study", "validate", _study(t, GOOD_STUDY.replace("steps = 10", 'steps = "ten"'))],
     None, "study.toml: workload.steps: must be an integer, got 'ten'"),
    ("study: unknown key", lambda t: ["study", "validate", _study(t, GOOD_STUDY.replace("steps = 10", "stepz = 10"))],
     None, "study.toml: workload.stepz"),
    ("study: missing field", lambda t: ["study", "validate", _study(t, GOOD_STUDY.replace('name = "expmlp"\n', ""))],
     None, "study.toml: workload.name"),
    ("study: no such file", lambda t: ["study", "validate", str(t / "nosuch.toml")], None,
     "nosuch.toml: no such study file"),
    ("missing dataset path", ["train", "--workload", "mnist", "--data", "/nonexistent/mnist.npz"], None,
     "--data /nonexistent/mnist.npz: no such file"),
    ("mpirun not found", ["study", "run", str(ROOT / "jobs" / "local-expmlp-strong.toml"), "--dry-run",
                          "--results-root", "results-bad-input"],
     lambda t: {"PATH": str(t)}, "mpirun not found on PATH"),
    ("MPI library does not load (TF)", ["train", "--steps", "20", "--results", "-"], _broken_libmpi,
     "cannot load Horovod's TensorFlow extension (" ),
    ("Horovod built without TensorFlow", ["train", "--steps", "20", "--results", "-"],
     _fake_horovod_without_tf, "is built without TensorFlow: rebuild it with HOROVOD_WITH_TENSORFLOW=1"),
    ("foreign checkpoint to resume from (TF)", lambda t: ["train", "--resume", _foreign_checkpoint(t),
                                                           "--results", "-"],
     None, "is not an hpcdl checkpoint"),
    ("--resume without a checkpoint dir", ["train", "--resume"], None, "--resume needs --checkpoint-dir"),
]


@pytest.mark.parametrize("argv, env, expect", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_exit_2_and_no_traceback(tmp_path, argv, env, expect):
    argv = argv(tmp_path) if callable(argv) else argv
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    for key in [k for k in full_env if k.startswith(("OMPI_", "PMI", "SLURM_"))]:
        del full_env[key]                  # one process, whatever launched the test session
    full_env.update(env(tmp_path) if env else {})
    proc = subprocess.run([sys.executable, "-m", "hpcdl", *argv], capture_output=True, text=True,
                          env=full_env, cwd=tmp_path, timeout=180)
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert len(err_lines) == 1, proc.stderr[-3000:]
    assert err_lines[0].startswith(f"hpcdl {argv[0]}: error: ")
    assert expect in err_lines[0]


def test_find_mpirun_raises_a_user_error_when_mpirun_is_not_on_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="mpirun not found on PATH"):
        local.find_mpirun()


def test_a_rank_count_of_zero_is_refused_before_anything_starts():
    with pytest.raises(UserError, match="rank count must be positive, got 0"):
        local.mpirun_command(0, ["true"], mpirun="/usr/bin/mpirun")
