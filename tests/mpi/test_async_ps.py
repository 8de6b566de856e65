"""hpcdl train --backend ps-async: the asynchronous parameter server on real MPI ranks.

Staleness 0 is the synchronous parameter server and ends with --backend ps's weights; a bound
S keeps every worker within S pushes of the slowest (a straggler injected with HPCDL_SLOW);
without a bound (Downpour) the fast workers run ahead; a target stops every worker; a killed
worker or server ends the job.
"""
import re
import time

import numpy as np
import pytest

from hpcdl_testing import check, mpirun, read_records

ARGS = ["train", "--workload", "expmlp", "--batch-size", "32", "--warmup", "5",
        "--log-every", "20", "--seed", "5", "--probes", "0"]
STEPS = 400          # of the runs compared with one another, and of the resumed one


def _train(tmp_path, np_, extra, env=None, steps=None, name="run"):
    weights = tmp_path / f"{name}.npz"
    results = tmp_path / f"{name}.jsonl"
    res = check(mpirun(np_, ARGS + ["--steps", str(steps or STEPS), "--save-weights",
                                    str(weights), "--results", str(results)] + extra,
                       timeout=180, env=env))
    assert "Replicas identical: yes" in res.stdout, res.stdout[-2000:]
    with np.load(weights) as z:
        arrays = [z[k] for k in sorted(z.files, key=lambda k: int(k[1:]))]
    return arrays, read_records(results)[-1], res


@pytest.fixture(scope="module")
def synchronous(tmp_path_factory):
    """The synchronous parameter server's run on two ranks: its weights, its record and the
    folder of the checkpoints it wrote."""
    tmp = tmp_path_factory.mktemp("ps")
    ckpt = tmp / "ckpt"
    ref, rec, _ = _train(tmp, 2, ["--backend", "ps", "--checkpoint-dir", str(ckpt),
                                  "--checkpoint-every", "100"], name="ps")
    return ref, rec, ckpt


@pytest.fixture(scope="module")
def staleness_zero(tmp_path_factory):
    """The asynchronous server with staleness 0 on two ranks, uninterrupted."""
    return _train(tmp_path_factory.mktemp("async0"), 2, ["--backend", "ps-async", "--staleness",
                                                         "0"], name="async0")


def test_staleness_zero_ends_with_the_synchronous_parameter_servers_weights(synchronous,
                                                                             staleness_zero):
    ref = synchronous[0]
    got, rec, res = staleness_zero
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    a = rec["metrics"]["async"]
    assert rec["params"]["backend"] == "ps-async" and rec["params"]["staleness"] == "0"
    assert a["updates"] == STEPS and a["samples_per_update"] == 64
    assert a["staleness"]["max"] == 0 and a["lead_max"] == 0
    assert [w["pushes"] for w in a["per_worker"]] == [STEPS, STEPS]
    assert f"Update {STEPS}: loss" in res.stdout


def test_downpour_is_not_the_synchronous_result_and_still_learns(tmp_path, synchronous):
    ref = synchronous[0]
    got, rec, _ = _train(tmp_path, 2, ["--backend", "ps-async"], name="downpour")
    a = rec["metrics"]["async"]
    assert rec["params"]["staleness"] == "inf"
    assert a["updates"] == 2 * STEPS and a["samples_per_update"] == 32
    assert sum(int(k) * v for k, v in a["staleness"]["hist"].items()) > 0   # some were stale
    assert max(float(np.abs(x - y).max()) for x, y in zip(got, ref)) > 1e-4
    assert rec["metrics"]["test_loss"] < rec["metrics"]["first_loss"] / 4, rec["metrics"]


@pytest.mark.parametrize("bound", [1, 3])
def test_a_bound_keeps_every_worker_within_s_pushes_of_a_straggler(tmp_path, bound):
    # 40 ms, not 15: three ranks and the server's thread on two cores stretch a fast worker's
    # step now and then past a 15 ms straggler's, which is then ahead and rightly held (0.72 s
    # against 1.1-1.6 s for the fast workers once in CI)
    slow = {"HPCDL_SLOW": "rank=2,phase=compute,delay_ms=40"}
    _, rec, _ = _train(tmp_path, 3, ["--backend", "ps-async", "--staleness", str(bound)],
                       env=slow, steps=60, name=f"ssp{bound}")
    a = rec["metrics"]["async"]
    assert a["updates"] == 180
    assert a["lead_max"] == bound, a          # reached (the straggler is slow) and never passed
    held = {w["rank"]: w["held_s"] for w in a["per_worker"]}
    # the fast workers wait for the straggler, not it for them: three ranks on two cores now and
    # then leave a fast one without a core long enough to hold the straggler too (14 ms of its
    # run once, against 1.0-1.2 s for each fast worker)
    assert held[0] > 0.1 and held[1] > 0.1 and held[2] < 0.1 * min(held[0], held[1]), held


def test_without_a_bound_the_fast_workers_run_ahead_of_a_straggler(tmp_path):
    slow = {"HPCDL_SLOW": "rank=2,phase=compute,delay_ms=15"}
    _, rec, _ = _train(tmp_path, 3, ["--backend", "ps-async", "--ps-dedicated"], env=slow,
                       steps=60, name="downpour")
    a = rec["metrics"]["async"]
    assert a["workers"] == 2 and rec["params"]["ps_dedicated"] is True
    assert a["lead_max"] > 10 and all(w["held_s"] == 0 for w in a["per_worker"]), a


def test_a_target_reached_on_the_servers_parameters_stops_every_worker(tmp_path):
    _, rec, res = _train(tmp_path, 2, ["--backend", "ps-async", "--staleness", "2",
                                       "--target", "loss:0.05"], steps=400, name="target")
    t, a = rec["metrics"]["target"], rec["metrics"]["async"]
    assert t["reached"] and t["steps"] < 800, t
    assert a["updates"] == t["steps"], (a["updates"], t)
    assert rec["metrics"]["evals"][-1]["test_loss"] <= 0.05
    assert "Target loss <= 0.05 reached" in res.stdout


@pytest.mark.parametrize("rank,extra", [(1, []), (0, ["--ps-dedicated"])])
def test_a_killed_worker_or_server_ends_the_job(tmp_path, rank, extra):
    res = mpirun(3, ARGS + ["--steps", "400", "--backend", "ps-async", "--results", "-"] + extra,
                 timeout=180, env={"HPCDL_FAULT": f"rank={rank},step=50,kind=kill"})
    ended = time.time()
    m = re.search(r"HPCDL_FAULT: injecting 'kill' at step 50 \(t=([\d.]+)\)", res.stderr)
    assert m and res.returncode != 0, res.stderr[-3000:]
    assert ended - float(m.group(1)) < 60


def test_options_of_the_asynchronous_server_are_checked(tmp_path):
    res = mpirun(1, ARGS + ["--steps", "10", "--backend", "ps", "--staleness", "2"], timeout=60)
    assert res.returncode != 0 and "--staleness and --ps-dedicated are options of" in res.stderr
    res = mpirun(1, ARGS + ["--steps", "10", "--backend", "ps-async", "--ps-dedicated",
                            "--results", "-"],
                 timeout=60)
    assert res.returncode != 0 and "--ps-dedicated needs at least 2 ranks" in res.stderr


def test_slow_rank_makes_that_workers_compute_about_factor_times_as_long(tmp_path):
    # a batch of 256: a step computes for milliseconds, not one, and its time is less noisy
    _, rec, res = _train(tmp_path, 2, ["--backend", "ps-async", "--slow-rank", "1:3",
                                       "--batch-size", "256"], steps=60, name="slow")
    assert rec["params"]["slow_rank"] == "1:3"
    m = re.search(r"\[1@\S+\] --slow-rank: compute ([\d.]+) ms per step, ([\d.]+) ms added \(3x\)",
                  res.stderr)
    assert m, res.stderr[-2000:]
    own, added = float(m.group(1)), float(m.group(2))
    assert added == pytest.approx(2 * own, rel=0.01, abs=0.002)        # (FACTOR - 1) x its own
    # Rank 1's recorded compute holds the delay in every step (a sleep is never shorter), so it
    # is at least FACTOR - 1 times its own compute. Rank 0 is no yardstick: it also hosts the
    # server thread, which slows its compute by a varying amount on 2 cores (1.35 ms against
    # rank 1's 10.5 ms once in CI, where under 5x was asserted); nor is rank 1's own compute
    # timed as it set the delay (0.45 ms once, against 1.46 ms a step for rank 0 in training).
    # So the delay applied over and over (a sleep per tensor) is what the bound catches: a step
    # of rank 1 within 3x rank 0's compute plus one delay.
    comp = {w["rank"]: w["compute_s"] for w in rec["metrics"]["async"]["per_worker"]}
    assert comp[1] >= added / 1e3, (comp, own, added)
    assert comp[1] < 3 * (comp[0] + added / 1e3), (comp, own, added)


def test_a_killed_then_stopped_asynchronous_run_resumes_to_the_same_weights(tmp_path,
                                                                           staleness_zero):
    """Staleness 0 is deterministic: a run killed after a checkpoint, resumed, stopped by
    --max-time (exit 75 with a checkpoint) and resumed again ends with the uninterrupted
    run's weights."""
    sync = ["--backend", "ps-async", "--staleness", "0"]
    ref = staleness_zero[0]
    ck = ["--checkpoint-dir", str(tmp_path / "ckpt")]
    res = mpirun(2, ARGS + ["--steps", str(STEPS), "--results", "-", "--checkpoint-every", "40"]
                 + sync + ck, timeout=180, env={"HPCDL_FAULT": "rank=1,step=70,kind=kill"})
    assert res.returncode != 0 and "injecting 'kill' at step 70" in res.stderr
    res = mpirun(2, ARGS + ["--steps", str(STEPS), "--results", "-", "--resume",
                            "--max-time", "0.3"] + sync + ck, timeout=180)
    assert res.returncode == 75, res.stderr[-3000:]
    assert re.search(r"Resumed from \S+ckpt-000000040\.hpcdl at update 40", res.stdout)
    m = re.search(r"Stopped after (\d+) updates \(a worker asked to stop\); checkpoint (\S+)",
                  res.stdout)
    assert m and 40 < int(m.group(1)) < STEPS, res.stdout[-2000:]
    assert (tmp_path / "ckpt" / "INTERRUPTED").read_text().startswith(m.group(1))
    got, rec, res = _train(tmp_path, 2, sync + ck + ["--resume"], name="resumed")
    assert rec["resumed_from"]["step"] == int(m.group(1))
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_a_synchronous_checkpoint_is_not_resumed_by_the_asynchronous_server(synchronous):
    res = mpirun(2, ARGS + ["--steps", str(STEPS), "--backend", "ps-async", "--resume",
                            "--checkpoint-dir", str(synchronous[2]), "--results", "-"],
                 timeout=120)
    assert res.returncode == 2 and "was written by a synchronous run" in res.stderr, res.stderr
