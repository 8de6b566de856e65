"""Every way a study's points run behind one interface: Slurm and Grid Engine with the same
methods, mpirun (study run) beside them with render, submit, cancel and the time left."""
import sys
import time

from hpcdl.launch import batch, local


def _methods(obj) -> set:
    return {m for m in dir(obj) if not m.startswith("_") and callable(getattr(obj, m))}


def test_the_schedulers_offer_the_same_methods_and_every_launcher_the_common_ones():
    slurm, ge = batch.BY_NAME["slurm"], batch.BY_NAME["gridengine"]
    assert _methods(slurm) == _methods(ge)
    for name, launcher in batch.LAUNCHERS.items():
        assert launcher.name == name and launcher.tools
        assert {"cancel", "time_left"} <= _methods(launcher)
    assert set(batch.LAUNCHERS) == {"slurm", "gridengine", "mpirun"}


def test_the_time_left_is_the_enclosing_jobs_for_every_launcher():
    end = int(time.time()) + 100
    for launcher in batch.LAUNCHERS.values():
        assert 90 < launcher.time_left({"SLURM_JOB_END_TIME": str(end)}) <= 100
        assert launcher.time_left({}) is None


def test_mpirun_renders_and_runs_a_point_now_under_its_timeout():
    argv = local.MPIRUN.render(1, [sys.executable, "-c", "print('ran')"])
    assert argv == local.mpirun_command(1, [sys.executable, "-c", "print('ran')"])
    res = local.MPIRUN.submit(argv, timeout=120)
    assert res.returncode == 0 and "ran" in res.stdout and not res.timed_out
    slow = local.MPIRUN.submit(local.MPIRUN.render(1, [sys.executable, "-c",
                                                       "import time; time.sleep(60)"]), timeout=3)
    assert slow.timed_out and slow.elapsed < 30
