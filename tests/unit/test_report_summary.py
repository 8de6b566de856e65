"""A report opens with its answer, read in its first 15 lines: the first axis's largest point
against its smallest, where the rest went, the forecast with its band as a table, the most useful
remedy; its figures are report.json's."""
import json
import os
import re
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


def _head(text: str, n: int = 15) -> str:
    """The first ``n`` lines a person reads (after the command that heads the file)."""
    return "\n".join(text.splitlines()[1:n + 1])


def test_a_box_report_opens_with_speedup_losses_forecast_and_remedy_in_15_lines(tmp_path):
    text = _render("box-fc-cnn-450mbit", tmp_path)
    doc = json.loads((tmp_path / "report.json").read_text())
    head = _head(text)
    assert "\n## " not in head                         # the answer comes before any section
    axis = doc["rows"][0]["axis"]
    top = max((r for r in doc["rows"] if r["axis"] == axis), key=lambda r: r["nodes"])
    assert f"**Answer** for `{axis}`" in head
    assert (f"- Measured: {top['nodes']} nodes ran {top['speedup']:.2f}× as fast as 1 node, "
            f"efficiency {top['efficiency']:.0%}") in head
    assert "of the 39% lost, exchange not hidden 27%" in head      # the budget's largest part
    assert "Forecast (MODEL, calibrated on ≤ 2 nodes; on this allocation" in head
    # the pooled band is checked to 4x the calibration; 16 and 64 nodes lie beyond: said
    assert "bands checked up to 8 nodes (4× the calibration)" in head
    assert "| at | efficiency | step | 90% band of the step |" in head
    forecast = next(f for f in doc["prediction"]["forecast"] if f["axis"] == axis)
    for r in forecast["here"]:
        assert f"| {r['nodes']} nodes | {r['efficiency']:.0%} | " in head
    remedies = [r for r in doc["prediction"]["remedies"] if r["axis"] == axis]
    best = max(remedies, key=lambda r: r["model_gain"])
    assert f"- Most useful remedy (MODEL): {best['remedy']}" in head
    # fp16 gains more than the allocation's best exchange, which has a line of its own
    assert ("- The allocation's best exchange (MODEL): the points ran the MPI library's "
            "allreduce; ring gives") in head
    # numbers carry units and no e-notation anywhere in the Markdown
    assert not re.search(r"\d\.\d+e[+-]\d", text)


def test_a_one_machine_report_speaks_of_ranks(tmp_path):
    text = _render("local-mnist-weak", tmp_path)
    assert "- Measured: 4 ranks ran 0.68× as fast as 1 rank, efficiency 17%" in _head(text)


def test_times_read_with_their_unit_and_three_digits():
    from hpcdl.analysis.units import seconds
    assert [seconds(x) for x in (0, 5.3e-4, 0.891, 1.0, 14.25, 1.425e4, None)] == [
        "0 s", "530 µs", "891 ms", "1.00 s", "14.2 s", "14250 s", "-"]


def test_a_points_step_over_its_physical_bound_is_the_compute_beside_a_line_rate_ring():
    """38.4 MB of gradients on 4 nodes at 500 Mbit/s: the ring's 2·3/4 of them at 62.5 MB/s is
    0.9216 s (the figure a ring cannot beat); beside 1.0 s of compute the step of 2.5 s is 2.5×
    the bound overlapped and 1.30× serial. No link rate, no bound."""
    from hpcdl.analysis.scaling import Row
    row = Row("horovod", "none", 4, 1, 4, 64, 256, 2, 1.0, 0.1, "img/s", 2.5,
              compute_s=1.0, gradient_bytes=38_400_000, network="500mbit")
    assert abs(row.ring_bound_s - 0.9216) < 1e-9
    over, serial = row.over_bound
    assert abs(over - 2.5) < 1e-9 and abs(serial - 2.5 / 1.9216) < 1e-9
    assert Row("horovod", "none", 4, 1, 4, 64, 256, 2, 1.0, 0.1, "img/s", 2.5,
               compute_s=1.0, gradient_bytes=38_400_000).over_bound is None


def test_a_forecast_above_the_measured_gives_its_reason_once():
    """Rows above the measured efficiency each carry their reason, which differ only in their
    shares' last digit: the opening table marks each row and says the largest count's reason
    once."""
    from hpcdl.report import summary
    rows = [{"nodes": p, "ranks": p, "efficiency": 0.75, "step_s": 4.0 + p / 100,
             "band_s": [3.6, 4.6], "above_measured": f"above the measured 73% (8 nodes): "
             f"exchange {p // 8 + 7}% of its step"} for p in (8, 16, 64)]
    lines = summary._forecast_rows({"here": rows, "networks": [], "calibrated_nodes": 2}, True)
    assert sum(" † |" in line for line in lines) == 3
    reasons = [line for line in lines if line.startswith("  † ")]
    assert reasons == ["  † above the measured 73% (8 nodes): exchange 15% of its step."]
