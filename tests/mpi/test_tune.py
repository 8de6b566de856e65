"""hpcdl tune on real ranks: it launches them, times the training path under each candidate,
writes a tuning file, and training then runs exactly what the file picked (read back from the MPI
library itself)."""
import json
import os
import statistics

from hpcdl.launch import local
from hpcdl_testing import ROOT, check, mpirun, read_records

WORKLOAD = ["--workload", "cnn", "--model", "small", "--image-size", "32", "--num-classes", "10"]
TRAIN = ["train", *WORKLOAD, "--batch-size", "8", "--num-warmup-batches", "1",
         "--num-batches-per-iter", "2", "--num-iters", "1", "--probes", "0"]


def _tune(tmp_path, *extra):
    out = tmp_path / "tuning.json"
    argv = local.hpcdl_command(["tune", *WORKLOAD, "--np", "2", "--knobs", "algorithm,cycle,backend",
                                "--rounds", "1", "--worker-rounds", "1", "--iters", "2",
                                "--budget", "0", "--out", str(out), *extra])
    res = local.run(argv, timeout=400, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert not res.timed_out, res.stdout[-3000:]
    return check(res), out


def _train(tmp_path, name, *extra):
    results = tmp_path / f"{name}.jsonl"
    check(mpirun(2, [*TRAIN, "--results", str(results), *extra], timeout=240))
    return read_records(results)[-1]


def test_tune_times_every_candidate_and_training_runs_its_pick(tmp_path):
    res, path = _tune(tmp_path)
    lines = res.stdout.splitlines()
    rows = [ln for ln in lines if ln.startswith(" none")]
    search = [r for r in rows if "hpcdl " not in r]
    # the five algorithms in one launch, then the two other cycle times with the fastest of them
    assert len(search) == 7, res.stdout
    for name in ("library's choice", "ring,", "segmented ring", "Rabenseifner", "recursive doubling"):
        assert any(name in r for r in search), name
    assert sum("cycle 0.2 ms" in r for r in search) == sum("cycle 5 ms" in r for r in search) == 1
    assert "MPI_Allreduce of one buffer" in res.stdout
    # two ranks sharing memory: measured against a copy of the bytes on every rank at once
    assert lines[[ln.startswith("compr") for ln in lines].index(True)].endswith(" vs memcpy")
    # then the search's result against the default, launched alike (the default alone when the
    # search kept it), each confirming launch timing hpcdl's flat backends before its Horovod
    doc = json.loads(path.read_text())
    launches = sum(1 for ln in lines if ln.startswith("# launch "))
    assert launches in (5, 6) and doc["launches"] == launches
    assert any(ln.startswith("# none: the search found") for ln in lines)
    assert any(ln.startswith("# none: hpcdl's flat backends") for ln in lines)
    flat = [r for r in rows if "hpcdl " in r]
    sides = 1 if "(in the pick's launches)" not in res.stdout else 2
    assert len(flat) == 2 * sides and sum("hpcdl ring" in r for r in flat) == \
        sum("hpcdl mpi" in r for r in flat) == sides
    assert doc["made_for"]["ranks"] == 2 and doc["references"]["memcpy_s"] > 0
    assert len(doc["candidates"]) == 7 + 2 * sides and all(c["times_s"] for c in doc["candidates"])
    assert {c.get("backend") for c in doc["candidates"]} == {None, "ring", "mpi"}
    pick = doc["picks"]["none"]
    assert sum(1 for r in rows if r[6] == "*") == 1
    # training without --backend runs the pick: its backend and the settings of its exchange
    rec = _train(tmp_path, "tuned", "--tuning", str(path))
    section = rec["tuning"]
    backend = pick.get("backend", "horovod")
    assert rec["params"]["backend"] == backend and section["backend"] == backend
    assert section["backend_from"] == "the tuning file" and rec["replicas_identical"]
    assert section["source"] == "--tuning" and section["settings"] == pick["env"]
    assert section["pick"] == pick["name"]
    # what the library ran with, read back from it in the training process
    assert section["in_force"]["algorithm"] == int(pick["env"]["OMPI_MCA_coll_tuned_allreduce_algorithm"])
    assert section["in_force"]["dynamic_rules"] == int(pick["env"]["OMPI_MCA_coll_tuned_use_dynamic_rules"])
    env = rec["manifest"]["env"]
    assert all(env[k] == v for k, v in pick["env"].items())


def test_a_forced_algorithm_from_the_environments_tuning_file_is_what_the_library_runs(tmp_path):
    path = tmp_path / "ring.json"
    env = {"HOROVOD_CYCLE_TIME": "5", "HOROVOD_FUSION_THRESHOLD": str(32 << 20),
           "HOROVOD_HIERARCHICAL_ALLREDUCE": "0", "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
           "OMPI_MCA_coll_tuned_allreduce_algorithm": "4",
           "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": "0"}
    path.write_text(json.dumps({"schema": "hpcdl.tuning/1", "made_for": {"nodes": 1, "ranks": 2},
                                "picks": {"none": {"name": "ring", "env": env, "backend": "ring"}}}))
    results = tmp_path / "ring.jsonl"
    # --backend rules over the pick's backend; the pick's settings still apply to its exchange
    check(mpirun(2, [*TRAIN, "--results", str(results), "--backend", "mpi"], timeout=240,
                 env={"HPCDL_TUNING": str(path)}))
    rec = read_records(results)[-1]
    assert rec["params"]["backend"] == "mpi" and rec["tuning"]["backend_from"] == "--backend"
    assert rec["tuning"]["source"] == "HPCDL_TUNING" and rec["tuning"]["settings"] == env
    assert rec["tuning"]["in_force"] == {"dynamic_rules": 1, "algorithm": 4, "segment_bytes": 0}
    # one rank exchanges nothing: the file is not applied, and the record says why
    one = tmp_path / "one.jsonl"
    check(mpirun(1, [*TRAIN, "--results", str(one)], timeout=240, env={"HPCDL_TUNING": str(path)}))
    rec = read_records(one)[-1]
    assert rec["tuning"]["source"] == "default" and "one rank" in rec["tuning"]["ignored"]
    assert rec["tuning"]["in_force"]["algorithm"] == 0


def test_tune_fits_the_jobs_time_limit_and_leaves_its_best_so_far(tmp_path):
    """Inside a job ending soon (SLURM_JOB_END_TIME): after the first launch no other fits
    before the end less a minute, so tune stops, exit 0, and the tuning file holds the fastest
    setting measured, marked partial, which training takes."""
    import time
    out = tmp_path / "tuning.json"
    argv = local.hpcdl_command(["tune", *WORKLOAD, "--np", "2", "--knobs", "algorithm,cycle",
                                "--rounds", "2", "--worker-rounds", "1", "--iters", "2",
                                "--out", str(out)])
    # the job ends a minute and a second from now: within the margin of its end once the first
    # launch (always made: a fresh start of TensorFlow on 2 ranks, 10-40 s here) is done
    env = dict(os.environ, PYTHONPATH=str(ROOT), SLURM_JOB_END_TIME=str(int(time.time()) + 61))
    res = check(local.run(argv, timeout=400, env=env))
    assert "# stopped: the job's time limit" in res.stdout, res.stdout[-3000:]
    doc = json.loads(out.read_text())
    assert doc["partial"] is True and doc["launches"] == 1
    pick = doc["picks"]["none"]
    assert pick["partial"] and pick["exchange_s"] == min(
        statistics.median(c["times_s"]) for c in doc["candidates"] if c["compression"] == "none")
    rec = _train(tmp_path, "partial", "--tuning", str(out))
    assert rec["tuning"]["file"] == str(out)
