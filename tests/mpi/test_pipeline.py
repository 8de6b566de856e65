"""hpcdl train --parallel pipeline on real MPI ranks: the model cut into stages trains as one
process does on the same batches, and the record says what the pipeline cost."""
import re
from pathlib import Path

import numpy as np
import pytest

from hpcdl_testing import ROOT, check, mpirun, read_records

ARGS = ["train", "--workload", "expmlp", "--batch-size", "64", "--steps", "60", "--warmup", "5",
        "--log-every", "5", "--seed", "7", "--probes", "0"]


def _train(tmp_path, np_, extra, name, env=None):
    results, weights = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.npz"
    res = check(mpirun(np_, ARGS + ["--results", str(results), "--save-weights", str(weights)]
                       + extra, timeout=180, env=env))
    with np.load(weights) as z:
        arrays = [z[k] for k in sorted(z.files, key=lambda k: int(k[1:]))]
    return read_records(results)[-1], arrays, res


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("one"), 1, [], "one")


@pytest.mark.parametrize("stages,micro", [(2, 4), (3, 2)])
def test_the_pipeline_gives_one_process_loss_curve_and_weights(tmp_path, one_process, stages,
                                                               micro):
    ref, ref_w, _ = one_process
    rec, got_w, res = _train(tmp_path, stages, ["--parallel", "pipeline", "--micro-batches",
                                                str(micro), "--cut", "layers"], f"pipe{stages}")
    a = np.array([v for _, v in ref["metrics"]["loss_curve"]])
    b = np.array([v for _, v in rec["metrics"]["loss_curve"]])
    assert len(a) == len(b) == 12
    np.testing.assert_allclose(b, a, rtol=1e-5)
    for x, y in zip(got_w, ref_w):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)
    p = rec["metrics"]["pipeline"]
    assert rec["params"]["parallel"] == "pipeline" and rec["params"]["stages"] == stages
    assert p["stages"] == stages and p["micro_batches"] == micro and p["micro_batch"] == 64 // micro
    assert [s["stage"] for s in p["per_stage"]] == list(range(stages))
    assert sum(len(s["layers"]) for s in p["per_stage"]) == 3
    assert sum(s["params"] for s in p["per_stage"]) * 4 == p["gradient_bytes"] == \
        ref["gradient_bytes"]
    assert 0 < p["bubble"] < 1 and p["bubble_theory"] == pytest.approx(
        (stages - 1) / (micro + stages - 1))
    # expmlp's cuts carry 16 floats (after the first layer) and 32 (after the second)
    cuts = {2: [32 * 4], 3: [16 * 4, 32 * 4]}[stages]
    assert p["cut_bytes_per_sample"] == cuts and p["bytes_per_step"] == 2 * 64 * sum(cuts)
    assert re.search(r"Pipeline: bubble [\d.]+% measured", res.stdout)
    assert rec["metrics"]["test_loss"] == pytest.approx(ref["metrics"]["test_loss"], rel=1e-4)


def test_pipeline_options_are_checked(tmp_path):
    res = mpirun(2, ARGS + ["--parallel", "pipeline", "--micro-batches", "5", "--results", "-"],
                 timeout=60)
    assert res.returncode != 0 and "--micro-batches 5 does not divide the batch of 64" in res.stderr
    res = mpirun(2, ARGS + ["--parallel", "pipeline", "--workload", "mnist", "--data",
                            "sklearn-digits", "--results", "-"], timeout=60)
    assert res.returncode != 0 and "--stages 2: the model has 1 layer" in res.stderr
    res = mpirun(1, ARGS + ["--parallel", "pipeline", "--backend", "ps", "--results", "-"],
                 timeout=60)
    assert res.returncode != 0 and "--backend and --compression do not apply" in res.stderr


def test_the_timed_cut_takes_the_cut_whose_slowest_stage_is_fastest(tmp_path, one_process):
    ref, ref_w, _ = one_process
    rec, got_w, res = _train(tmp_path, 2, ["--parallel", "pipeline", "--micro-batches", "4"],
                             "timed")
    p = rec["metrics"]["pipeline"]
    assert rec["params"]["cut"] == "time"
    (a0, b0), (a1, b1) = p["cut"]
    assert a0 == 0 and b0 == a1 and b1 == 3 and 1 <= b0 <= 2
    assert len(p["stage_costs_s"]) == 2 and all(c > 0 for c in p["stage_costs_s"])
    assert 0 <= p["bubble_expected"] < 1
    assert re.search(r"Stages: 0: layers 0-\d \([\d.]+ ms per micro-batch\); 1: layers", res.stdout)
    for x, y in zip(got_w, ref_w):          # wherever the cut, the same training
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)


def test_a_tf_data_workload_trains_in_a_pipeline_as_in_one_process(tmp_path):
    args = ["--workload", "userwl2:factory", "--steps", "12", "--log-every", "3"]
    env = {"PYTHONPATH": f"{Path(__file__).parent}:{ROOT}"}
    one, _, _ = _train(tmp_path, 1, args, "u1", env=env)
    two, _, _ = _train(tmp_path, 2, args + ["--parallel", "pipeline", "--micro-batches", "2"],
                       "u2", env=env)
    np.testing.assert_allclose([v for _, v in two["metrics"]["loss_curve"]],
                               [v for _, v in one["metrics"]["loss_curve"]], rtol=1e-5)


def test_a_killed_then_stopped_pipeline_resumes_to_the_same_weights(tmp_path):
    pipe = ["--parallel", "pipeline", "--micro-batches", "4", "--steps", "400", "--cut",
            "layers"]
    ref, ref_w, _ = _train(tmp_path, 2, pipe, "ref")
    ck = ["--checkpoint-dir", str(tmp_path / "ckpt"), "--results", "-"]
    res = mpirun(2, ARGS + pipe + ck + ["--checkpoint-every", "40"], timeout=180,
                 env={"HPCDL_FAULT": "rank=1,step=70,kind=kill"})
    assert res.returncode != 0 and "injecting 'kill' at step 70" in res.stderr
    res = mpirun(2, ARGS + pipe + ck + ["--resume", "--max-time", "0.3"], timeout=180)
    assert res.returncode == 75, res.stderr[-3000:]
    assert re.search(r"Resumed from \S+ckpt-000000040\.hpcdl at step 40", res.stdout)
    m = re.search(r"Stopped at step (\d+)/400 \(.*?\); checkpoint (\S+)", res.stdout)
    assert m and 40 < int(m.group(1)) < 400, res.stdout[-2000:]
    rec, got_w, res = _train(tmp_path, 2, pipe + ["--checkpoint-dir", str(tmp_path / "ckpt"),
                                                  "--resume"], "resumed")
    assert rec["metrics"]["pipeline"]["cut"] == ref["metrics"]["pipeline"]["cut"]
    for x, y in zip(got_w, ref_w):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)
