"""Every committed report is what the current code makes of its records.

results/<study>/ holds the records a study made and the report rendered from them. Rendering the
records again with the current code, as ``hpcdl study report`` does, must give the same data:
report.json and the CSV tables byte for byte, and the same files. A refactor that changes a
figure or a table shows here, and so does a report left stale after the analysis changed. The
Markdown's wording is not compared here: focused tests of each section check it, so that a
change of words does not mean rendering every committed study again to pass.
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
        # a report is rendered with the options its own first line names: --allow-mixed where
        # it pooled mixed records, the tuning, loop and spread files it drew from
        written = report.write_report(Path("results") / study, out_dir=tmp_path,
                                      **report.rendered_with(folder))
    finally:
        os.chdir(cwd)
    made = {p.name for p in written["files"]}
    kept = {p.name for p in folder.iterdir() if p.is_file() and p.name != "runs.jsonl"}
    assert made == kept, f"files differ: made only {made - kept}, committed only {kept - made}"
    for name in sorted(n for n in made if n.endswith((".json", ".csv"))):   # the data
        again, committed = (tmp_path / name).read_text(), (folder / name).read_text()
        assert again == committed, f"{study}/{name} differs from what its records give now"
    # the Markdown: its opening line names the command that makes it, as the data files' do
    md_again = (tmp_path / "report.md").read_text().splitlines()[0]
    assert md_again == (folder / "report.md").read_text().splitlines()[0]
