"""Every committed report is what the current code makes of its records.

results/<study>/ holds the records a study made and the report rendered from them. Rendering the
records again with the current code, as ``hpcdl study report`` does, must give the same
report.md, report.json and CSV tables byte for byte: a refactor that changes a figure, a table
or a sentence shows here, and so does a report left stale after the report code changed.
"""
import os
from pathlib import Path

import pytest

from hpcdl import report
from hpcdl_testing import ROOT

STUDIES = sorted(p.parent.name for p in (ROOT / "results").glob("*/report.md"))


def test_there_are_committed_reports_to_check():
    assert len(STUDIES) >= 10, STUDIES


@pytest.mark.parametrize("study", STUDIES)
def test_a_committed_report_renders_again_identically_from_its_records(study, tmp_path):
    folder = ROOT / "results" / study
    cwd = os.getcwd()
    os.chdir(ROOT)                # the report names its folder relative to where it runs
    try:
        # a report that pooled mixed records says so in its command (--allow-mixed), one whose
        # held-out exchange came from tuning files names them (--exchange-bench 'PATTERN'), and
        # one whose compute followed a loop file names it (--loop-bench PATH), and one whose
        # slowest rank was drawn from a spread file names that (--spread-bench PATH)
        head = (folder / "report.md").read_text().splitlines()[0]
        bench = head.split("--exchange-bench '", 1)[1].split("'", 1)[0] \
            if "--exchange-bench '" in head else None

        def flag(name):
            return head.split(f"{name} ", 1)[1].split()[0] if f"{name} " in head else None
        written = report.write_report(Path("results") / study, out_dir=tmp_path,
                                      allow_mixed="--allow-mixed" in head, exchange_bench=bench,
                                      loop_bench=flag("--loop-bench"),
                                      spread_bench=flag("--spread-bench"))
    finally:
        os.chdir(cwd)
    made = {p.name for p in written["files"]}
    kept = {p.name for p in folder.iterdir() if p.name != "runs.jsonl"}
    assert made == kept, f"files differ: made only {made - kept}, committed only {kept - made}"
    for name in sorted(n for n in made if not n.endswith(".png")):     # plots: by name only
        again, committed = (tmp_path / name).read_text(), (folder / name).read_text()
        assert again == committed, f"{study}/{name} differs from what its records give now"
