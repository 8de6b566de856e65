"""The files a study names beside its records are checked where they are read, by one rule
(hpcdl.checks.input_problem): a file whose figures are out of range, or an exchange file made
at other links than the point's, is left out, and the report says so in its first lines."""
import json
import math
import shutil

import pytest

from hpcdl import checks, report
from hpcdl_testing import ROOT

STUDY = ROOT / "results" / "box-fc-cnn-175mbit"


def _copy_study(tmp_path, edits):
    """box-fc-cnn-175mbit's records, declaring allocation files copied into ``tmp_path`` (each
    passed through ``edits[name]`` where given)."""
    alloc = tmp_path / "alloc"
    shutil.copytree(STUDY / "allocation", alloc)
    for name, edit in edits.items():
        doc = json.loads((alloc / name).read_text())
        edit(doc)
        (alloc / name).write_text(json.dumps(doc))
    out = tmp_path / "study"
    out.mkdir()
    text = (STUDY / "runs.jsonl").read_text().replace(
        "results/box-fc-cnn-175mbit/allocation/", f"{alloc}/")
    (out / "runs.jsonl").write_text(text)
    return out


def _other_links(doc):
    doc["made_for"]["machine"]["link_rate"] = "450mbit"


def _nan_spread(doc):
    doc["spread"]["8"][0][0] = float("nan")


def test_an_exchange_file_of_other_links_and_a_spread_with_nan_are_left_out_and_said_first(tmp_path):
    folder = _copy_study(tmp_path, {"exchange-8n-175mbit.json": _other_links,
                                    "spread.json": _nan_spread})
    written = report.write_report(folder, plots=False)
    doc = json.loads(written["json"].read_text())
    ex, sp = doc["prediction"]["exchange_bench"], doc["prediction"]["spread_bench"]
    assert ex["rejected"] == [f"{tmp_path}/alloc/exchange-8n-175mbit.json: made at links of "
                              "450mbit, the records' are 175mbit"]
    assert sp["rejected"] == [f"{tmp_path}/alloc/spread.json: spread.8.0.0 = nan is not a "
                              "node's compute over the center (> 0, < 100)"]
    points = {p["nodes"]: p for p in doc["prediction"]["axes"][0]["points"]}
    assert points[8]["exchange_measured_here"] is None           # left out
    assert points[7]["exchange_measured_here"] is not None      # the good file still read
    head = written["report"].read_text().splitlines()[:6]
    said = next(ln for ln in head if ln.startswith("**Input files left out**"))
    assert "exchange-8n-175mbit.json: made at links of 450mbit" in said
    assert "spread.8.0.0 = nan" in said


def test_the_committed_allocation_files_hold():
    for path in sorted((ROOT / "results").glob("*/allocation/*.json")):
        doc = json.loads(path.read_text())
        assert checks.input_problem(doc, doc.get("schema", "hpcdl.tuning/1")) is None, path


@pytest.mark.parametrize("schema, doc, why", [
    ("hpcdl.loop-cpu/1", {"shares": {"1": {"4": {"median": 1.0}}}}, "shares.1.4.median = 1.0"),
    ("hpcdl.host-spread/1", {"crowd": {"2": [0.0]}}, "crowd.2.0 = 0.0"),
    ("hpcdl.host-spread/1", {"center": {"2": [math.inf]}}, "center.2.0 = inf"),
    ("hpcdl.tuning/1", {"bytes": 0}, "bytes = 0"),
    ("hpcdl.tuning/1", {"picks": {"none": {"default_s": "1"}}}, "picks.none.default_s = '1'"),
    ("hpcdl.fit/1", {"backends": {"ring": {"regimes": [{"alpha_s": -1e-6}]}}},
     "backends.ring.regimes.0.alpha_s = -1e-06"),
])
def test_each_file_kind_has_its_ranges(schema, doc, why):
    assert checks.input_problem(doc, schema).startswith(why)


@pytest.mark.parametrize("share, bad", [(0.0, False), (1.0, False), (1.0001, True), (-0.01, True)])
def test_a_window_of_all_the_pass_is_a_share(share, bad):
    # the allocation's bench writes the window clamped to [0, 1]: steps that hid the whole pass
    # read 1.0, and a file holding one is taken (a loop share of 1.0 is not: the loop would
    # take the whole CPU)
    doc = {"window": {"1": {"3": {"share": share}}}}
    assert (checks.input_problem(doc, "hpcdl.loop-cpu/1") is not None) == bad
