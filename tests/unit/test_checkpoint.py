"""Checkpoints are atomic, verified on load, and a bad one never costs the previous good one."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hpcdl.train import checkpoint
from hpcdl.train.checkpoint import CheckpointError, CheckpointWarning
from hpcdl.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    return {"model/0": rng.standard_normal((64, 32)).astype(np.float32),
            "model/1": rng.standard_normal(32).astype(np.float32),
            "opt/0": np.array(7, dtype=np.int64)}


def test_save_then_load_round_trips_arrays_step_and_meta(tmp_path):
    meta = {"data_position": {"step": 30, "epoch": 0}, "rng": {"tf_global": [1, 2, 3]}}
    path = checkpoint.save(tmp_path, 30, _arrays(), meta)
    header, arrays = checkpoint.load(path)
    assert path.name == "ckpt-000000030.hpcdl"
    assert header["step"] == 30 and header["meta"] == meta and header["magic"] == checkpoint.MAGIC
    for k, v in _arrays().items():
        np.testing.assert_array_equal(arrays[k], v)
        assert arrays[k].dtype == v.dtype
    assert [p.name for p in tmp_path.iterdir()] == [path.name]      # no temporary left behind


def test_save_keeps_only_the_newest_checkpoints(tmp_path):
    for step in (10, 20, 30, 40):
        checkpoint.save(tmp_path, step, _arrays(step), keep=2)
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == [
        "ckpt-000000030.hpcdl", "ckpt-000000040.hpcdl"]


@pytest.mark.parametrize("damage, message", [
    ("truncate", "truncated"),
    ("flip", "sha256 mismatch"),
    ("append", "after the payload"),
    ("foreign-npz", "not an hpcdl checkpoint"),
    ("foreign-text", "not an hpcdl checkpoint"),
    ("empty", "not an hpcdl checkpoint"),
    ("header-without-length", "damaged header"),
])
def test_load_rejects_a_damaged_or_foreign_file_with_a_clear_error(tmp_path, damage, message):
    path = checkpoint.save(tmp_path, 5, _arrays())
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:len(data) - 100])
    elif damage == "flip":
        pos = len(data) - 50
        path.write_bytes(data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1:])
    elif damage == "append":
        path.write_bytes(data + b"junk")
    elif damage == "foreign-npz":
        with open(path, "wb") as fh:
            np.savez(fh, **_arrays())
    elif damage == "foreign-text":
        path.write_text("this is a results file, not a checkpoint\n")
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "header-without-length":
        path.write_bytes(b'{"magic": "%s", "step": 5}\n' % checkpoint.MAGIC.encode() + data.split(b"\n", 1)[1])
    with pytest.raises(CheckpointError, match=message) as info:
        checkpoint.load(path)
    assert isinstance(info.value, UserError)       # the CLI reports it in one line, exit 2
    assert str(path) in str(info.value)


def test_latest_skips_a_bad_newest_checkpoint_and_keeps_the_older_good_one(tmp_path):
    checkpoint.save(tmp_path, 10, _arrays(10))
    bad = checkpoint.save(tmp_path, 20, _arrays(20))
    bad.write_bytes(bad.read_bytes()[:200])                       # torn by a crash
    seen = []
    path, header, arrays = checkpoint.latest(tmp_path, warn=seen.append)
    assert header["step"] == 10 and path.name == "ckpt-000000010.hpcdl"
    np.testing.assert_array_equal(arrays["model/0"], _arrays(10)["model/0"])
    assert len(seen) == 1 and "truncated" in seen[0] and "ckpt-000000020" in seen[0]
    with pytest.warns(CheckpointWarning, match="ckpt-000000020"):
        assert checkpoint.latest(tmp_path)[1]["step"] == 10
    assert bad.exists()                                           # left for inspection


def test_latest_is_none_when_nothing_verifies(tmp_path):
    (tmp_path / "ckpt-000000001.hpcdl").write_bytes(b"garbage")
    with pytest.warns(CheckpointWarning):
        assert checkpoint.latest(tmp_path) is None
    assert checkpoint.latest(tmp_path / "absent") is None


def test_find_gives_what_resume_names_or_why_it_cannot_be_used(tmp_path):
    assert checkpoint.find("latest", tmp_path) == (None, None)          # nothing yet: start at 0
    good = checkpoint.save(tmp_path, 10, _arrays(10))
    bad = tmp_path / "other.hpcdl"
    bad.write_bytes(good.read_bytes()[:-5])
    for resume in ("latest", str(good)):
        (path, header, arrays), error = checkpoint.find(resume, tmp_path)
        assert error is None and path == good and header["step"] == 10
        np.testing.assert_array_equal(arrays["model/0"], _arrays(10)["model/0"])
    found, error = checkpoint.find(str(bad), tmp_path)                  # named: never skipped
    assert found is None and str(bad) in error
    found, error = checkpoint.find(str(tmp_path / "missing.hpcdl"), tmp_path)
    assert found is None and "missing.hpcdl" in error


def test_a_saver_killed_mid_write_leaves_the_previous_checkpoint_intact(tmp_path):
    """A real process dies in mid-write (the kernel stops it at a file size limit with SIGXFSZ):
    the new checkpoint never appears under its final name and the old ones survive."""
    first = checkpoint.save(tmp_path, 10, _arrays(10), keep=1)
    limit = first.stat().st_size + 4096            # far less than the next checkpoint's size
    script = textwrap.dedent(f"""
        import resource, signal, sys, numpy as np
        sys.path.insert(0, {ROOT!r})
        from hpcdl.train import checkpoint
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)     # Python ignores it; the kernel then kills
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        big = {{"model/0": np.ones((512, 512), np.float32)}}
        checkpoint.save({str(tmp_path)!r}, 20, big, keep=1)
        print("saved")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGXFSZ and "saved" not in proc.stdout
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == [first.name]
    temporaries = [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert temporaries and temporaries[0].stat().st_size == limit    # it really died mid-write
    path, header, _ = checkpoint.latest(tmp_path)
    assert header["step"] == 10
    # The next save succeeds, replaces the old one, and clears the dead saver's temporary.
    checkpoint.save(tmp_path, 30, _arrays(30), keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000030.hpcdl"]


def test_a_failed_save_removes_its_temporary_and_prunes_nothing(tmp_path, monkeypatch):
    checkpoint.save(tmp_path, 10, _arrays(10), keep=1)

    def refuse(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(checkpoint.os, "replace", refuse)
    with pytest.raises(OSError):
        checkpoint.save(tmp_path, 20, _arrays(20), keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000010.hpcdl"]
