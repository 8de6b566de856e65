"""Results files: whole records under concurrent writers, and a torn line never costs a record."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest

from hpcdl import records
from hpcdl.records import TornRecordWarning

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _record(i, size=100):
    body = (f"{i}-" * size)[:size]
    return {"schema": records.SCHEMA, "i": i, "body": body,
            "sha": hashlib.sha256(body.encode()).hexdigest()}


def _intact(rec):
    return hashlib.sha256(rec["body"].encode()).hexdigest() == rec["sha"]


def test_append_writes_one_line_per_record_and_read_returns_them(tmp_path):
    path = tmp_path / "sub" / "runs.jsonl"
    for i in range(3):
        records.append(path, _record(i))
    data = path.read_bytes()
    assert data.endswith(b"\n") and data.count(b"\n") == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["i"] for r in records.read(path)] == [0, 1, 2]
    assert records.read(tmp_path / "absent.jsonl") == []


def test_concurrent_writers_leave_every_record_whole(tmp_path):
    """Six processes append 30 records each, up to 256 KiB long, at the same time."""
    path = tmp_path / "runs.jsonl"
    script = textwrap.dedent(f"""
        import hashlib, random, sys
        sys.path.insert(0, {ROOT!r})
        from hpcdl import records
        w = int(sys.argv[1])
        rnd = random.Random(w)
        for k in range(30):
            body = chr(65 + w) * rnd.randint(10, 256 * 1024)
            records.append({str(path)!r}, {{"w": w, "k": k, "body": body,
                                            "sha": hashlib.sha256(body.encode()).hexdigest()}})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(w)]) for w in range(6)]
    try:
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [0] * 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # a torn or interleaved line fails here
        recs = records.read(path)
    assert len(recs) == 180
    assert all(_intact(r) for r in recs)
    assert sorted((r["w"], r["k"]) for r in recs) == [(w, k) for w in range(6) for k in range(30)]
    assert path.read_bytes().count(b"\n") == 180


def _append_until_killed(path, limit, rec):
    """Append ``rec`` in a real process that the kernel kills mid-write at file size ``limit``."""
    script = textwrap.dedent(f"""
        import json, resource, signal, sys
        sys.path.insert(0, {ROOT!r})
        from hpcdl import records
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)     # Python ignores it; the kernel then kills
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        records.append({str(path)!r}, json.loads(sys.stdin.read()))
        print("appended")
    """)
    return subprocess.run([sys.executable, "-c", script], input=json.dumps(rec), capture_output=True,
                          text=True, timeout=60)


def test_a_writer_killed_mid_write_loses_no_earlier_record_and_later_appends_work(tmp_path):
    path = tmp_path / "runs.jsonl"
    for i in range(3):
        records.append(path, _record(i))
    before = path.read_bytes()
    proc = _append_until_killed(path, len(before) + 1000, _record(3, size=50_000))
    assert proc.returncode == -signal.SIGXFSZ and "appended" not in proc.stdout
    torn = path.read_bytes()
    assert torn.startswith(before) and len(torn) == len(before) + 1000 and not torn.endswith(b"\n")

    with pytest.warns(TornRecordWarning, match=r"runs.jsonl:4: skipping a torn"):
        assert [r["i"] for r in records.read(path)] == [0, 1, 2]
    assert path.read_bytes() == torn                 # readers never rewrite the file

    records.append(path, _record(4))
    records.append(path, _record(5))
    with pytest.warns(TornRecordWarning) as caught:
        recs = records.read(path)
    assert [r["i"] for r in recs] == [0, 1, 2, 4, 5] and all(_intact(r) for r in recs)
    assert len(caught) == 1                          # the fragment stays one bad line


def test_a_whole_last_record_without_its_newline_is_kept_and_the_next_starts_a_new_line(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(_record(0)))          # e.g. written by hand or another tool
    records.append(path, _record(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["i"] for r in records.read(path)] == [0, 1]


def test_corrupt_lines_anywhere_are_reported_with_their_line_number_and_skipped(tmp_path):
    path = tmp_path / "runs.jsonl"
    records.append(path, _record(0))
    with open(path, "ab") as fh:
        fh.write(b'{"schema": "hpcdl.run/1", "i": \n[1, 2]\n\xff\xfe\n')
    records.append(path, _record(1))
    with pytest.warns(TornRecordWarning) as caught:
        assert [r["i"] for r in records.read(path)] == [0, 1]
    assert [str(w.message).split(": ")[0].rsplit(":", 1)[1] for w in caught] == ["2", "3", "4"]
    assert records.read(path, warn=False) == records.read(path, warn=False)


def _built(**kw):
    base = dict(source="train", params={"workload": "w"}, layout={"size": 1},
                metrics={"throughput": {"mean": 1.0}}, manifest={})
    return records.build(**{**base, **kw})


def test_the_builder_keeps_every_metric_it_is_given():
    rec = _built(metrics={"throughput": {"mean": 2.0}, "peak_memory_bytes": 123},
                 point='{"id": "p1"}', declared=None)
    assert rec["metrics"]["peak_memory_bytes"] == 123
    assert rec["point"] == {"id": "p1"} and rec["schema"] == records.SCHEMA


def test_the_builder_refuses_what_it_cannot_record_loudly():
    import pytest
    with pytest.raises(ValueError, match="unknown record section"):
        _built(energy={"joules": 1})
    with pytest.raises(ValueError, match="metric 'bad' cannot be recorded"):
        _built(metrics={"throughput": {"mean": 1.0}, "bad": object().__class__})
    with pytest.raises(ValueError, match="'throughput' has no mean"):
        _built(metrics={"throughput": {"std": 1.0}})


def test_a_process_start_is_known_to_a_few_hundredths_of_a_second():
    """Two runs one after the other are not reported as overlapping: the start a record keeps
    lies between the moments before and after its process was started (it was up to a second
    early, from /proc/stat's whole-second boot time)."""
    import datetime
    import subprocess
    import sys
    import time
    before = time.time()
    out = subprocess.run([sys.executable, "-c",
                          "from hpcdl import records; print(records.process_started())"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.strip()
    after = time.time()
    started = datetime.datetime.fromisoformat(out).timestamp()
    assert before - 0.02 <= started <= after, (before, started, after)
