"""benchmarks/heldout_check.py pairs a held-out point that two studies ran in the same
configuration, and only then: the sessions' own difference is what no prediction can follow."""
import importlib.util
import json

from hpcdl_testing import ROOT

_spec = importlib.util.spec_from_file_location("heldout_check",
                                               ROOT / "benchmarks" / "heldout_check.py")
heldout_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(heldout_check)


def _study(folder, steps, env=None, batch=128):
    """A study folder: report.json with one Horovod axis calibrated at 2 nodes and predicted at 4
    (measured steps ``steps`` at 2 and 4 nodes, predicted 1.0 and 1.2), and runs.jsonl."""
    folder.mkdir()
    axis = "horovod/none@200mbit"
    points = [{"nodes": n, "fitted": n == 2, "measured": {"step": s},
               "predicted": {"step": p}, "error": {"step": p / s - 1}}
              for n, s, p in ((2, steps[0], 1.0), (4, steps[1], 1.2))]
    (folder / "report.json").write_text(json.dumps(
        {"prediction": {"axes": [{"axis": axis, "backend": "horovod", "points": points}]}}))
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
    ((first, second),) = heldout_check.same_configuration([a, b])
    assert first[:3] == ("a", "horovod/none@200mbit", 4) and second[0] == "b"
    assert abs(first[3] - 1.1) < 1e-12 and abs(second[3] - 1.3) < 1e-12   # measured s4/s2
    assert abs(first[4] - 1.2) < 1e-12 and abs(second[4] - 1.2) < 1e-12   # predicted s4/s2


def test_another_batch_or_another_horovod_setting_is_not_the_same_configuration(tmp_path):
    a = _study(tmp_path / "a", (1.0, 1.1))
    other_batch = _study(tmp_path / "b", (2.0, 2.6), batch=64)
    pinned = _study(tmp_path / "c", (2.0, 2.6),
                    env={"OMPI_MCA_coll_tuned_allreduce_algorithm": "4"})
    assert heldout_check.same_configuration([a, other_batch, pinned]) == []
