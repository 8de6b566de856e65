"""Compress gradient buffers for the wire: fp16, and int8 with one scale per chunk.

A codec turns a float32 vector into a flat byte buffer (``encode``) and back (``decode``). The
backends apply it at every hop where data crosses a link and reduce in float32, so the error of
an exchange is the sum of the roundings along its path; the bounds below are per rounding:

- ``none``: exact (the float32 sum itself rounds as any summation does).
- ``fp16``: IEEE half precision, round to nearest even: a relative error of at most 2**-11 per
  rounded value (unit roundoff), plus 2**-25 absolute below the normal range (6.1e-5). Values
  beyond +-65504 overflow to inf, as with ``hvd.Compression.fp16``; gradients that large are a
  divergence in any case.
- ``int8``: per chunk of ``CHUNK`` elements one float32 scale ``s = max|x| / 127`` and the codes
  ``q = rint(x / s)``: an absolute error of at most ``s / 2 = max|x| / 254`` per element of the
  chunk. The wire holds the scales first, then the codes: ``n + 4 * ceil(n / CHUNK)`` bytes.

Everything here is numpy only.
"""
from __future__ import annotations

import time

import numpy as np

from ._native import kernels
from ..costmodel import INT8_CHUNK, wire_bytes

__all__ = ["CHUNK", "Codec", "get_codec", "FP16_UNIT_ROUNDOFF", "FP16_TINY", "INT8_LEVELS"]

CHUNK = INT8_CHUNK           # int8: elements per scale (4 bytes of scale per 256 codes: 1.6 %)
INT8_LEVELS = 127
FP16_UNIT_ROUNDOFF = 2.0 ** -11
FP16_TINY = 2.0 ** -25       # half the spacing of fp16 subnormals


class Codec:
    """The identity: float32 on the wire."""

    name = "none"
    itemsize = 4

    def wire_nbytes(self, n: int) -> int:
        """Bytes on the wire for ``n`` float32 elements (:func:`hpcdl.costmodel.wire_bytes`)."""
        return wire_bytes(n, self.name)

    def encode(self, x: np.ndarray, out=None) -> np.ndarray:
        """The wire bytes of ``x`` (here a view of it: ``out`` is not needed)."""
        return np.ascontiguousarray(x, dtype=np.float32).view(np.uint8)

    def decode(self, buf: np.ndarray, n: int, out=None) -> np.ndarray:
        vals = np.frombuffer(buf, dtype=np.float32, count=n)
        if out is None:
            return vals.copy()
        out[...] = vals
        return out

    def decode_add(self, buf: np.ndarray, n: int, acc: np.ndarray) -> None:
        """``acc += decode(buf)`` without a temporary where the format allows."""
        acc += np.frombuffer(buf, dtype=np.float32, count=n)

    def _add(self, buf, n, acc, base):
        """``acc = base + decode(buf)``, or ``acc += decode(buf)`` when ``base`` is None."""
        if base is not None:
            acc[...] = base
        self.decode_add(buf, n, acc)

    def decode_add_encode(self, buf, n, acc, out=None, base=None):
        """``acc = base + decode(buf)`` (``acc += ...`` without ``base``), then the encoding of the
        new ``acc``: one fused pass where the codec has one."""
        self._add(buf, n, acc, base)
        return self.encode(acc, out=out)

    def decode_add_average_encode(self, buf, n, acc, p, out=None, base=None):
        """``acc = (base + decode(buf)) / p`` (``acc`` for ``base`` without it), encoded (into
        ``out`` when given), leaving in ``acc`` the decoded value of those bytes: the ring's last
        reduce-scatter hop, which finishes and averages this rank's own segment."""
        self._add(buf, n, acc, base)
        acc /= np.float32(p)
        wire = self.encode(acc, out=out)
        self.decode(wire, acc.size, out=acc)
        return wire

    def roundtrip(self, x: np.ndarray) -> np.ndarray:
        """What a value looks like after one trip over the wire."""
        return self.decode(self.encode(x), x.size)

    def bound(self, x: np.ndarray) -> np.ndarray:
        """Largest absolute error of one rounding of ``x``, element by element."""
        return np.zeros(x.shape, dtype=np.float64)


class FP16(Codec):
    """IEEE half precision on the wire (half the bytes).

    The conversions run in the F16C kernels of :mod:`._native` when they are built (memory
    speed) and in numpy otherwise; both round to nearest even, bit for bit alike.
    """

    name = "fp16"
    itemsize = 2

    def __init__(self, native=None):
        self.native = kernels() if native is None else (kernels() if native else None)

    def encode(self, x, out=None):
        x = np.ascontiguousarray(x, dtype=np.float32)
        buf = np.empty(2 * x.size, dtype=np.uint8) if out is None else out
        if self.native is not None:
            self.native.encode(x, buf)
        else:
            buf.view(np.float16)[...] = x          # astype(float16): same rounding
        return buf

    def decode(self, buf, n, out=None, scale=None):
        """The float32 values of ``buf``; times ``scale`` (a float32 multiply) when given."""
        if self.native is not None:
            buf = np.ascontiguousarray(buf)
            if buf.nbytes < 2 * n:
                raise ValueError(f"fp16 payload of {buf.nbytes} B holds fewer than {n} values")
            if out is None:
                out = np.empty(n, dtype=np.float32)
            self.native.decode(buf, out, n, scale)
            return out
        vals = np.frombuffer(buf, dtype=np.float16, count=n)
        if out is None:
            out = vals.astype(np.float32)
        else:
            out[...] = vals
        if scale is not None:
            out *= np.float32(scale)
        return out

    def decode_add(self, buf, n, acc):
        if self.native is not None and acc.flags.c_contiguous and np.asarray(buf).nbytes >= 2 * n:
            self.native.add(np.ascontiguousarray(buf), acc, n)
            return
        self._add(buf, n, acc, None)

    def _add(self, buf, n, acc, base):
        """numpy: ``acc = base + decode(buf)`` in one float32 add (``base`` may be ``acc``)."""
        np.add(acc if base is None else base, np.frombuffer(buf, dtype=np.float16, count=n),
               out=acc, dtype=np.float32, casting="unsafe")

    def decode_add_encode(self, buf, n, acc, out, base=None):
        """``acc = base + decode(buf)`` (or ``acc += ...``), then ``out = encode(acc)``: one pass
        with the kernels."""
        base = acc if base is None else base
        if self.native is not None and acc.flags.c_contiguous and base.flags.c_contiguous:
            self.native.add_encode(np.ascontiguousarray(buf), base, acc, out, n)
            return out
        self._add(buf, n, acc, base)
        return self.encode(acc, out)

    def decode_add_average_encode(self, buf, n, acc, p, out=None, base=None):
        """``acc = (base + decode(buf)) * (1/p)`` (float32 add, then multiply), encoded into
        ``out``, and ``acc`` = the decoded value of those bytes: one pass with the kernels."""
        base = acc if base is None else base
        wire = np.empty(2 * acc.size, dtype=np.uint8) if out is None else out
        if self.native is not None and acc.flags.c_contiguous and base.flags.c_contiguous:
            self.native.add_scale_roundtrip(np.ascontiguousarray(buf), base, acc, wire, n,
                                            1.0 / p)
            return wire
        self._add(buf, n, acc, base)
        acc *= np.float32(1.0 / p)         # a multiply, as the kernel does (not a division)
        self.encode(acc, wire)
        self.decode(wire, acc.size, out=acc)
        return wire

    def sum_halves(self, inbuf, inoutbuf, n):
        """``inout = half(float(inout) + float(in))``: one rounding, as a half-precision add."""
        if self.native is not None:
            self.native.sum16(inbuf, inoutbuf, n)
            return
        acc = np.frombuffer(inoutbuf, dtype=np.float16, count=n)
        np.add(acc, np.frombuffer(inbuf, dtype=np.float16, count=n), out=acc, dtype=np.float32,
               casting="unsafe")

    def bound(self, x):
        return np.abs(np.asarray(x, dtype=np.float64)) * FP16_UNIT_ROUNDOFF + FP16_TINY


class Int8(Codec):
    """int8 codes with one float32 scale per ``CHUNK`` elements (about a quarter of the bytes)."""

    name = "int8"
    itemsize = 1

    def __init__(self, block_chunks: int = 256):
        self.chunk = CHUNK
        self.block = CHUNK * block_chunks     # elements per pass of encode / decode_add
        self._scratch = np.empty(0, dtype=np.float32)

    def _nchunks(self, n):
        return -(-n // self.chunk)

    def _absmax(self, x):
        full = (x.size // self.chunk) * self.chunk
        m = np.empty(self._nchunks(x.size), dtype=np.float32)
        tmp = self._tmp(min(full, self.block))
        for s in range(0, full, self.block):
            e = min(full, s + self.block)
            t = np.abs(x[s:e], out=tmp[:e - s])
            t.reshape(-1, self.chunk).max(axis=1, out=m[s // self.chunk:e // self.chunk])
        if full < x.size:
            m[-1] = np.abs(x[full:]).max()
        return m

    def _tmp(self, n):
        """A reused float32 block (per codec; a codec belongs to one backend and one thread)."""
        if self._scratch.size < n:
            self._scratch = np.empty(n, dtype=np.float32)
        return self._scratch[:n]

    def encode(self, x, out=None):
        """Scales then codes; into ``out`` (uint8, at least ``wire_nbytes``) when given.

        Works in blocks of ``block`` elements (whole chunks, 256 KiB of float32) through one
        reused temporary: the same element-wise float32 operations, so the same bytes, as the
        whole-vector form, without a fresh n-element temporary per call (above 32 MiB each one
        was mapped and page-faulted afresh, and int8's time grew faster than its size).
        """
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        n = x.size
        k = self._nchunks(n)
        if out is None:
            buf = np.empty(4 * k + n, dtype=np.uint8)
        else:
            if out.size < 4 * k + n:
                raise ValueError(f"int8 encode: out holds {out.size} bytes, needs {4 * k + n}")
            buf = out[:4 * k + n]
        scales = buf[:4 * k].view(np.float32)
        codes = buf[4 * k:].view(np.int8)
        if n == 0:
            return buf
        absmax = self._absmax(x)
        np.divide(absmax, np.float32(INT8_LEVELS), out=scales)
        inv = np.zeros_like(absmax)
        np.divide(np.float32(INT8_LEVELS), absmax, out=inv, where=absmax > 0)
        c, tmp = self.chunk, self._tmp(min(n, self.block))
        for s in range(0, n, self.block):
            e = min(n, s + self.block)
            full = s + ((e - s) // c) * c      # only the last block can end in a partial chunk
            t = tmp[:e - s]
            if full > s:
                np.multiply(x[s:full].reshape(-1, c), inv[s // c:full // c, None],
                            out=t[:full - s].reshape(-1, c))
            if full < e:
                np.multiply(x[full:e], inv[-1], out=t[full - s:])
            np.rint(t, out=t)
            codes[s:e] = t                     # |q| <= 127 after rounding, so the cast is exact
        return buf

    def _split(self, buf, n):
        k = self._nchunks(n)
        return (np.frombuffer(buf, dtype=np.float32, count=k),
                np.frombuffer(buf, dtype=np.int8, count=n, offset=4 * k))

    def _decode_into(self, scales, codes, s, e, out):
        """Decode elements [s, e) (s a chunk boundary) into ``out`` (e - s float32)."""
        c = self.chunk
        full = s + ((e - s) // c) * c
        if full > s:
            np.multiply(codes[s:full].reshape(-1, c), scales[s // c:full // c, None],
                        out=out[:full - s].reshape(-1, c), dtype=np.float32)
        if full < e:
            np.multiply(codes[full:e], scales[-1], out=out[full - s:], dtype=np.float32)

    def decode(self, buf, n, out=None):
        if out is None:
            out = np.empty(n, dtype=np.float32)
        scales, codes = self._split(buf, n)
        self._decode_into(scales, codes, 0, n, out)
        return out

    def decode_add(self, buf, n, acc, base=None):
        """``acc += decode(buf)`` (``acc = base + ...`` with ``base``) a block at a time through
        one reused temporary."""
        scales, codes = self._split(buf, n)
        tmp = self._tmp(min(n, self.block))
        base = acc if base is None else base
        for s in range(0, n, self.block):
            e = min(n, s + self.block)
            t = tmp[:e - s]
            self._decode_into(scales, codes, s, e, t)
            np.add(base[s:e], t, out=acc[s:e])

    def _add(self, buf, n, acc, base):
        self.decode_add(buf, n, acc, base=base)

    def bound(self, x):
        x = np.asarray(x, dtype=np.float32)
        per_chunk = self._absmax(x).astype(np.float64) / (2 * INT8_LEVELS) if x.size else np.zeros(0)
        # The scale, its inverse and the decoded product are float32 roundings too: a few units of
        # 2**-24 of max|x|, i.e. a relative 254 * 4 * 2**-24 < 2**-12 on top of the half step.
        return np.repeat(per_chunk, self.chunk)[:x.size] * (1 + 2.0 ** -12) + 1e-45


_CODECS = {"none": Codec, "fp16": FP16, "int8": Int8}


def get_codec(name: str) -> Codec:
    try:
        return _CODECS[name]()
    except KeyError:
        raise ValueError(f"unknown compression '{name}': choose one of {', '.join(_CODECS)}") from None


def speed(n: int = 1 << 24, reps: int = 5) -> None:
    """Print GB/s (float32 bytes) of fp16 encode, decode and decode-add: F16C against numpy
    (``python -m hpcdl.comm.compression``)."""
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    for label, codec in (("F16C", FP16(native=True)), ("numpy", FP16(native=False))):
        if label == "F16C" and codec.native is None:
            continue
        wire, out, acc = np.empty(2 * n, np.uint8), np.empty(n, np.float32), x.copy()
        ops = {"encode": lambda: codec.encode(x, wire), "decode": lambda: codec.decode(wire, n, out),
               "decode-add": lambda: codec.decode_add(wire, n, acc)}
        rates = []
        for name, fn in ops.items():
            fn()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            rates.append(f"{name} {x.nbytes * reps / (time.perf_counter() - t0) / 1e9:.1f}")
        print(f"{label:>6}: " + ", ".join(rates) + f" GB/s ({n} float32)")


if __name__ == "__main__":
    speed()
