"""Bad input ends in one line naming what to fix, exit status 2, and no traceback.

Each row runs the real ``hpcdl`` command in a fresh process. Rows marked (TF) start TensorFlow
before they can tell (a few seconds each); the rest fail before any heavy import.
"""
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from hpcdl.errors import UserError
from hpcdl.launch import local
from hpcdl_testing import one_process_env

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


LOCKED = []          # paths made unwritable by a case, made writable again after it


def _locked(path: Path) -> str:
    """``path`` made unwritable, for root too (immutable) or else by its mode."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
    else:
        path.chmod(0o555 if path.is_dir() else 0o444)
    LOCKED.append(path)
    return str(path)


@pytest.fixture(autouse=True)
def _unlock():
    yield
    while LOCKED:
        path = LOCKED.pop()
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        else:
            path.chmod(0o755 if path.is_dir() else 0o644)


def _file(tmp, name="runs.jsonl", text=""):
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _results(tmp, edit=None, name="rep"):
    """A folder holding a committed study's records (each passed through ``edit``)."""
    recs = [json.loads(ln) for ln in
            (ROOT / "results" / "local-expmlp-strong" / "runs.jsonl").read_text().splitlines()]
    d = tmp / name
    d.mkdir()
    (d / "runs.jsonl").write_text("".join(json.dumps(edit(r) if edit else r) + "\n" for r in recs))
    return d


def _binary(tmp) -> str:
    path = tmp / "s.bin"
    path.write_bytes(bytes(range(256)))
    return str(path)


def _fit(tmp, **terms) -> str:
    """The committed bench fit with ``terms`` of its Horovod entry replaced."""
    doc = json.loads((ROOT / "results" / "bench" / "fit.json").read_text())
    doc["backends"]["horovod"].update(terms)
    return str(_file(tmp, "fit.json", json.dumps(doc)))


ALLOC = ROOT / "results" / "box-fc-cnn-175mbit" / "allocation"


def _edited(tmp, name: str, edit) -> str:
    """A committed allocation file of box-fc-cnn-175mbit, passed through ``edit(doc)``."""
    doc = json.loads((ALLOC / name).read_text())
    edit(doc)
    return str(_file(tmp, f"edited-{name}", json.dumps(doc)))


def _spread_value(value):
    def edit(doc):
        doc["spread"]["2"][0][1] = value
    return edit


def _loop_share(value):
    def edit(doc):
        doc["shares"]["1"]["2"]["median"] = value
    return edit


def _zero_times(doc):
    for c in doc["candidates"]:
        c["times_s"] = [0.0 for _ in c["times_s"]]


USER_MODEL = """
import numpy as np
import tensorflow as tf

def good():
    x = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    return tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense({width})]), "mse", (x, y)

def factory(opts):
    model, loss, (x, y) = good()
    return {result}
"""


def _user_model(result: str, width: int = 1):
    """A module ``mywl`` whose ``factory`` returns ``result`` (a model of output ``width``)."""
    def env(tmp):
        (tmp / "mywl.py").write_text(USER_MODEL.format(result=result, width=width))
        return {"PYTHONPATH": f"{tmp}{os.pathsep}{ROOT}"}
    return env


def _declaring(fit):
    def edit(r):
        r["declared"]["calibration"] = f"fit:{fit}"
        return r
    return edit


# (case, argv (a callable of the temp dir for files), extra env (callable), what the line names)
CASES = [
    ("--results an immutable file", lambda t: ["train", "--steps", "300", "--results",
                                               _locked(_file(t))], None, "cannot be written"),
    ("--results in an immutable folder", lambda t: [
        "train", "--steps", "300", "--results", str(Path(_locked(_file(t / "d", "x").parent)) / "r.jsonl")],
     None, "its directory cannot be written"),
    ("--results under a regular file", lambda t: [
        "train", "--steps", "300", "--results", str(_file(t, "plain") / "r.jsonl")],
     None, "plain is not a directory"),
    ("--results a directory", lambda t: ["train", "--steps", "300", "--results", str(t)],
     None, "is a directory: give the path of a file"),
    ("--checkpoint-dir a regular file", lambda t: [
        "train", "--checkpoint-dir", str(_file(t, "plain")), "--checkpoint-every", "20",
        "--results", "-"], None, "--checkpoint-dir"),
    ("study run into an immutable results file", lambda t: [
        "study", "run", str(ROOT / "jobs" / "local-expmlp-strong.toml"), "--results-root",
        str(Path(_locked(_file(t / "res" / "local-expmlp-strong"))).parent.parent)],
     None, "the study's results file"),
    ("study run under an immutable results root", lambda t: [
        "study", "run", str(ROOT / "jobs" / "local-expmlp-strong.toml"), "--results-root",
        _locked(_file(t / "res", "x").parent)], None, "its directory cannot be made"),
    ("study report into an immutable folder", lambda t: [
        "study", "report", _locked(_results(t))], None, "the report's folder"),
    ("study report --out an immutable folder", lambda t: [
        "study", "report", str(_results(t)), "--out", _locked(_file(t / "out", "x").parent)],
     None, "the report's folder"),
    ("study report --fit not JSON", lambda t: [
        "study", "report", str(_results(t)), "--fit", str(_file(t, "notjson.txt", "hello"))],
     None, "not JSON"),
    ("a record declaring a fit that is not JSON", lambda t: [
        "study", "report", str(_results(t, _declaring("/etc/passwd")))], None,
     "fit /etc/passwd: not JSON"),
    ("study report --fit whose alpha is negative", lambda t: [
        "study", "report", str(_results(t)), "--fit", _fit(t, alpha_s=-1)], None,
     "backends.horovod.alpha_s = -1 is not a finite number >= 0"),
    ("study report --fit whose beta is NaN", lambda t: [
        "study", "report", str(_results(t)), "--fit", _fit(t, beta_s_per_byte=float("nan"))],
     None, "backends.horovod.beta_s_per_byte = nan is not a finite number"),
    ("study report --fit whose alpha is a string", lambda t: [
        "study", "report", str(_results(t)), "--fit", _fit(t, alpha_s="fast")], None,
     "fit.json: backends.horovod.alpha_s = 'fast'"),
    ("study report --spread-bench with a NaN deviation", lambda t: [
        "study", "report", str(_results(t)), "--spread-bench",
        _edited(t, "spread.json", _spread_value(float("nan")))], None, "spread.2.0.1 = nan is not a node's compute"),
    ("study report --spread-bench with a negative deviation", lambda t: [
        "study", "report", str(_results(t)), "--spread-bench",
        _edited(t, "spread.json", _spread_value(-0.5))], None, "spread.2.0.1 = -0.5 is not"),
    ("study report --spread-bench with a 1e9 deviation", lambda t: [
        "study", "report", str(_results(t)), "--spread-bench",
        _edited(t, "spread.json", _spread_value(1e9))], None, "spread.2.0.1 = 1000000000.0 is not"),
    ("study report --loop-bench with a share of 1.5", lambda t: [
        "study", "report", str(_results(t)), "--loop-bench",
        _edited(t, "loop-cpu.json", _loop_share(1.5))], None, "shares.1.2.median = 1.5 is not a share of a CPU"),
    ("study report --loop-bench with a share of -0.2", lambda t: [
        "study", "report", str(_results(t)), "--loop-bench",
        _edited(t, "loop-cpu.json", _loop_share(-0.2))], None, "shares.1.2.median = -0.2 is not"),
    ("study report --loop-bench with a share of 1.0", lambda t: [
        "study", "report", str(_results(t)), "--loop-bench",
        _edited(t, "loop-cpu.json", _loop_share(1.0))], None, "shares.1.2.median = 1.0 is not"),
    ("study report --exchange-bench naming a file that is no tuning file", lambda t: [
        "study", "report", str(_results(t)), "--exchange-bench", "/etc/passwd"], None,
     "--exchange-bench /etc/passwd: not a JSON file of hpcdl.tuning/1"),
    ("study report --exchange-bench matching no file", lambda t: [
        "study", "report", str(_results(t)), "--exchange-bench", str(t / "x-{nodes}n.json")], None,
     "x-{nodes}n.json: no file matches"),
    ("study report --exchange-bench whose times are 0", lambda t: [
        "study", "report", str(_results(t)), "--exchange-bench",
        _edited(t, "exchange-8n-175mbit.json", _zero_times)], None,
     "candidates.0.times_s.0 = 0.0 is not a time in seconds"),
    ("train --tuning whose times are 0", lambda t: [
        "train", "--tuning", _edited(t, "exchange-8n-175mbit.json", _zero_times)], None,
     "candidates.0.times_s.0 = 0.0 is not a time in seconds"),
    ("study validate: a forecast naming a count twice", lambda t: [
        "study", "validate", _study(t, GOOD_STUDY + "[model]\nforecast = [16, 16]\n")], None,
     "model.forecast: each node count once; got [16, 16]"),
    ("study validate: an empty forecast", lambda t: [
        "study", "validate", _study(t, GOOD_STUDY + "[model]\nforecast = []\n")], None,
     "leave the key out for the report's default"),
    ("info --check where Horovod's TensorFlow part fails to import (TF)", ["info", "--check"],
     _fake_horovod_without_tf, "'import horovod.tensorflow' fails (ImportError: extension not built)"),
    ("HPCDL_THREADS that is no number", ["train", "--workload", "expmlp"],
     lambda t: {"HPCDL_THREADS": "abc"}, "HPCDL_THREADS='abc': give a whole number"),
    ("HPCDL_THREADS of 0", ["train", "--workload", "expmlp"], lambda t: {"HPCDL_THREADS": "0"},
     "HPCDL_THREADS='0': give a whole number of threads per rank, 1 or more"),
    ("a factory whose model's output is too wide (TF)", ["train", "--workload", "mywl:factory"],
     _user_model("model, loss, (x, y)", width=3),
     "'mywl:factory': its model's output is 3 wide and its labels 1 ((1, 3) against (1, 1))"),
    ("a factory whose features are strings (TF)", ["train", "--workload", "mywl:factory"],
     _user_model("model, loss, (np.array(['a'] * 64), y)"),
     "its dataset's features are <U1, not numbers"),
    ("a factory returning its values in the wrong order (TF)", ["train", "--workload", "mywl:factory"],
     _user_model("(x, y), model, loss"),
     "its model (the first value) is a tuple, not a Keras model; the factory returns (model, loss, dataset)"),
    ("a factory whose loss names no loss (TF)", ["train", "--workload", "mywl:factory"],
     _user_model("model, 'msee', (x, y)"), "its loss (the second value) 'msee' names no Keras loss"),
    ("study report --loop-bench not a loop file", lambda t: [
        "study", "report", str(_results(t)), "--loop-bench", "/etc/passwd"], None,
     "--loop-bench /etc/passwd: not a JSON file of hpcdl.loop-cpu/1"),
    ("study report --spread-bench a binary file", lambda t: [
        "study", "report", str(_results(t)), "--spread-bench", _binary(t)], None,
     "s.bin: not a JSON file of hpcdl.host-spread/1"),
    ("study validate: [model] fit not JSON", lambda t: ["study", "validate", _study(
        t, GOOD_STUDY + '[model]\nfit = "/etc/passwd"\n')], None, "model.fit: /etc/passwd: not JSON"),
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
    ("no dataset at all", ["train", "--workload", "mnist"], lambda t: {"HPCDL_DATA": ""},
     "mnist needs its data and downloads nothing: give the standard mnist.npz with --data PATH"),
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
    ("study report where report.md is immutable", lambda t: [
        "study", "report", str(Path(_locked(_file(_results(t), "report.md"))).parent),
        "--no-plots"], None, "report.md: cannot be written"),
    ("study report where a plot's path is a folder", lambda t: [
        "study", "report", str(_file(_results(t) / "throughput-speedup.png", "x").parent.parent)],
     None, "throughput-speedup.png: cannot be written (Is a directory)"),
    ("study report where runs.jsonl is a folder", lambda t: [
        "study", "report", str(_file(t / "r" / "runs.jsonl", "x").parent.parent)], None,
     "runs.jsonl: cannot be read"),
    ("study validate of a folder", lambda t: ["study", "validate", str(t)], None,
     "a directory, not a study file"),
    ("--tuning not a tuning file, at one rank", ["train", "--tuning", "/etc/passwd"], None,
     "tuning file /etc/passwd: not readable JSON"),
    ("--tuning whose cycle time is no number", lambda t: ["train", "--tuning", str(_file(
        t, "t.json", json.dumps({"schema": "hpcdl.tuning/1", "picks": {"none": {"env": {
            "HOROVOD_CYCLE_TIME": "abc"}}}})))], None,
     "HOROVOD_CYCLE_TIME = 'abc' is not a cycle time in ms"),
    ("study validate: [run] tuning names a file that is not one", lambda t: [
        "study", "validate", _study(t, GOOD_STUDY + '[run]\ntuning = "/etc/passwd"\n')], None,
     "/etc/passwd exists and is not a tuning file"),
    ("study validate: calibrate's nodes_max holds every point", lambda t: [
        "study", "validate", _study(t, GOOD_STUDY + "[model]\ncalibrate = { nodes_max = 16 }\n")],
     None, "nodes_max = 16 holds every point (the largest has 2 rank(s))"),
    ("study report --max-ranks, gone", lambda t: [
        "study", "report", str(_results(t)), "--max-ranks", "-4"], None,
     "--max-ranks is gone with the whole-step extrapolation"),
    ("study validate: a partition that would start a line of the job script", lambda t: [
        "study", "validate", _study(t, GOOD_STUDY + '[slurm]\npartition = "debug\\nrm -rf ~"\n')],
     None, "slurm.partition: 'debug\\nrm -rf ~': letters, digits"),
    ("study validate: an account with a shell metacharacter", lambda t: [
        "study", "validate", _study(t, GOOD_STUDY + '[slurm]\naccount = "lab;reboot"\n')],
     None, "slurm.account: 'lab;reboot'"),
    ("study validate: an extra sbatch option over two lines", lambda t: [
        "study", "validate", _study(t, GOOD_STUDY + '[slurm]\nextra = ["--exclusive\\necho hi"]\n')],
     None, "slurm.extra: '--exclusive\\necho hi': an option (-...) on one line"),
    ("study submit --partition with a space", lambda t: [
        "study", "submit", _study(t, GOOD_STUDY), "--partition", "a b", "--dry-run"], None,
     "--partition 'a b': letters, digits"),
    ("--micro-batches without a pipeline", ["train", "--micro-batches", "3"], None,
     "--micro-batches is an option of --parallel pipeline"),
    ("study status of a submission log holding a JSON list", lambda t: [
        "study", "status", _study(t, GOOD_STUDY), "--results-root",
        str(_file(t / "res" / "bad-input" / "jobs", "submitted.jsonl", "[1, 2]\n").parents[2])],
     None, "submitted.jsonl, line 1: not a submission"),
]


def _one_process_env() -> dict:
    """This environment without MPI's and Slurm's: one process, whatever launched the tests."""
    return one_process_env()


@pytest.mark.parametrize("argv, env, expect", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_exit_2_and_no_traceback(tmp_path, argv, env, expect):
    argv = argv(tmp_path) if callable(argv) else argv
    full_env = dict(_one_process_env(), PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    full_env.update(env(tmp_path) if env else {})
    proc = subprocess.run([sys.executable, "-m", "hpcdl", *argv], capture_output=True, text=True,
                          env=full_env, cwd=tmp_path, timeout=180)
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert len(err_lines) == 1, proc.stderr[-3000:]
    assert err_lines[0].startswith(f"hpcdl {argv[0]}: error: ")
    assert expect in err_lines[0]


@pytest.mark.parametrize("data", ["", "/nonexistent/mnist.npz"])
def test_a_missing_dataset_is_named_before_tensorflow_starts(tmp_path, data):
    """On a cluster every rank would first spend its TensorFlow start-up (seconds, a minute from a
    shared file system at scale): the data is checked before. A TensorFlow that cannot be
    imported shows it is not."""
    fake = tmp_path / "fake" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('TensorFlow was imported')\n")
    env = _one_process_env()
    env.update(PYTHONPATH=f"{fake.parent}:{ROOT}", HPCDL_DATA=data)
    proc = subprocess.run([sys.executable, "-m", "hpcdl", "train", "--workload", "mnist"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "TensorFlow was imported" not in proc.stderr
    assert "mnist.npz" in proc.stderr and "--data" in proc.stderr


def test_find_mpirun_raises_a_user_error_when_mpirun_is_not_on_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="mpirun not found on PATH"):
        local.find_mpirun()


def test_a_rank_count_of_zero_is_refused_before_anything_starts():
    with pytest.raises(UserError, match="rank count must be positive, got 0"):
        local.mpirun_command(0, ["true"], mpirun="/usr/bin/mpirun")


def test_records_that_are_no_measurement_are_left_out_counted_and_named(tmp_path, capsys):
    from hpcdl import report
    lines = (ROOT / "results" / "local-mnist-weak" / "runs.jsonl").read_text().splitlines()
    recs = [json.loads(ln) for ln in lines]
    recs[0]["metrics"]["throughput"]["mean"] = -500
    recs[1]["metrics"]["throughput"]["mean"] = 0
    recs[2]["metrics"]["throughput"]["mean"] = float("nan")
    del recs[3]["metrics"]
    recs[4]["layout"]["size"] = 0
    recs[5]["point"]["ranks"] = 0
    recs[6]["metrics"]["throughput"]["mean"] = "fast"
    recs[7]["metrics"]["throughput"]["mean"] = 1e308        # finite, and no measurement
    text = [json.dumps(r) for r in recs]
    text.insert(10, text[9])                                   # the same record twice
    text.insert(12, '{"kind": "train", "metrics": {"throu')    # a torn line
    d = tmp_path / "s"
    d.mkdir()
    (d / "runs.jsonl").write_text("\n".join(text) + "\n")
    report.write_report(d, plots=False)
    md = (d / "report.md").read_text()
    assert json.loads((d / "report.json").read_text())["records"] == len(recs) - 8
    assert f"from `{d / 'runs.jsonl'}`: {len(recs) - 8} record(s)" in md
    left = next(ln for ln in md.splitlines() if ln.startswith("**Left out of this report:**"))
    runs = d / "runs.jsonl"
    for words in ("1 torn or corrupt line(s)", "(line 13)", "1 line(s)", "(line 11)",
                  "8 record(s) left out",
                  f"{runs}:1: metrics.throughput.mean: -500 is not positive",
                  f"{runs}:2: metrics.throughput.mean: 0 is not positive",
                  f"{runs}:3: metrics.throughput.mean: nan is not finite",
                  f"{runs}:4: metrics.throughput.mean: missing",
                  f"{runs}:5: layout.size: 0 is not positive"):
        assert words in left, words
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 3 and all(ln.startswith("hpcdl study report: ") for ln in err)
    # every one is in report.json, the ones past the fifth too
    out = json.loads((d / "report.json").read_text())["left_out"]
    assert out["torn_lines"] == [13] and out["duplicate_lines"] == [11]
    assert out["excluded"][5:7] == [f"{runs}:6: point.ranks: 0 is not positive",
                                    f"{runs}:7: metrics.throughput.mean: 'fast' is not a number"]
    assert out["excluded"][7] == (f"{runs}:8: metrics.throughput.mean: 1e+308 samples a second "
                                  "is no measurement (over 1e+12)")


def test_a_dry_run_says_nothing_ran(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hpcdl", "study", "run",
                           str(ROOT / "jobs" / "local-expmlp-strong.toml"), "--dry-run",
                           "--results-root", str(tmp_path)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last == "# dry run: 6 point(s) would run; nothing ran"
    assert not (tmp_path / "local-expmlp-strong" / "runs.jsonl").exists()


def test_a_results_file_that_becomes_unwritable_during_the_run_loses_no_record(tmp_path):
    """(TF) The file is locked once training has begun: the record goes to a fallback file in
    the working directory, named on stderr, and the exit status says it is not where asked."""
    results = _file(tmp_path, "runs.jsonl")
    env = one_process_env(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen([sys.executable, "-m", "hpcdl", "train", "--workload", "expmlp",
                             "--steps", "300", "--results", str(results)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(170, proc.kill)   # a hung run cannot hold the suite
    watchdog.start()
    try:
        header = proc.stdout.readline()           # printed once the run has started
        assert header.startswith("# hpcdl train:"), header
        _locked(results)
        out, err = proc.communicate(timeout=170)
    finally:
        watchdog.cancel()
        proc.kill()
    kept = tmp_path / f"hpcdl-record-{proc.pid}.jsonl"
    assert proc.returncode == 3, err[-2000:]
    assert results.read_text() == ""
    rec = json.loads(kept.read_text())
    assert rec["params"]["workload"] == "expmlp" and rec["metrics"]["throughput"]["mean"] > 0
    assert f"it is in {kept}" in err and "Traceback" not in err


def _hpcdl(tmp, *argv, timeout=170):
    env = one_process_env(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "hpcdl", *argv], capture_output=True, text=True,
                          env=env, cwd=tmp, timeout=timeout)


def test_resuming_with_another_batch_is_refused_unless_asked_and_then_recorded(tmp_path):
    """(TF) Checkpoints written at batch 100 are not continued at batch 50 without
    --resume-mismatch; with it, the record names what differed."""
    base = ["train", "--workload", "expmlp", "--checkpoint-dir", "ck", "--steps", "40"]
    res = _hpcdl(tmp_path, *base, "--batch-size", "100", "--checkpoint-every", "20",
                 "--results", "-")
    assert res.returncode == 0, res.stderr[-2000:]
    res = _hpcdl(tmp_path, *base, "--steps", "60", "--batch-size", "50", "--resume",
                 "--results", "-")
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(err) == 1, res.stderr[-2000:]
    assert "was written by a run with another batch per rank 100 (now 50)" in err[0]
    assert "learning rate" in err[0]            # linear scaling: the rate follows the batch
    res = _hpcdl(tmp_path, *base, "--steps", "60", "--batch-size", "50", "--resume",
                 "--resume-mismatch", "--results", "r.jsonl")
    assert res.returncode == 0, res.stderr[-2000:]
    rec = json.loads((tmp_path / "r.jsonl").read_text())
    assert rec["resumed_from"]["step"] == 20          # the last checkpoint, every 20 steps
    assert rec["resumed_from"]["mismatch"][0] == "batch per rank 100 (now 50)"


def test_weights_that_cannot_be_saved_cost_no_record(tmp_path):
    """(TF) --save-weights under a regular file: the run's record is appended first, then one
    line says the weights were not saved."""
    res = _hpcdl(tmp_path, "train", "--workload", "expmlp", "--steps", "30", "--save-weights",
                 str(_file(tmp_path, "plain") / "w.npz"), "--results", "r.jsonl")
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(err) == 1, res.stderr[-2000:]
    assert "--save-weights" in err[0] and "the run's record was kept" in err[0]
    rec = json.loads((tmp_path / "r.jsonl").read_text())
    assert rec["params"]["workload"] == "expmlp"


def test_resuming_with_fewer_steps_than_the_checkpoint_is_refused_in_one_line(tmp_path):
    """(TF) A checkpoint at step 20 and --steps 20: nothing to train, said so (it was a
    TypeError)."""
    base = ["train", "--workload", "expmlp", "--checkpoint-dir", "ck", "--results", "-"]
    assert _hpcdl(tmp_path, *base, "--steps", "40", "--checkpoint-every", "20").returncode == 0
    res = _hpcdl(tmp_path, *base, "--steps", "20", "--resume")
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(err) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "is at step 20 and this run trains 20: nothing is left to train" in err[0]


def test_ctrl_c_writes_a_checkpoint_as_sigterm_does(tmp_path):
    """(TF) SIGINT once training has begun: the run stops at the ranks' next agreement, writes a
    checkpoint to --checkpoint-dir and exits 75 (resume it)."""
    import signal
    from hpcdl.errors import EXIT_INTERRUPTED
    env = dict(_one_process_env(), PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen([sys.executable, "-m", "hpcdl", "train", "--workload", "expmlp",
                             "--steps", "200000", "--checkpoint-dir", "ck", "--results", "-"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    watchdog = threading.Timer(170, proc.kill)   # a hung run cannot hold the suite
    watchdog.start()
    try:
        header = proc.stdout.readline()           # printed once the run has started
        assert header.startswith("# hpcdl train:"), header
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=170)
    finally:
        watchdog.cancel()
        proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED, err[-2000:]
    assert "signal SIGINT" in out + err
    assert list((tmp_path / "ck").glob("ckpt-*.hpcdl")), out + err


def test_a_batch_too_large_for_memory_is_one_line(tmp_path):
    """(TF) TensorFlow's out-of-memory error at a batch the node cannot hold (here an address
    space of 6 GB against a 9.8 GB input batch): one line saying what to lower, exit 2."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    env = dict(_one_process_env(), PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    res = subprocess.run([sys.executable, "-m", "hpcdl", "train", "--workload", "cnn", "--model",
                          "small", "--image-size", "64", "--batch-size", "200000", "--steps", "3",
                          "--results", "-"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=180, preexec_fn=limit)
    err = [ln for ln in res.stderr.splitlines() if ln.strip() and "cuInit" not in ln]
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert len(err) == 1 and err[0].startswith("hpcdl train: error: out of memory"), err
    assert "lower --batch-size" in err[0]


def test_a_point_recorded_again_is_named_and_not_pooled_as_more_repeats(tmp_path, capsys):
    """50 copies of one point's record with other times (a study run again with --force, or
    lines copied by hand) were pooled as 50 repeats, moving its efficiency with no word: the
    first of each point is kept, the others are named; by one reader and by several alike."""
    from hpcdl import report
    recs = [json.loads(ln) for ln in
            (ROOT / "results" / "local-expmlp-strong" / "runs.jsonl").read_text().splitlines()]
    again = []
    for k in range(50):
        r = json.loads(json.dumps(recs[1]))
        r["time"] = f"2026-11-01T10:{k:02d}:00+00:00"
        r["metrics"]["throughput"]["mean"] *= 1.3
        again.append(r)
    d = tmp_path / "s"
    d.mkdir()
    (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs + again))
    baseline = tmp_path / "b"
    baseline.mkdir()
    (baseline / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    report.write_report(baseline, plots=False)
    for workers in (1, 3):
        report.write_report(d, how=report.Reading(workers=workers), plots=False)
        doc = json.loads((d / "report.json").read_text())
        assert doc["records"] == len(recs)
        assert len(doc["left_out"]["repeated_points"]) == 50
        assert doc["rows"] == json.loads((baseline / "report.json").read_text())["rows"]
        md = (d / "report.md").read_text()
        assert "50 record(s) of a study's point recorded before" in md


def test_resuming_with_another_seed_is_refused_unless_asked_and_then_recorded(tmp_path):
    """(TF) The seed sets the data order: a checkpoint of seed 0 is not continued as seed 7
    without --resume-mismatch; with it, the record says what differed."""
    base = ["train", "--workload", "expmlp", "--checkpoint-dir", "ck"]
    assert _hpcdl(tmp_path, *base, "--steps", "40", "--checkpoint-every", "20",
                  "--results", "-").returncode == 0
    res = _hpcdl(tmp_path, *base, "--steps", "60", "--seed", "7", "--resume", "--results", "-")
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(err) == 1, res.stderr[-2000:]
    assert "was written by a run with another seed 0 (now 7)" in err[0]
    res = _hpcdl(tmp_path, *base, "--steps", "60", "--seed", "7", "--resume",
                 "--resume-mismatch", "--results", "r.jsonl")
    assert res.returncode == 0, res.stderr[-2000:]
    rec = json.loads((tmp_path / "r.jsonl").read_text())
    assert rec["resumed_from"]["mismatch"] == ["seed 0 (now 7)"]


def test_a_thread_count_far_past_the_cpus_is_capped_with_a_note_and_trains(tmp_path):
    """(TF) HPCDL_THREADS=99999 hung TensorFlow's start; it is capped at the CPUs this process
    may use, said in one line, and the run ends."""
    env = {"HPCDL_THREADS": "99999"}
    res = subprocess.run([sys.executable, "-m", "hpcdl", "train", "--workload", "expmlp",
                          "--steps", "30", "--results", "r.jsonl"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=170,
                         env=dict(_one_process_env(), PYTHONPATH=str(ROOT), **env))
    assert res.returncode == 0, res.stderr[-2000:]
    cpus = len(os.sched_getaffinity(0))
    assert f"hpcdl: HPCDL_THREADS=99999 is more than the {cpus} CPU(s) this rank may run on; " \
           f"using {cpus}" in res.stderr
    rec = json.loads((tmp_path / "r.jsonl").read_text())
    assert rec["params"]["threads_per_rank"] == cpus


def test_the_benchmark_terms_set_a_user_models_steps(tmp_path):
    """(TF) A user's model trains warm-up + iterations x steps per iteration where the study
    (or the command line) gives them, not the factory's default steps."""
    env = _user_model("model, loss, (x, y)")(tmp_path)
    res = subprocess.run([sys.executable, "-m", "hpcdl", "train", "--workload", "mywl:factory",
                          "--num-warmup-batches", "3", "--num-batches-per-iter", "4",
                          "--num-iters", "2", "--batch-size", "8", "--results", "r.jsonl"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=170,
                         env=dict(_one_process_env(), **env))
    assert res.returncode == 0, res.stderr[-2000:]
    params = json.loads((tmp_path / "r.jsonl").read_text())["params"]
    assert (params["steps"], params["warmup"]) == (11, 3), params


def test_a_report_whose_markdown_cannot_be_replaced_rewrites_none_of_its_files(tmp_path):
    """An immutable report.md: refused in one line before any file of the report is written,
    so its CSVs and report.json still match the report.md beside them."""
    folder = _results(tmp_path)
    assert _hpcdl(tmp_path, "study", "report", str(folder), "--no-plots").returncode == 0
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.name != "runs.jsonl"}
    _locked(folder / "report.md")
    res = _hpcdl(tmp_path, "study", "report", str(folder), "--no-plots")
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(err) == 1, res.stderr[-2000:]
    assert "report.md: cannot be written" in err[0] and "nothing of the report was written" in err[0]
    after = {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.name != "runs.jsonl"}
    assert after == before
