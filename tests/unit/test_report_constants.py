"""The report's sentences read the model's rules from the model (hpcdl.model.parts.BEYOND,
hpcdl.model.forecast.NETWORK_EFFECT): change a rule's number and
the wording follows, so that no sentence states a rule the model no longer applies."""
import os
from pathlib import Path

from hpcdl import report
from hpcdl.model import forecast, parts
from hpcdl_testing import ROOT

STUDY = "box-cnn-250mbit"         # held-out points, a forecast with networks left out


def _render(tmp_path) -> str:
    cwd = os.getcwd()
    os.chdir(ROOT)                # the study's files are named relative to the repository
    try:
        written = report.write_report(Path("results") / STUDY, out_dir=tmp_path, plots=False,
                                      **report.rendered_with(ROOT / "results" / STUDY))
    finally:
        os.chdir(cwd)
    return written["report"].read_text() + (tmp_path / "forecast.csv").read_text()


def test_the_rules_as_committed_read_as_before(tmp_path):
    text = _render(tmp_path)
    assert "beyond the calibration half the exchange hidden there is taken as hidden" in text
    assert "half the calibration's hidden exchange beyond it" in text        # the CSV's meta
    assert "stays under 1% of every step here" in text
    assert "SimGrid SMPI's prices for a fat tree" in text


def test_the_words_follow_the_rules_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(parts, "BEYOND", 0.25)
    monkeypatch.setattr(forecast, "NETWORK_EFFECT", 0.02)
    text = _render(tmp_path)
    assert "beyond the calibration 25% of the exchange hidden there is taken as hidden" in text
    assert "25% of the calibration's hidden exchange beyond it" in text
    assert "half the exchange hidden" not in text
    assert "stays under 2% of every step" in text and "under 1% of every step" not in text
