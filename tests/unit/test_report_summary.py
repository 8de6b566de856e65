"""A report opens with its answer: each axis's largest point against its smallest, where the rest
went, and the forecast with its band, before any table; the method follows, folded."""
import os
from pathlib import Path

from hpcdl import report
from hpcdl_testing import ROOT


def _render(study: str, tmp_path) -> str:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        folder = Path("results") / study
        written = report.write_report(folder, out_dir=tmp_path, **report.rendered_with(ROOT / folder))
    finally:
        os.chdir(cwd)
    return Path(written["report"]).read_text()


def test_a_box_report_opens_with_speedup_losses_and_the_forecast_before_any_table(tmp_path):
    text = _render("box-fc-cnn-450mbit", tmp_path)
    head = text.split("\n## ", 1)[0]                      # everything before the first section
    short = head.split("**In short**", 1)[1].split("<details>", 1)[0]
    line = next(ln for ln in short.splitlines() if ln.startswith("- `horovod/none@450mbit`"))
    assert "8 nodes ran 4.82× as fast as 1 node, efficiency 60%" in line
    assert "of the 39% lost, exchange not hidden 27%" in line      # the budget's largest part
    assert "Forecast (MODEL, calibrated on ≤ 2 nodes)" in line and "16 nodes" in line
    assert "90% band" in line
    # the method comes after the answer, folded
    assert head.index("**In short**") < head.index("<details><summary>How these figures are made")
    assert "Throughput is the total over all ranks" in head.split("<details>", 1)[1]


def test_a_one_machine_report_speaks_of_ranks(tmp_path):
    text = _render("local-mnist-weak", tmp_path)
    assert "- `horovod/none lr:linear`: 4 ranks ran 0.68× as fast as 1 rank, efficiency 17%" in text
