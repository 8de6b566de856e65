"""The band from other studies' held-out errors (hpcdl.model.bands): conformal over the same kind
of machine, never the study's own points, wide only as far as the checks reach, never 0 s at its
lower edge; its leave-one-study-out coverage near nominal; the report finds the results root's
file, names it in its head and renders again from it."""
import json
import math
import random

import pytest

from hpcdl import analysis, records as _records, report
from hpcdl.model import bands
from hpcdl import cli

from test_predict import study


def _point(nodes, p_cal, measured, low, high):
    return {"axis": "a", "nodes": nodes, "p_cal": p_cal, "measured_s": measured,
            "predicted_s": (low + high) / 2, "low_s": low, "high_s": high}


def _file(tmp_path, studies):
    path = tmp_path / "forecast-residuals.json"
    path.write_text(json.dumps({"schema": bands.SCHEMA, "studies": studies}))
    return str(path)


def _studies(n, rng, kind="box", sigma=0.08, points=((4, 2), (8, 2))):
    """``n`` studies whose measured step lies off its predicted range by a log-normal error."""
    out = []
    for i in range(n):
        pts = []
        for nodes, p_cal in points:
            low, high = 1.0, 1.05
            pts.append(_point(nodes, p_cal, high * math.exp(rng.gauss(0, sigma)), low, high))
        out.append({"study": f"s{i}", "kind": kind, "points": pts})
    return out


def test_the_band_pools_other_studies_of_the_same_kind_never_its_own(tmp_path):
    rng = random.Random(4)
    studies = _studies(10, rng) + _studies(10, rng, kind="cpu other", sigma=1.0)
    # the study itself, far off: left out of its own band
    studies.append({"study": "me", "kind": "box", "points": [_point(8, 2, 9.0, 1.0, 1.05)] * 9})
    path = _file(tmp_path, studies)
    mine = bands.Pooled(path, "box", "me")
    assert mine.usable and len(mine.residuals) == 20 and "me" not in mine.studies
    assert mine.q(1.0) < 0.3                    # none of the other kind's errors of e^±1
    with_me = bands.Pooled(path, "box", "someone else")
    assert with_me.q(1.0) > mine.q(1.0)


def test_the_band_is_a_ratio_never_0_s_and_flat_beyond_the_farthest_checks(tmp_path):
    rng = random.Random(5)
    # errors grow with the distance: 4% at 2x the calibration, 20% at 4x
    near = _studies(12, rng, sigma=0.04, points=((4, 2),))
    far = _studies(12, rng, sigma=0.20, points=((8, 2),))
    for i, s in enumerate(far):
        s["study"] = f"f{i}"
    pooled = bands.Pooled(_file(tmp_path, near + far), "box", "x")
    assert pooled.checked_to == 2.0
    q1, q2, q6 = pooled.q(1.0), pooled.q(2.0), pooled.q(6.0)
    assert q1 < q2 and q6 == q2                 # wider as far as checked, then as there
    band = bands.Band(None, "", pooled)
    lo, hi = band.edges(1.0, 1.0, 128, 2)
    assert lo == pytest.approx(math.exp(-q2)) and hi == pytest.approx(math.exp(q2)) and lo > 0
    # the study's own band, however wide, keeps its lower edge above 0 s too
    own = bands.Band(3.0, "normal from 2 out-of-sample residual(s)")
    assert own.edges(1.0, 1.2, 64, 2)[0] > 0


def test_too_few_residuals_fall_back_to_the_studys_own_band_saying_why(tmp_path):
    path = _file(tmp_path, _studies(2, random.Random(6)))
    band = bands.Band(0.1, "normal from 2 out-of-sample residual(s)",
                      bands.Pooled(path, "box", "x"))
    assert band.pooled is None and band.halfwidth == 0.1
    assert "4 held-out residual(s)" in band.basis and "under the 9" in band.basis
    missing = bands.Band(0.1, "own", bands.Pooled(str(tmp_path / "none.json"), "box", "x"))
    assert "no such file" in missing.basis


def test_leave_one_study_out_coverage_is_near_nominal(tmp_path):
    """Studies whose errors come from one distribution: each study's band drawn from the others
    holds about 90% of its points (split-conformal's guarantee, counted)."""
    rng = random.Random(7)
    studies = _studies(40, rng, sigma=0.1, points=((4, 2), (6, 2), (8, 2)))
    path = _file(tmp_path, studies)
    inside = total = 0
    for s in studies:
        band = bands.Band(None, "", bands.Pooled(path, "box", s["study"]))
        for p in s["points"]:
            lo, hi = band.edges(p["low_s"], p["high_s"], p["nodes"], p["p_cal"])
            inside += lo <= p["measured_s"] <= hi
            total += 1
    assert 0.82 <= inside / total <= 0.98, inside / total


def _records_in(folder, name):
    folder.mkdir(parents=True)
    for r in study():
        r["declared"] = {**r["declared"], "model": {"nodes_max": 2}}
        r["study"] = name
        r["box"] = {**r["box"], "nodes_in_box": 8}
        _records.append(folder / "runs.jsonl", r)


def test_the_report_reads_the_results_roots_file_and_residuals_pools_reports(tmp_path, capsys):
    root = tmp_path / "results"
    for name in ("a", "b"):
        _records_in(root / name, name)
        report.write_report(root / name, plots=False)
    # 'hpcdl study residuals' pools the two reports' held-out points
    out = root / "forecast-residuals.json"
    assert cli.main(["study", "residuals", str(root / "a"), str(root / "b"), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == bands.SCHEMA and len(doc["studies"]) == 2
    kinds = {s["kind"] for s in doc["studies"]}
    res = analysis.analyse(_records.read(root / "a" / "runs.jsonl"), "a")
    assert len(kinds) == 1
    # too few points for a pooled band: the report keeps its own and says why, naming the file
    written = report.write_report(root / "a", plots=False)
    head = written["report"].read_text().splitlines()[0]
    assert f"--residuals {out}" in head
    assert report.rendered_with(root / "a")["given"].residuals
    js = json.loads(written["json"].read_text())["prediction"]
    assert js["band_drawn"]["source"] == "own" and "under the 9" in js["band_basis"]
    assert res.prediction["band_drawn"]["source"] == "own"
    # with enough other studies of its kind, the band is theirs; a render from the report's
    # own head gives the same
    doc["studies"] += _studies(10, random.Random(8), kind=kinds.pop())
    out.write_text(json.dumps(doc))
    written = report.write_report(root / "a", plots=False)
    js = json.loads(written["json"].read_text())["prediction"]
    assert js["band_drawn"]["source"] == "pooled" and js["band_drawn"]["studies"] == 11
    assert js["band_basis"].startswith("conformal over 22 held-out residuals of 11 other")
    again = report.write_report(root / "a", out_dir=tmp_path / "again", plots=False,
                                **report.rendered_with(root / "a"))
    assert json.loads(again["json"].read_text())["prediction"] == js
    # 'none' keeps the study's own band without a word of the file
    written = report.write_report(root / "a", plots=False, given=report.Inputs(residuals="none"))
    assert "--residuals none" in written["report"].read_text().splitlines()[0]
    assert "pooled" not in json.loads(written["json"].read_text())["prediction"]["band_basis"]
