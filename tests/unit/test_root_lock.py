"""One writer of a results root at a time (hpcdl.study.lock): a second caller is refused with
the holder named, or waits when asked; a holder that died leaves a lock taken over with a note."""
import os
import signal
import subprocess
import sys
import time

import pytest

from hpcdl.errors import UserError
from hpcdl.study import lock
from hpcdl_testing import ROOT

HOLD = """
import sys, time
from hpcdl.study import lock
with lock.hold(sys.argv[1], "hpcdl study run jobs/x.toml"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(root, seconds):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root), str(seconds)],
                            stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_caller_is_refused_naming_the_holder(tmp_path):
    proc = _holder(tmp_path, 60)
    try:
        with pytest.raises(UserError, match=rf"is in use by 'hpcdl study run jobs/x.toml' "
                                            rf"\(PID {proc.pid} on .+, since 20"):
            with lock.hold(tmp_path, "hpcdl study report"):
                pass
    finally:
        proc.kill()
        proc.wait()


def test_a_caller_asked_to_wait_gets_the_root_once_the_holder_ends(tmp_path, capsys):
    proc = _holder(tmp_path, 1.5)
    t0 = time.monotonic()
    with lock.hold(tmp_path, "hpcdl study report", wait=60):
        waited = time.monotonic() - t0
    proc.wait()
    assert 0.5 < waited < 30
    assert "waiting up to 60 s" in capsys.readouterr().err


def test_a_lock_whose_holder_died_is_taken_over_with_a_note(tmp_path, capsys):
    proc = _holder(tmp_path, 60)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with lock.hold(tmp_path, "hpcdl study run"):
        pass
    err = capsys.readouterr().err
    assert f"took over the lock of 'hpcdl study run jobs/x.toml' (PID {proc.pid}" in err
    with lock.hold(tmp_path, "hpcdl study run"):     # released cleanly: no note now
        pass
    assert capsys.readouterr().err == ""


def test_the_same_process_may_take_it_again(tmp_path):
    with lock.hold(tmp_path, "hpcdl study run"):
        with lock.hold(tmp_path, "hpcdl study report"):
            pass
        assert (tmp_path / lock.NAME).read_text()        # still held by the outer block
    assert (tmp_path / lock.NAME).read_text() == ""
