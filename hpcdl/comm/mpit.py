"""Read and write the MPI library's control variables (MPI_T) in a running process.

Open MPI's tuned collectives choose an allreduce algorithm per call from the message size and
the communicator (its "fixed rules"), unless ``coll_tuned_use_dynamic_rules`` was 1 when MPI
started; then ``coll_tuned_allreduce_algorithm`` (0: the library's own choice, 1 basic linear,
2 nonoverlapping, 3 recursive doubling, 4 ring, 5 segmented ring, 6 Rabenseifner) forces one. Both
are MCA parameters read from ``OMPI_MCA_*`` in the environment at MPI_Init. The algorithm (and its
segment size) may also be written through MPI_T while MPI runs; a communicator created after the
write uses the new value (Open MPI enables its collectives per communicator). ``hpcdl tune``
tries algorithms that way inside one job; training sets the environment before MPI starts and
reads the variables back here, so the record says what the library ran with.

MPI_T is in the MPI standard; mpi4py does not wrap it, so this calls the library through ctypes.
Another MPI library, or one without these variables, gives None from :func:`read` and False from
:func:`write`: nothing here is required for training.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib
from typing import Optional

ALGORITHM = "coll_tuned_allreduce_algorithm"
SEGMENT = "coll_tuned_allreduce_algorithm_segmentsize"
DYNAMIC = "coll_tuned_use_dynamic_rules"

_lib = None
_started = False


def _library():
    """The loaded MPI library with MPI_T started, or None."""
    global _lib, _started
    if _started:
        return _lib
    _started = True
    importlib.import_module("mpi4py.MPI")       # loads (and initialises) the MPI library
    name = ctypes.util.find_library("mpi")
    try:
        lib = ctypes.CDLL(name or "libmpi.so", mode=ctypes.RTLD_GLOBAL)
        provided = ctypes.c_int()
        if lib.MPI_T_init_thread(3, ctypes.byref(provided)) != 0:     # MPI_THREAD_MULTIPLE
            return None
    except (OSError, AttributeError):
        return None
    _lib = lib
    return lib


def _handle(lib, name: str):
    idx = ctypes.c_int()
    if lib.MPI_T_cvar_get_index(name.encode(), ctypes.byref(idx)) != 0:
        return None
    handle, count = ctypes.c_void_p(), ctypes.c_int()
    if lib.MPI_T_cvar_handle_alloc(idx, None, ctypes.byref(handle), ctypes.byref(count)) != 0:
        return None
    return handle


def read(name: str) -> Optional[int]:
    """The integer control variable ``name`` as the library holds it now, or None."""
    lib = _library()
    handle = _handle(lib, name) if lib is not None else None
    if handle is None:
        return None
    value = ctypes.c_int()
    ok = lib.MPI_T_cvar_read(handle, ctypes.byref(value)) == 0
    lib.MPI_T_cvar_handle_free(ctypes.byref(handle))
    return value.value if ok else None


def write(name: str, value: int) -> bool:
    """Set the integer control variable ``name``; False where the library refuses (unknown, or
    settable only at start-up)."""
    lib = _library()
    handle = _handle(lib, name) if lib is not None else None
    if handle is None:
        return False
    ok = lib.MPI_T_cvar_write(handle, ctypes.byref(ctypes.c_int(int(value)))) == 0
    lib.MPI_T_cvar_handle_free(ctypes.byref(handle))
    return ok and read(name) == int(value)


def in_force() -> dict:
    """What the library's allreduce runs with now: the dynamic-rules switch, the forced algorithm
    and its segment size (each None where the library has no such variable)."""
    return {"dynamic_rules": read(DYNAMIC), "algorithm": read(ALGORITHM),
            "segment_bytes": read(SEGMENT)}
