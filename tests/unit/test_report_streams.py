"""The report reads each record once and keeps only what the analysis needs: its memory grows by
a few hundred bytes a record, not by the record; a large file is read by several processes with
the same result; the fast line reader keeps every field the analysis reads."""
import datetime
import gc
import json
import tracemalloc
from pathlib import Path

import pytest

from hpcdl import analysis, checks, records, report
from hpcdl.model import parts, predict
from hpcdl.analysis.reading import Digest
from hpcdl_testing import ROOT

BOX = ROOT / "results" / "box-cnn-weak" / "runs.jsonl"
RING = ROOT / "results" / "box-cnn-ring-weak" / "runs.jsonl"


def _copies(src: Path, n: int):
    """``n`` records from a committed study's, copied as further repeats (as the scale benchmark
    makes them): new repeat numbers and point ids, nothing else changed."""
    recs = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    out = []
    for k in range(-(-n // len(recs))):
        for rec in recs:
            rec = json.loads(json.dumps(rec))
            rec["point"]["repeat"] += 10 * k
            rec["point"]["id"] += f"-copy{k}"
            out.append(rec)
    return out[:n]


def _kept_bytes(recs) -> float:
    gc.collect()
    tracemalloc.start()
    d = Digest()
    for rec in recs:
        d.add(rec)
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return held


def test_what_the_analysis_keeps_grows_by_a_small_part_of_each_record():
    few, many = _copies(BOX, 144), _copies(BOX, 1440)
    per_record = (_kept_bytes(many) - _kept_bytes(few)) / (len(many) - len(few))
    parsed = 37_000          # a box record parsed whole holds about this many bytes
    assert per_record < 1500, f"{per_record:.0f} bytes kept per record"
    assert per_record < parsed / 20


def _file(tmp_path: Path, again: int = 3) -> Path:
    """A results file of a box study with what a report must leave out and say: torn lines, a
    record repeated at the end of the file (its record ``again`` once more; -1, the last), a
    record with no throughput. The committed study's N records become lines 1-30, a torn line
    31, lines 32 to N + 1, the repeat at N + 2, the bad record at N + 3 and a torn N + 4."""
    lines = [line for line in BOX.read_text().splitlines() if line.strip()]
    bad = json.loads(lines[5])
    bad["metrics"]["throughput"]["mean"] = -1
    bad["point"]["id"] += "-bad"
    body = lines[:30] + ['{"torn": '] + lines[30:] + [lines[again], json.dumps(bad),
                                                     lines[len(lines) // 2][:40]]
    runs = tmp_path / "box" / "runs.jsonl"
    runs.parent.mkdir()
    runs.write_text("\n".join(body) + "\n")
    return runs


@pytest.mark.parametrize("workers, again", [(2, 3), (3, 3), (2, -1), (3, -1)])
def test_several_readers_make_the_report_one_reader_makes(tmp_path, workers, again):
    # the repeated record's first copy lies in the first part (line 4), or in the last (the
    # study's last record)
    n = len([line for line in BOX.read_text().splitlines() if line.strip()])
    runs = _file(tmp_path, again)
    one = report.write_report(runs.parent, out_dir=tmp_path / "one", plots=False,
                             how=report.Reading(workers=1))
    more = report.write_report(runs.parent, out_dir=tmp_path / "more", plots=False,
                               how=report.Reading(workers=workers))
    names = sorted(p.name for p in one["files"])
    assert names == sorted(p.name for p in more["files"])
    for name in names:
        a, b = (tmp_path / "one" / name).read_text(), (tmp_path / "more" / name).read_text()
        assert a == b.replace(str(tmp_path / "more"), str(tmp_path / "one")), name
    left = json.loads((tmp_path / "more" / "report.json").read_text())["left_out"]
    assert left["torn_lines"] == [31, n + 4] and left["duplicate_lines"] == [n + 2]
    assert len(more["files"]) == len(one["files"])
    assert len(left["excluded"]) == 1
    assert f":{n + 3}: metrics.throughput.mean" in left["excluded"][0]


def test_a_part_of_the_file_starts_at_a_line_and_the_parts_cover_it(tmp_path):
    runs = _file(tmp_path)
    data = runs.read_bytes()
    for n in (1, 2, 3, 7):
        cuts = checks.parts(runs, n)
        assert len(cuts) == n and cuts[0][0] == 0 and cuts[-1][1] == len(data)
        assert all(end == start for (_, end), (start, _) in zip(cuts, cuts[1:]))
        assert all(data[a - 1:a] == b"\n" for a, _ in cuts[1:])


def test_the_fast_reader_keeps_every_field_the_analysis_reads():
    pytest.importorskip("msgspec")
    # the pinned ring's records name their allreduce in the environment, the box's link rate and
    # the study's calibration elsewhere: each changes the analysis if a reader drops it
    for path in (RING, BOX):
        recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        slim = records.slim_decoder()
        fast = [slim(line.encode()) for line in path.read_text().splitlines() if line.strip()]
        assert sum(map(len, map(json.dumps, fast))) < sum(map(len, map(json.dumps, recs)))
        whole, kept = (json.dumps(analysis.analyse(r, "s").as_dict(), sort_keys=True, default=str)
                       for r in (recs, fast))
        assert whole == kept


def test_a_record_the_fast_reader_cannot_shape_is_read_whole():
    slim = records.slim_decoder()
    rec = {"kind": "train", "manifest": "not an object", "metrics": {"throughput": {"mean": 1}}}
    assert slim(json.dumps(rec).encode()) == rec
    nan = slim(b'{"kind": "train", "metrics": {"throughput": {"mean": NaN}}}')
    assert nan["kind"] == "train" and nan["metrics"]["throughput"]["mean"] != 0


def test_repeats_beyond_ten_are_left_out_ten_folds_at_a_time():
    assert parts.folds(range(4)) == {0: 0, 1: 1, 2: 2, 3: 3}
    many = parts.folds(range(25))
    assert sorted(set(many.values())) == list(range(parts.FOLDS))
    assert max(list(many.values()).count(f) for f in range(parts.FOLDS)) == 3


def test_a_study_of_many_repeats_is_reported_with_a_band_from_every_calibration_run(tmp_path):
    study = [json.loads(line) for line in BOX.read_text().splitlines() if line.strip()]
    repeats = len({r["point"]["repeat"] for r in study})
    recs = _copies(BOX, len(study) * 8)          # eight copies of every repeat of every point
    runs = tmp_path / "many" / "runs.jsonl"
    runs.parent.mkdir()
    for rec in recs:
        # each copy ran a day after the one before: no two overlap
        k = rec["point"]["repeat"] // 10
        for where, key in ((rec, "time"), (rec["manifest"], "started")):
            t = datetime.datetime.fromisoformat(where[key]) + datetime.timedelta(days=k)
            where[key] = t.isoformat()
    runs.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = analysis.analyse(records.iter_records(runs), "many")
    cal = [r for r in res.rows if r.nodes <= 2 and r.ranks > 1]
    assert res.prediction["band_residuals"] == sum(r.runs for r in cal)
    assert all(r.runs == 8 * repeats for r in res.rows) and 8 * repeats > parts.FOLDS



def test_an_absent_results_file_has_no_lines(tmp_path):
    read = checks.scan(tmp_path / "absent.jsonl", checks.train_record_problem)
    assert (read.records, read.torn, read.duplicates, read.excluded) == ([], [], [], [])
