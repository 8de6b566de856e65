"""The box and scheduler tiers never skip where they must run: under CI, or as root on Linux with
apt-get, a cluster box that cannot be made turns the run red with its reason."""
import os
import subprocess
import sys

import pytest

from hpcdl_testing import ROOT, must_run


@pytest.mark.parametrize("env, euid, platform, apt, why", [
    ({"CI": "true"}, 1000, "linux", None, "CI=true"),
    ({}, 0, "linux", "/usr/bin/apt-get", "root on Linux with apt-get"),
    ({}, 1000, "linux", "/usr/bin/apt-get", ""),        # a user: the box needs root
    ({}, 0, "linux", None, ""),                         # no apt-get: nothing can be installed
    ({}, 0, "darwin", "/usr/bin/apt-get", ""),
    ({"CI": "false"}, 1000, "linux", None, ""),
])
def test_where_the_box_tiers_may_skip(env, euid, platform, apt, why):
    assert must_run(env, euid, platform, apt) == why


def test_a_box_that_cannot_be_made_under_ci_turns_the_run_red(tmp_path):
    """The fixture run for real in a pytest of its own, its cluster script one that cannot make a
    box (exit 3, as cluster-box.sh says so): under CI=true the test that needs it fails, naming
    why, where it used to skip and the run passed."""
    script = tmp_path / "no-box.sh"
    script.write_text("#!/bin/sh\necho 'cluster-box: the dpkg lock is held' >&2\nexit 3\n")
    script.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "HPCDL_SLURM_TESTS"}
    env.update(CI="true", HPCDL_TEST_BOX_SCRIPT=str(script),
               HPCDL_TEST_BOX_LOCK=str(tmp_path / "lock"), PYTHONPATH=str(ROOT),
               HPCDL_SLURM_SACCT_LOG=str(tmp_path / "sacct.txt"))
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                          str(ROOT / "tests" / "slurm" / "test_slurm_cluster.py"),
                          "-k", "test_study_submit_runs_each_point_then_the_report"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert res.returncode != 0, res.stdout[-3000:]
    assert "must be made here (CI=true)" in res.stdout and "dpkg lock is held" in res.stdout
    assert " skipped" not in res.stdout.splitlines()[-1], res.stdout[-500:]


def test_every_test_the_quick_tier_names_exists():
    """A renamed test would silently leave the quick tier: each name in QUICK is collected."""
    from hpcdl_testing import QUICK
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                          "--collect-only", *QUICK], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"{len(QUICK)} tests collected" in res.stdout, res.stdout[-2000:]
