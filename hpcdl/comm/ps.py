"""Average buffers through a synchronous parameter server at rank 0 (the seeds' baseline).

Every rank sends its whole buffer to rank 0; rank 0 adds them in rank order as they arrive,
divides by p and sends the result back to each rank, one message per rank: all p-1 messages
each way cross the root's link, so at large n the ps takes about p times as long as a ring
(:mod:`hpcdl.costmodel` models both). With compression, each rank sends
its encoded buffer, the root decodes and adds in float32, encodes the mean once and every rank,
the root included, takes the decoded value of those bytes.
"""
from __future__ import annotations

import numpy as np

from . import _as_f32
from .mpi import MPIBackend

ROOT = 0
_TAG_UP, _TAG_DOWN = 11, 12


class PSBackend(MPIBackend):
    name = "ps"

    def allreduce_mean(self, flat):
        flat = _as_f32(flat)
        p, n, codec, comm = self.size, flat.size, self.codec, self.comm
        if p == 1:
            return flat.copy()
        plain = self.compression == "none"
        nbytes = codec.wire_nbytes(n)
        # Buffers that never reach the caller (the root's receive buffers, encoded payloads) are
        # the backend's own and reused; the result is a new array.
        if self.rank != ROOT:
            result = np.empty(n, dtype=np.float32) if plain else self._scratch("down", nbytes)
            down = comm.Irecv(result, source=ROOT, tag=_TAG_DOWN)
            comm.Send(flat if plain else codec.encode(flat, out=self._scratch("up", nbytes)),
                      dest=ROOT, tag=_TAG_UP)
            down.Wait()
            return result if plain else codec.decode(result, n)
        gathered = self._scratch("up", (p - 1) * nbytes).reshape(p - 1, nbytes)
        bufs = [row.view(np.float32) if plain else row for row in gathered]
        ups = [comm.Irecv(buf, source=src, tag=_TAG_UP) for src, buf in zip(range(1, p), bufs)]
        acc = np.empty_like(flat)
        for i, (buf, req) in enumerate(zip(bufs, ups)):
            req.Wait()
            if plain:
                np.add(flat if i == 0 else acc, buf, out=acc)   # rank order: x0 + x1 + ...
            else:
                if i == 0:
                    acc[...] = flat
                codec.decode_add(buf, n, acc)
        acc /= np.float32(p)
        out = acc if plain else codec.encode(acc, out=self._scratch("down", nbytes))
        downs = [comm.Isend(out, dest=dst, tag=_TAG_DOWN) for dst in range(1, p)]
        self.MPI.Request.Waitall(downs)
        return acc if plain else codec.decode(out, n)


def make(compression="none"):
    return PSBackend(compression)
