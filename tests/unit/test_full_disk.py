"""A full filesystem loses no record: an append writes the whole line or nothing, the fallback
file's advice works as printed, and files written whole leave no temporary file behind.

Each test mounts a small tmpfs of its own (root only) and fills it."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from hpcdl import records
from hpcdl_testing import ROOT, one_process_env

FIRST = (ROOT / "results" / "local-expmlp-strong" / "runs.jsonl").read_text().splitlines()[0] + "\n"


@pytest.fixture
def disk(tmp_path):
    """A 256 KiB tmpfs at tmp_path/disk, unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    d = tmp_path / "disk"
    d.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(d)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _fill(d: Path) -> Path:
    """Fill the filesystem: every block taken by a filler file (returned, to free it later)."""
    filler = d / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_leaves_no_fragment_and_the_printed_recovery_counts_the_record(disk, tmp_path):
    """(TF) The results file's last block has room for part of a record, the disk none: the
    run exits 3 and leaves the file as it was; once space is freed, the printed `cat` puts the
    record in, and a report reads both records, none torn."""
    runs = disk / "runs.jsonl"
    runs.write_text(FIRST)                  # one record; its last block partly free
    before = runs.read_bytes()
    filler = _fill(disk)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "hpcdl", "train", "--workload", "expmlp",
                           "--steps", "20", "--results", str(runs)], capture_output=True,
                          text=True, cwd=work, env=one_process_env(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3"),
                          timeout=300)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert runs.read_bytes() == before, "the failed append left a fragment"
    advice = proc.stderr.split("append it there with '", 1)[1].split("'", 1)[0]
    assert advice.startswith("cat ") and f">> {runs}" in advice, proc.stderr
    filler.unlink()
    subprocess.run(["bash", "-c", advice], check=True, cwd=work, timeout=30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # a torn line would warn
        got = records.read(runs)
    assert len(got) == 2 and got[1]["params"]["workload"] == "expmlp"


def test_the_printed_recovery_works_after_a_torn_tail_too(tmp_path, monkeypatch):
    """A results file whose last line a killed writer left without its newline: the kept record
    (its file starts each line on a fresh one) is still whole after the printed `cat`."""
    runs = tmp_path / "runs.jsonl"
    runs.write_text(FIRST + '{"declared"')          # a torn tail
    monkeypatch.chdir(tmp_path)
    kept = records.append(tmp_path / "hpcdl-record-1.jsonl", json.loads(FIRST), lead=True)
    subprocess.run(["bash", "-c", f"cat {kept} >> {runs}"], check=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = records.read(runs)
    assert len(got) == 2 and len(seen) == 1        # the torn fragment alone is left out


def test_a_file_written_whole_on_a_full_disk_keeps_the_old_one_and_no_tmp(disk):
    path = disk / "spread.json"
    path.write_text('{"old": 1}\n')
    filler = _fill(disk)
    with pytest.raises(OSError):
        records.write_atomic(path, json.dumps({"new": "x" * 100_000}))
    assert path.read_text() == '{"old": 1}\n'
    assert sorted(p.name for p in disk.iterdir()) == ["filler", "spread.json"]
    filler.unlink()


def test_an_allocation_file_that_cannot_be_written_is_one_line_and_leaves_no_tmp(disk):
    """`hpcdl bench allocation` on a full disk: a user error naming the file (it printed a
    traceback's tail through `study run`), the former file whole, no temporary file."""
    from hpcdl.bench import allocation
    from hpcdl.errors import UserError
    path = disk / "spread.json"
    path.write_text('{"old": 1}\n')
    filler = _fill(disk)
    with pytest.raises(UserError, match="spread.json: cannot be written .*as it was before"):
        allocation._write(path, {"schema": "x", "pad": "x" * 100_000})
    assert path.read_text() == '{"old": 1}\n'
    assert sorted(p.name for p in disk.iterdir()) == ["filler", "spread.json"]
    filler.unlink()
