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

The input is only read, and the result is a new array; the receive and wire buffers are the
backend's own, allocated once for the largest call so far and reused.
"""
from __future__ import annotations


import numpy as np

from . import _as_f32
from .compression import CHUNK
from .mpi import MPIBackend
from .. import cluster

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
        piece_bytes = piece_bytes or int(cluster.setting("HPCDL_RING_PIECE_BYTES") or PIECE_BYTES)
        # whole int8 chunks per piece, so a piece's scales cover exactly its own elements
        self.piece = max(CHUNK, (piece_bytes // 4) // CHUNK * CHUNK)
        self.right = (self.rank + 1) % self.size
        self.left = (self.rank - 1) % self.size

    def allreduce_mean(self, flat):
        flat = _as_f32(flat)
        p = self.size
        if p == 1:
            return flat.copy()
        # Every element of acc is written before it is read: the reduce-scatter's first touch of
        # a segment is ``flat + received`` and the allgather receives the rest, so the input is
        # not copied into it up front (which would be a whole pass through memory).
        acc = np.empty_like(flat)
        segs = segments(flat.size, p)
        if self.compression == "none":
            self._reduce_scatter_plain(flat, acc, segs)
            self._allgather_plain(acc, segs)
        else:
            wires, key = self._reduce_scatter_coded(flat, acc, segs)
            self._allgather_coded(acc, segs, wires, key)
        return acc

    def _wire_bufs(self, key, pieces, segs):
        """One wire buffer per piece, views into the backend's reused buffer ``key``.

        Each is sized for the longest segment, so it is allocated once: fresh buffers per piece
        and step were page-faulted in again on every call once glibc handed them back (over twice
        as long at 256 MiB, ``results/bench/ring-ps-buffers.txt``).
        """
        size = self.codec.wire_nbytes
        # segs[0] is a longest segment (the first n % p are the longer ones)
        cap = sum(size(y - x) for x, y in _pieces(*segs[0], self.piece))
        buf = self._scratch(key, cap)
        views, off = [], 0
        for x, y in pieces:
            views.append(buf[off:off + size(y - x)])
            off += size(y - x)
        return views

    # --- float32 on the wire ------------------------------------------------------------------

    def _reduce_scatter_plain(self, flat, acc, segs):
        p, r, comm = self.size, self.rank, self.comm
        longest = max(b - a for a, b in segs)
        tmp = self._scratch("wire-in", 4 * longest).view(np.float32)   # reused, like the wires
        for k in range(p - 1):
            sa, sb = segs[(r - k) % p]
            ta, tb = segs[(r - k - 1) % p]
            recv = [(x, y, comm.Irecv(tmp[x - ta:y - ta], source=self.left, tag=j))
                    for j, (x, y) in enumerate(_pieces(ta, tb, self.piece))]
            src = flat if k == 0 else acc    # step 0 sends this rank's own input segment
            sends = [comm.Isend(src[x:y], dest=self.right, tag=j)
                     for j, (x, y) in enumerate(_pieces(sa, sb, self.piece))]
            last = k == p - 2     # the last step finishes this rank's own segment
            for x, y, req in recv:
                req.Wait()
                np.add(flat[x:y], tmp[x - ta:y - ta], out=acc[x:y])
                if last:          # average the piece while it is still in cache
                    acc[x:y] /= np.float32(p)
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

    def _reduce_scatter_coded(self, flat, acc, segs):
        p, r, comm, codec = self.size, self.rank, self.comm, self.codec
        # Three reused sets of wire buffers: the pieces arriving, the ones in flight to the
        # right, and the next step's, which swap with the ones in flight once those have gone.
        sending, encoding = "wire-a", "wire-b"
        wires = None          # step 0 encodes this rank's own segment piece by piece below
        for k in range(p - 1):
            ta, tb = segs[(r - k - 1) % p]
            tpieces = _pieces(ta, tb, self.piece)
            bufs = self._wire_bufs("wire-in", tpieces, segs)
            recv = [comm.Irecv(buf, source=self.left, tag=j) for j, buf in enumerate(bufs)]
            if wires is None:     # encode a piece, send it, encode the next while it travels
                spieces = _pieces(*segs[r], self.piece)
                sends = [comm.Isend(codec.encode(flat[x:y], out=w), dest=self.right, tag=j)
                         for j, ((x, y), w) in enumerate(
                             zip(spieces, self._wire_bufs(sending, spieces, segs)))]
            else:
                sends = [comm.Isend(w, dest=self.right, tag=j) for j, w in enumerate(wires)]
            last = k == p - 2
            # the pieces in flight are in ``sending``: the new ones go into the other set
            outs = self._wire_bufs(encoding, tpieces, segs)
            nxt = []
            for j, ((x, y), buf, req) in enumerate(zip(tpieces, bufs, recv)):
                req.Wait()
                # acc = this rank's input + what came from the left, encoded in the same pass
                if last:          # this rank's own segment, now complete: average it too
                    nxt.append(codec.decode_add_average_encode(buf, y - x, acc[x:y], p, outs[j],
                                                               base=flat[x:y]))
                else:             # the running sum goes right at the next step
                    nxt.append(codec.decode_add_encode(buf, y - x, acc[x:y], outs[j],
                                                       base=flat[x:y]))
            self.MPI.Request.Waitall(sends)
            wires = nxt
            sending, encoding = encoding, sending
        return wires, sending     # after the swap, ``sending`` names the set the wires are in

    def _allgather_coded(self, acc, segs, wires, key):
        p, r, comm, codec = self.size, self.rank, self.comm, self.codec
        other = {"wire-a": "wire-b", "wire-b": "wire-a"}
        for k in range(p - 1):
            ta, tb = segs[(r - k) % p]
            tpieces = _pieces(ta, tb, self.piece)
            # step k sends what step k-1 received (its own segment's bytes at step 0, in the set
            # ``key``) and receives into the other reused set: the two alternate
            key = other[key]
            bufs = self._wire_bufs(key, tpieces, segs)
            reqs = [comm.Irecv(buf, source=self.left, tag=j) for j, buf in enumerate(bufs)]
            reqs += [comm.Isend(w, dest=self.right, tag=j) for j, w in enumerate(wires)]
            self.MPI.Request.Waitall(reqs)
            wires = bufs
            for (x, y), buf in zip(tpieces, bufs):
                codec.decode(buf, y - x, out=acc[x:y])


def make(compression="none"):
    return RingBackend(compression)
