"""Test helpers: run hpcdl under real mpirun, always under a timeout (import as hpcdl_testing)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl import stack  # noqa: E402
from hpcdl.launch import local  # noqa: E402

# the stack the tests run on (scripts/setup.sh, HPCDL_STACK), and the TensorFlow series it is
STACK = stack.setup_facts().get("stack") or (
    "tf2.21" if stack.keras_3_by_default(stack.tensorflow_version()) else "tf2.15")
TF_SERIES = {"tf2.15": "2.15", "tf2.21": "2.21"}[STACK]


def mpirun(np, args, timeout=180, env=None, cwd=None, command=None):
    """Run ``python -m hpcdl ARGS`` (or ``command`` followed by ARGS) on ``np`` real MPI ranks;
    fail the test on a timeout."""
    argv = local.mpirun_command(np, [*command, *args] if command else local.hpcdl_command(args))
    full_env = dict(os.environ, PYTHONPATH=str(ROOT))
    full_env.update(env or {})
    res = local.run(argv, timeout=timeout, env=full_env, cwd=cwd)
    if res.timed_out:
        pytest.fail(f"mpirun -np {np} timed out after {timeout} s (hang?)\n"
                    f"stdout:\n{res.stdout[-3000:]}\nstderr:\n{res.stderr[-3000:]}")
    return res


SPY = ROOT / "tests" / "mpi" / "exchange_spy.py"
# a quick sweep of `hpcdl bench allreduce`: 4 B to 64 KiB in steps of 16x, a few iterations
BENCH_QUICK = ["-b", "4", "-e", "64K", "-f", "16", "-n", "2", "--max-iters", "4", "-w", "1"]


def spied(np, out, args, timeout=180):
    """Run ``hpcdl ARGS`` on ``np`` ranks under tests/mpi/exchange_spy.py, which records which
    exchange method of each backend ran (it changes nothing they compute): the result and what
    was called, per backend label."""
    res = check(mpirun(np, args, timeout, command=[sys.executable, str(SPY), str(out)]))
    return res, json.loads(Path(out).read_text())


def check(res):
    assert res.returncode == 0, (f"exit {res.returncode}\nstdout:\n{res.stdout[-4000:]}\n"
                                 f"stderr:\n{res.stderr[-4000:]}")
    return res


def one_process_env(**extra) -> dict:
    """This environment without MPI's and Slurm's (one process, whatever launched the tests),
    with ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "SLURM_"))}
    env.update(extra)
    return env


def read_records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]



# Slurm jobs a test fails, cancels or requeues on purpose, with why: the session's closing sacct
# table marks them, and marks any other job that did not complete as not deliberate.
DELIBERATE: dict = {}
ENDED_BADLY = ("FAILED", "NODE_FAIL", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED",
               "REQUEUED", "BOOT_FAIL", "DEADLINE")


def deliberate(job_id, why: str) -> None:
    DELIBERATE[str(job_id)] = why


def annotate_sacct(text: str, marks: dict) -> list:
    """The lines of ``sacct -c -P -o jobid,jobname,...,state,...``, each job that did not complete
    marked deliberate (with why) or NOT deliberate, and a closing count."""
    lines, unexpected, on_purpose = [], [], 0
    for line in text.splitlines():
        fields = line.split("|")
        job, state = fields[0], (fields[4].split()[0] if len(fields) > 4 and fields[4] else "")
        mark = ""
        if job in marks:
            mark = f"   <- deliberate: {marks[job]}"
            on_purpose += state in ENDED_BADLY
        elif state in ENDED_BADLY:
            mark = "   <- NOT deliberate"
            unexpected.append(job)
        lines.append(line + mark)
    lines.append(f"{on_purpose} job record(s) failed, were cancelled or requeued on purpose; "
                 + (f"{len(unexpected)} did so NOT on purpose: {', '.join(unexpected)}"
                    if unexpected else "none other did"))
    return lines


def must_run(env, euid: int, platform: str, apt: Optional[str]) -> str:
    """Why the box and scheduler tiers may not skip here ("" where they may): under CI, or as
    root on Linux where apt-get can install what is missing. A skipped tier there would let a
    run pass with no scheduler test run."""
    if str(env.get("CI", "")).lower() == "true":
        return "CI=true"
    if euid == 0 and platform.startswith("linux") and apt:
        return "root on Linux with apt-get"
    return ""


# The quick tier (`make test`): what a user runs after set-up to see the install work, in under
# ten minutes on 2 cores. Beside every unit test, one MPI test of each training mode and exchange
# backend and one Slurm run on the box; `make test-all` (CI) runs every test.
QUICK = (
    "tests/mpi/test_train.py::test_expmlp_on_n_ranks_matches_one_process_on_the_same_global_batch[2]",
    "tests/mpi/test_train.py::test_record_carries_parameters_curve_throughput_and_manifest",
    "tests/mpi/test_train_backends.py::test_every_backend_trains_to_the_horovod_model[mpi]",
    "tests/mpi/test_train_backends.py::test_every_backend_trains_to_the_horovod_model[ring]",
    "tests/mpi/test_train_backends.py::test_every_backend_trains_to_the_horovod_model[ps]",
    "tests/mpi/test_async_ps.py::test_downpour_is_not_the_synchronous_result_and_still_learns",
    "tests/mpi/test_pipeline.py::test_the_pipeline_gives_one_process_loss_curve_and_weights[2-4]",
    "tests/slurm/test_slurm_cluster.py::test_two_node_run_through_sbatch_and_srun_records_nodes_n1_n2",
)

# The MPI tests `make test-all` runs on the other TensorFlow stack (marked stacks): the quick
# tier's, one of each training mode and backend, and those of the APIs that changed most between
# TensorFlow 2.15 and 2.21 (a user's model.fit script, the Keras recorder, checkpoints). The rest
# drive the same training code through hpcdl's own orchestration; running them all there put the
# full tier past its 30 minutes (results/stacks.md).
OTHER_STACK = ("tests/mpi/test_keras_recorder.py", "tests/mpi/test_own_script_study.py",
               "tests/mpi/test_resume.py")
