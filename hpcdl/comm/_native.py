"""Build and load the F16C float32<->float16 kernels (``_f16.c``); numpy stays the fallback.

``python -m hpcdl.comm._native`` compiles ``_f16.c`` with the system C compiler into ``_f16.so``
beside it (``scripts/setup.sh`` runs it). :func:`kernels` returns the loaded library's wrappers,
or None when the library is absent, does not load, was built from older source (``ABI``), the
CPU lacks F16C, or ``HPCDL_NATIVE=0``;
callers then use numpy, which gives the same bits, only slower.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from .. import cluster

SOURCE = Path(__file__).with_name("_f16.c")
LIBRARY = Path(__file__).with_name("_f16.so")
ABI = 2                       # hpcdl_f16_abi() of the library these wrappers are written for

_loaded = False
_kernels = None


def _up_to_date() -> bool:
    """The library is there and not older than its source."""
    return LIBRARY.is_file() and LIBRARY.stat().st_mtime >= SOURCE.stat().st_mtime


def build(cc: str | None = None, quiet: bool = False) -> bool:
    """Compile the library unless it is newer than its source; True when it is there.

    A failure leaves numpy in charge and is not an error.
    """
    if _up_to_date():
        return True
    cc = cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        if not quiet:
            print("hpcdl: no C compiler found; fp16 conversion stays in numpy", file=sys.stderr)
        return False
    tmp = LIBRARY.with_name(f".{LIBRARY.name}.{os.getpid()}")
    cmd = [cc, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(SOURCE)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        res = None
        err = str(exc)
    else:
        err = res.stderr.strip()
    if res is None or res.returncode != 0:
        tmp.unlink(missing_ok=True)
        if not quiet:
            print(f"hpcdl: could not build {LIBRARY.name} ({' '.join(cmd)}): "
                  f"{err.splitlines()[-1] if err else 'failed'}; fp16 conversion stays in numpy",
                  file=sys.stderr)
        return False
    os.replace(tmp, LIBRARY)          # atomic: ranks that load it meanwhile see old or new
    return True


class _Kernels:
    """numpy-array wrappers of the C functions (contiguous arrays of the right dtype only)."""

    def __init__(self, lib):
        sz, vp = ctypes.c_size_t, ctypes.c_void_p
        for name, nargs in (("hpcdl_f32_to_f16", 2), ("hpcdl_f16_to_f32", 2),
                            ("hpcdl_f16_add_f32", 2), ("hpcdl_f16_sum_f16", 2),
                            ("hpcdl_f16_add_encode", 4)):
            fn = getattr(lib, name)
            fn.argtypes = [vp] * nargs + [sz]
            fn.restype = None
        lib.hpcdl_f16_to_f32_scaled.argtypes = [vp, vp, sz, ctypes.c_float]
        lib.hpcdl_f16_to_f32_scaled.restype = None
        lib.hpcdl_f16_add_scale_roundtrip.argtypes = [vp, vp, vp, vp, sz, ctypes.c_float]
        lib.hpcdl_f16_add_scale_roundtrip.restype = None
        self._lib = lib

    @staticmethod
    def _ptr(a, dtype):
        if a.dtype != dtype or not a.flags.c_contiguous:
            raise TypeError(f"need a contiguous {np.dtype(dtype)} array, got {a.dtype}")
        return a.ctypes.data

    def encode(self, src, dst):
        """dst (uint16/float16) = half(src (float32))"""
        self._lib.hpcdl_f32_to_f16(self._ptr(src, np.float32), dst.ctypes.data, src.size)

    def decode(self, src, dst, n, scale=None):
        """dst (float32) = float(src (half)), times ``scale`` when given"""
        if scale is None:
            self._lib.hpcdl_f16_to_f32(src.ctypes.data, self._ptr(dst, np.float32), n)
        else:
            self._lib.hpcdl_f16_to_f32_scaled(src.ctypes.data, self._ptr(dst, np.float32), n, scale)

    def add_scale_roundtrip(self, src, base, acc, dst, n, scale):
        """dst (half) = half((base + float(src)) * scale); acc = float(dst)"""
        self._lib.hpcdl_f16_add_scale_roundtrip(src.ctypes.data, self._ptr(base, np.float32),
                                                self._ptr(acc, np.float32), dst.ctypes.data, n,
                                                scale)

    def add(self, src, acc, n):
        """acc (float32) += float(src (half))"""
        self._lib.hpcdl_f16_add_f32(src.ctypes.data, self._ptr(acc, np.float32), n)

    def sum16(self, src, inout, n):
        """inout (half) = half(float(inout) + float(src))"""
        self._lib.hpcdl_f16_sum_f16(src.ctypes.data, inout.ctypes.data, n)

    def add_encode(self, src, base, acc, dst, n):
        """acc = base + float(src); dst = half(acc)  (base may be acc)"""
        self._lib.hpcdl_f16_add_encode(src.ctypes.data, self._ptr(base, np.float32),
                                       self._ptr(acc, np.float32), dst.ctypes.data, n)


def _agrees(k) -> bool:
    """The library rounds as numpy does, on normals, subnormals, ties, overflow and tails."""
    x = np.concatenate([np.linspace(-70000, 70000, 1001, dtype=np.float32),
                        np.float32([1 + 2 ** -11, 1 + 3 * 2 ** -11, 2 ** -25, 3 * 2 ** -26,
                                    6.1e-5, -0.0, 65519.0, 65520.0])]).astype(np.float32)
    h = np.empty(x.size, np.uint16)
    k.encode(x, h)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    if not np.array_equal(h, want):
        return False
    back = np.empty(x.size, np.float32)
    k.decode(h, back, x.size)
    return np.array_equal(back, h.view(np.float16).astype(np.float32), equal_nan=True)


def kernels():
    """The loaded kernels, or None (then use numpy)."""
    global _loaded, _kernels
    if _loaded:
        return _kernels
    _loaded = True
    if cluster.setting("HPCDL_NATIVE") == "0" or not LIBRARY.is_file():
        return None
    try:
        lib = ctypes.CDLL(str(LIBRARY))
        lib.hpcdl_f16c_supported.restype = ctypes.c_int
        lib.hpcdl_f16_abi.restype = ctypes.c_int
        if lib.hpcdl_f16_abi() != ABI or not lib.hpcdl_f16c_supported():
            return None           # older source (scripts/setup.sh rebuilds it), or no F16C
        k = _Kernels(lib)
    except (OSError, AttributeError):
        return None
    _kernels = k if _agrees(k) else None
    return _kernels


def main() -> int:
    """Build the library where it is missing or older than its source, and say what is in use
    (scripts/setup.sh runs it on every set-up)."""
    fresh = _up_to_date()
    if build():
        usable = kernels() is not None
        print(f"hpcdl: {LIBRARY} {'up to date' if fresh else 'built'} "
              f"({'F16C in use' if usable else 'not usable here: numpy fallback'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
