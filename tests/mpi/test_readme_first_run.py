"""The README's first training run works as typed, as root and as a normal user.

The commands are read from the README's "A first training run" block, so the test follows the
README; they run in a shell as a user would type them, from a fresh working folder.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hpcdl.launch import local
from hpcdl_testing import ROOT

NOBODY = 65534


def _first_run_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## A first training run", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    lines = [ln.split(" #")[0].strip() for ln in block.splitlines()]
    return [ln for ln in lines if ln]


def _in_this_venv(commands):
    """The README's commands, with its `source .venv/bin/activate` activating the venv that runs
    these tests when that is another (the other TensorFlow stack's, scripts/test.sh)."""
    venv = Path(sys.prefix)
    if commands[0] == "source .venv/bin/activate" and venv.resolve() != (ROOT / ".venv").resolve():
        return [f"source {venv}/bin/activate"] + commands[1:]
    return commands


def _run(commands, cwd: Path, user=None):
    # the venv as the README's reader has it (.venv beside the README), a fresh shell environment
    script = "set -e\ncd " + str(ROOT) + "\n" + commands[0] + "\ncd " + str(cwd) + "\n" \
        + "\n".join(commands[1:]) + "\n"
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"}
    pre = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user else []
    # its own process group, killed whole on timeout: mpirun and its ranks never outlive the test
    # (not local.run, whose environment would give Open MPI the root consent under test here)
    proc = subprocess.Popen(pre + ["bash", "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        local._kill_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"the README's first run did not end within 300 s:\n{out[-2000:]}{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _check(res, cwd: Path):
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert re.search(r"Total samples/sec on 2 rank\(s\): [0-9.]+", res.stdout), res.stdout[-2000:]
    assert "Replicas identical: yes" in res.stdout
    results = re.search(r"--results (\S+)", _first_run_commands()[-1]).group(1)
    (rec,) = [json.loads(ln) for ln in (cwd / results).read_text().splitlines()]
    assert rec["layout"]["size"] == 2 and rec["status"] == "ok"


def test_the_readme_block_is_the_first_run():
    cmds = _first_run_commands()
    assert cmds[0] == "source .venv/bin/activate"
    assert any(c.startswith("mpirun -np 2 hpcdl train") for c in cmds)


def test_the_first_training_run_works_as_typed_as_root(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("this test runs as root; the next one runs as a normal user")
    _check(_run(_in_this_venv(_first_run_commands()), tmp_path), tmp_path)


def test_the_first_training_run_works_as_typed_as_a_normal_user():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("switching to a normal user needs root and setpriv")
    where = Path(tempfile.mkdtemp(prefix="hpcdl-user-"))
    try:
        os.chmod(where, 0o777)
        python = Path(sys.prefix) / "bin" / "python"
        probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                                "--clear-groups", "bash", "-c", f"{python} -c pass"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode != 0:
            pytest.skip(f"user {NOBODY} cannot run this set-up's Python ({python.resolve()}: "
                        f"{probe.stderr.strip()[-120:]}); a normal user runs their own set-up")
        _check(_run(_in_this_venv(_first_run_commands()), where, user=NOBODY), where)
    finally:
        shutil.rmtree(where, ignore_errors=True)
