"""benchmarks/heldout_check.py pairs a held-out point that two studies ran in the same
configuration, and only then: the sessions' own difference is what no prediction can follow;
and it measures how far that difference moves each predictor's error."""
import json
import math
from statistics import mean, stdev

import pytest

from benchmarks import heldout_check


def _study(folder, steps, env=None, batch=128, floor=None):
    """A study folder: report.json with one Horovod axis calibrated at 2 nodes and predicted at 4
    (measured steps ``steps`` at 2 and 4 nodes, predicted 1.0 and 1.2; the baselines 1.1 and
    0.9 at 4 nodes; the report's floor ``floor``), and runs.jsonl."""
    folder.mkdir()
    axis = "horovod/none@200mbit"
    points = [{"nodes": n, "fitted": n == 2, "measured": {"step": s},
               "predicted": {"step": p},
               "error": {"step": p / s - 1, "compute": s / 10, "exchange": -s / 10},
               "one_parameter_error": 1.1 / s - 1, "naive_error": 0.9 / s - 1}
              for n, s, p in ((2, steps[0], 1.0), (4, steps[1], 1.2))]
    prediction = {"axes": [{"axis": axis, "backend": "horovod", "points": points}]}
    if floor is not None:
        prediction["floor"] = {"floor": floor}
    (folder / "report.json").write_text(json.dumps({"prediction": prediction}))
    recs = [{"schema": "hpcdl.run/1", "kind": "train", "status": "ok",
             "params": {"workload": "cnn", "batch_size": batch, "backend": "horovod",
                        "compression": "none"},
             "box": {"link_rate": "200mbit", "cpus_per_node": 0.2, "nodes": ["n"] * n},
             "manifest": {"env": {"HOROVOD_FUSION_THRESHOLD": "67108864", **(env or {}),
                                  "HPCDL_STOP_FILE": str(folder)}},
             "metrics": {}} for n in (2, 4)]
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return folder


def test_the_same_configuration_in_two_studies_is_paired_with_each_sessions_ratio(tmp_path):
    a = _study(tmp_path / "a", (1.0, 1.1))
    b = _study(tmp_path / "b", (2.0, 2.6))
    ((first, second),) = heldout_check.same_configuration(heldout_check.by_configuration([a, b]))
    assert first[:3] == ("a", "horovod/none@200mbit", 4) and second[0] == "b"
    assert abs(first[3] - 1.1) < 1e-12 and abs(second[3] - 1.3) < 1e-12   # measured s4/s2
    assert abs(first[4] - 1.2) < 1e-12 and abs(second[4] - 1.2) < 1e-12   # predicted s4/s2


def test_another_batch_or_another_horovod_setting_is_not_the_same_configuration(tmp_path):
    a = _study(tmp_path / "a", (1.0, 1.1))
    other_batch = _study(tmp_path / "b", (2.0, 2.6), batch=64)
    pinned = _study(tmp_path / "c", (2.0, 2.6),
                    env={"OMPI_MCA_coll_tuned_allreduce_algorithm": "4"})
    assert heldout_check.same_configuration(
        heldout_check.by_configuration([a, other_batch, pinned])) == []


def test_how_far_a_configuration_and_each_predictors_error_move_between_sessions(tmp_path):
    """Three sessions of one configuration: the measured 4-over-2-node ratio and each predictor's
    error are spread as their standard deviation over the sessions (the configuration's own mean
    taken out); the repeats' part is the sd behind the reports' floors."""
    steps = ((1.0, 1.1), (2.0, 2.6), (1.0, 1.2))
    studies = [_study(tmp_path / name, st, floor=f)
               for name, st, f in zip("abc", steps, (0.02, 0.04, None))]
    lone = _study(tmp_path / "d", (1.0, 1.5), batch=64, floor=0.5)   # run once: not counted
    res = heldout_check.session_residuals(
        heldout_check.by_configuration(studies + [lone]))
    assert (res["configurations"], res["points"], res["dof"], res["study_points"]) == (1, 3, 2, 1)
    ratios = [s4 / s2 for s2, s4 in steps]
    assert math.isclose(res["measured"], stdev(r / mean(ratios) for r in ratios))
    for name, at4 in (("the model", 1.2), ("one beta", 1.1), ("naive", 0.9)):
        errors = [at4 / s4 - 1 for _, s4 in steps]
        assert math.isclose(res["predictors"][name]["moves"], stdev(errors)), name
        assert math.isclose(res["predictors"][name]["mae"], mean(abs(e) for e in errors)), name
    spread = stdev(s4 / 10 for _, s4 in steps)
    assert res["parts"] == pytest.approx({"compute": spread, "exchange": spread})
    sd_behind = [f / math.sqrt(2 / math.pi) for f in (0.02, 0.04)]
    assert math.isclose(res["repeats"], math.sqrt(mean(x * x for x in sd_behind)))
    assert heldout_check.session_residuals(
        heldout_check.by_configuration(studies[:1] + [lone])) == {}


def test_what_an_error_that_moves_between_sessions_allows_a_predictor_without_bias():
    a = heldout_check.attainable(0.05, 0.10, 12, 0.04)
    assert math.isclose(a["within"], 0.954499736, rel_tol=1e-8)       # within two sd
    assert math.isclose(a["all_within"], 0.954499736 ** 12, rel_tol=1e-7)
    assert math.isclose(a["mae"], 0.05 * math.sqrt(2 / math.pi))
    assert math.isclose(a["moves_for_target"], 0.04 / math.sqrt(2 / math.pi))


def test_a_study_counts_as_run_after_a_commit_only_if_its_file_was_committed_before_its_runs(
        tmp_path):
    """run_after reads git: each record's commit descends from the rule's and already held the
    study file with the records' hash; a file changed after its commit, a run before the rule,
    or a commit this clone lacks do not count."""
    import hashlib
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                               "user.email=t@t", *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    (repo / "rule.txt").write_text("rule\n")
    git("add", "."), git("commit", "-q", "-m", "before the rule")
    early = git("rev-parse", "HEAD")
    (repo / "rule.txt").write_text("rule 2\n")
    git("add", "."), git("commit", "-q", "-m", "the rule")
    rule = git("rev-parse", "HEAD")
    (repo / "jobs").mkdir()
    (repo / "jobs" / "s.toml").write_text("[study]\n")
    git("add", "."), git("commit", "-q", "-m", "the study file")
    ran = git("rev-parse", "HEAD")
    sha = hashlib.sha256(b"[study]\n").hexdigest()

    def study(name, commit, digest):
        folder = tmp_path / name
        folder.mkdir()
        rec = {"kind": "train", "manifest": {"git_commit": commit},
               "declared": {"study_file": "jobs/s.toml", "study_sha256": digest}}
        (folder / "runs.jsonl").write_text(json.dumps(rec) + "\n")
        return folder

    assert heldout_check.run_after(study("ok", ran, sha), rule, repo) is True
    assert heldout_check.run_after(study("edited", ran, "0" * 64), rule, repo) is False
    assert heldout_check.run_after(study("early", early, sha), rule, repo) is False
    assert heldout_check.run_after(study("missing", "f" * 40, sha), rule, repo) is None


def test_the_step_error_with_none_the_middle_or_all_of_the_share_hidden():
    """Each end of the hidden share is judged by the steps the report priced it at; a point
    without both ends is left out rather than counted at the middle."""
    pts = [{"measured": {"step": 1.0}, "predicted": {"step": 1.1},
            "step_if_none": 1.3, "step_if_hidden": 0.9},
           {"measured": {"step": 2.0}, "predicted": {"step": 1.8},
            "step_if_none": 2.0, "step_if_hidden": 1.6, "step_if_window": 2.4},
           {"measured": {"step": 1.0}, "predicted": {"step": 5.0}}]
    h = heldout_check.hidden_ends(pts)
    assert h["n"] == 2
    assert h["none"] == (pytest.approx(0.15), 1)
    assert h["model"] == (pytest.approx(0.10), 0)
    assert h["all"] == (pytest.approx(0.15), 1)
    # the window's step (shown beside, not taken) is judged on the points that carry it only
    assert h["windowed"] == {"n": 1, "model": (pytest.approx(0.10), 0),
                             "window": (pytest.approx(0.20), 1)}
    assert heldout_check.hidden_ends(pts[:1])["windowed"] is None
    assert heldout_check.hidden_ends(pts[2:]) is None


def test_the_compute_with_the_growth_carried_and_with_none():
    """A point beyond the calibration carries the growth of the loop file's largest count below
    it, as the model draws (report.json lists each count's factor for the points above it); its
    compute is judged with that growth and without it."""
    model = {"calibrated_p": 2, "growth": {"3": {"factor": 1.1, "measured": 1.3},
                                           "4": {"factor": 1.2, "measured": 1.4}}}
    assert heldout_check._growth_factor(model, 4) == pytest.approx(1.1)
    assert heldout_check._growth_factor(model, 7) == pytest.approx(1.2)
    assert heldout_check._growth_factor(model, 3) is None
    assert heldout_check._growth_factor(model, 2) is None
    assert heldout_check._growth_factor({}, 7) is None
    pts = [{"measured": {"compute": 1.2}, "predicted": {"compute": 1.2}, "growth_factor": 1.2},
           {"measured": {"compute": 1.0}, "predicted": {"compute": 1.32}, "growth_factor": 1.1},
           {"measured": {"compute": 1.0}, "predicted": {"compute": 9.0}}]
    g = heldout_check.growth_ends(pts)
    assert g["n"] == 2
    assert g["carried"] == (pytest.approx(0.16), 1)
    assert g["none"] == (pytest.approx((1 / 6 + 0.2) / 2), 2)
    assert heldout_check.growth_ends(pts[2:]) is None
