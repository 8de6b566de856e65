"""hpcdl.comm.horovod.init: the threads hvd.init() starts get HPCDL_HOROVOD_NICE, no other thread."""
import os
import threading

import pytest

from hpcdl.comm import horovod as hb


class FakeHorovod:
    """Starts one thread in init(), as Horovod starts its background thread."""

    def __init__(self):
        self.started = False
        self.stop = threading.Event()
        self.tid = None
        self._ready = threading.Event()

    def is_initialized(self):
        return self.started

    def init(self):
        def loop():
            self.tid = threading.get_native_id()
            self._ready.set()
            self.stop.wait(30)
        threading.Thread(target=loop, daemon=True).start()
        self._ready.wait(10)
        self.started = True


@pytest.fixture
def fake():
    h = FakeHorovod()
    yield h
    h.stop.set()


def test_the_thread_hvd_init_starts_gets_the_niceness_and_the_caller_keeps_its_own(fake):
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    info = hb.init(fake, {"HPCDL_HOROVOD_NICE": "19"})
    assert os.getpriority(os.PRIO_PROCESS, fake.tid) == 19
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine
    assert info == {"asked": 19, "threads": 1, "nice": [19]} == hb.init_info()
    # a second call does not start Horovod again and reports what the first did
    assert hb.init(fake, {"HPCDL_HOROVOD_NICE": "5"}) == info


def test_zero_leaves_the_thread_alone(fake):
    info = hb.init(fake, {"HPCDL_HOROVOD_NICE": "0"})
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert os.getpriority(os.PRIO_PROCESS, fake.tid) == base
    assert info == {"asked": 0, "threads": 1, "nice": [base]}


def test_default_is_zero(fake):
    assert hb.nice_setting({}) == 0
    assert hb.init(fake, {})["asked"] == 0


@pytest.mark.parametrize("bad", ["-1", "20", "low", ""])
def test_a_bad_value_is_refused_before_horovod_starts(fake, bad):
    with pytest.raises(ValueError, match="HPCDL_HOROVOD_NICE=.*0 .*19"):
        hb.init(fake, {"HPCDL_HOROVOD_NICE": bad})
    assert not fake.started
