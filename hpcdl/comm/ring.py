"""Average buffers with a reference ring allreduce: numpy over mpi4py point-to-point.

The buffer is cut into p segments (the first ``n % p`` one element longer). In the
reduce-scatter phase, at step k = 0..p-2, rank r sends its running sum of segment (r-k) mod p to
its right neighbour and adds the segment (r-k-1) mod p coming from its left; after p-1 steps rank
r holds the full sum of segment (r+1) mod p, divides it by p, and the allgather phase passes the
finished segments once more around the ring, p-1 steps.

Each segment travels in pieces of ``piece_bytes``: all receives of a step are posted first, then
the pieces are sent, and each piece is added as soon as it has arrived while the later ones are
still on the way. With compression, every hop carries an encoded piece; the owner of a finished
segment encodes it once, keeps the decoded value itself, and the allgather forwards those bytes
unchanged, so every rank ends with the same bits.
"""
from __future__ import annotations

import os

import numpy as np

from . import _as_f32
from .compression import CHUNK
from .mpi import MPIBackend

PIECE_BYTES = 1 << 20


def segments(n: int, p: int):
    """[start, stop) of the p segments of n elements; the first n % p are one longer."""
    base, rem = divmod(n, p)
    bounds, off = [], 0
    for i in range(p):
        size = base + (1 if i < rem else 0)
        bounds.append((off, off + size))
        off += size
    return bounds


def _pieces(start, stop, piece):
    return [(a, min(a + piece, stop)) for a in range(start, stop, piece)] or [(start, start)]


class RingBackend(MPIBackend):
    name = "ring"

    def __init__(self, compression="none", comm=None, piece_bytes=None):
        super().__init__(compression, comm)
        piece_bytes = piece_bytes or int(os.environ.get("HPCDL_RING_PIECE_BYTES", PIECE_BYTES))
        # whole int8 chunks per piece, so a piece's scales cover exactly its own elements
        self.piece = max(CHUNK, (piece_bytes // 4) // CHUNK * CHUNK)
        self.right = (self.rank + 1) % self.size
        self.left = (self.rank - 1) % self.size

    def allreduce_mean(self, flat):
        flat = _as_f32(flat)
        p, r = self.size, self.rank
        if p == 1:
            return flat.copy()
        acc = flat.copy()
        segs = segments(flat.size, p)
        if self.compression == "none":
            self._reduce_scatter_plain(acc, segs)
            own = segs[(r + 1) % p]
            acc[own[0]:own[1]] /= np.float32(p)
            self._allgather_plain(acc, segs)
        else:
            self._reduce_scatter_coded(acc, segs)
            own_i = (r + 1) % p
            a, b = segs[own_i]
            wires = {own_i: [self.codec.average_encode(acc[x:y], p)
                             for x, y in _pieces(a, b, self.piece)]}
            self._allgather_coded(acc, segs, wires)
        return acc

    # --- float32 on the wire ------------------------------------------------------------------

    def _reduce_scatter_plain(self, acc, segs):
        p, r, comm = self.size, self.rank, self.comm
        longest = max(b - a for a, b in segs)
        tmp = np.empty(longest, dtype=np.float32)
        for k in range(p - 1):
            sa, sb = segs[(r - k) % p]
            ta, tb = segs[(r - k - 1) % p]
            recv = [(x, y, comm.Irecv(tmp[x - ta:y - ta], source=self.left, tag=j))
                    for j, (x, y) in enumerate(_pieces(ta, tb, self.piece))]
            sends = [comm.Isend(acc[x:y], dest=self.right, tag=j)
                     for j, (x, y) in enumerate(_pieces(sa, sb, self.piece))]
            for x, y, req in recv:
                req.Wait()
                acc[x:y] += tmp[x - ta:y - ta]
            self.MPI.Request.Waitall(sends)

    def _allgather_plain(self, acc, segs):
        p, r, comm = self.size, self.rank, self.comm
        for k in range(p - 1):
            sa, sb = segs[(r + 1 - k) % p]
            ta, tb = segs[(r - k) % p]
            reqs = [comm.Irecv(acc[x:y], source=self.left, tag=j)
                    for j, (x, y) in enumerate(_pieces(ta, tb, self.piece))]
            reqs += [comm.Isend(acc[x:y], dest=self.right, tag=j)
                     for j, (x, y) in enumerate(_pieces(sa, sb, self.piece))]
            self.MPI.Request.Waitall(reqs)

    # --- encoded pieces on the wire -----------------------------------------------------------

    def _reduce_scatter_coded(self, acc, segs):
        p, r, comm, codec = self.size, self.rank, self.comm, self.codec
        wires = None          # step 0 encodes this rank's own segment piece by piece below
        for k in range(p - 1):
            ta, tb = segs[(r - k - 1) % p]
            tpieces = _pieces(ta, tb, self.piece)
            bufs = [np.empty(codec.wire_nbytes(y - x), dtype=np.uint8) for x, y in tpieces]
            recv = [comm.Irecv(buf, source=self.left, tag=j) for j, buf in enumerate(bufs)]
            if wires is None:     # encode a piece, send it, encode the next while it travels
                sa, sb = segs[r]
                sends = [comm.Isend(codec.encode(acc[x:y]), dest=self.right, tag=j)
                         for j, (x, y) in enumerate(_pieces(sa, sb, self.piece))]
            else:
                sends = [comm.Isend(w, dest=self.right, tag=j) for j, w in enumerate(wires)]
            last = k == p - 2
            nxt = []
            for (x, y), buf, req in zip(tpieces, bufs, recv):
                req.Wait()
                if last:          # this rank's own segment: it is averaged and encoded afterwards
                    codec.decode_add(buf, y - x, acc[x:y])
                else:             # the running sum goes right at the next step: encode it now
                    nxt.append(codec.decode_add_encode(
                        buf, y - x, acc[x:y], np.empty(codec.wire_nbytes(y - x), dtype=np.uint8)))
            self.MPI.Request.Waitall(sends)
            wires = nxt

    def _allgather_coded(self, acc, segs, wires):
        p, r, comm, codec = self.size, self.rank, self.comm, self.codec
        for k in range(p - 1):
            si = (r + 1 - k) % p
            ti = (r - k) % p
            ta, tb = segs[ti]
            tpieces = _pieces(ta, tb, self.piece)
            bufs = [np.empty(codec.wire_nbytes(y - x), dtype=np.uint8) for x, y in tpieces]
            reqs = [comm.Irecv(buf, source=self.left, tag=j) for j, buf in enumerate(bufs)]
            reqs += [comm.Isend(w, dest=self.right, tag=j) for j, w in enumerate(wires[si])]
            self.MPI.Request.Waitall(reqs)
            wires[ti] = bufs
            for (x, y), buf in zip(tpieces, bufs):
                codec.decode(buf, y - x, out=acc[x:y])


def make(compression="none"):
    return RingBackend(compression)
