"""Run an hpcdl command with every exchange method of hpcdl.comm's backends wrapped by a spy.

    mpirun -np 2 python exchange_spy.py OUT.json train|bench ARGS...

Each backend class's own ``average`` and ``allreduce_mean`` record, per backend label (e.g.
``ring+fp16``), the qualified name of the method that ran; rank 0 writes the record to OUT.json.
"""
import atexit
import functools
import json
import sys

from hpcdl import cli
from hpcdl.comm.horovod import HorovodBackend
from hpcdl.comm.mpi import MPIBackend
from hpcdl.comm.ps import PSBackend
from hpcdl.comm.ring import RingBackend

CALLED = {}


def _spy(cls, name):
    method = cls.__dict__[name]

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        CALLED.setdefault(self.label, set()).add(f"{cls.__name__}.{name}")
        return method(self, *args, **kwargs)
    setattr(cls, name, wrapper)


for cls in (HorovodBackend, MPIBackend, RingBackend, PSBackend):
    for name in ("average", "allreduce_mean"):
        if name in cls.__dict__:
            _spy(cls, name)


def _write():
    from hpcdl import cluster
    if cluster.discover().rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump({k: sorted(v) for k, v in CALLED.items()}, fh)


atexit.register(_write)
sys.exit(cli.main(sys.argv[2:]))
