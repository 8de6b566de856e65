"""Shard data across ranks so that every global batch is the same whatever the rank count.

The order of samples is a pure function of (seed, epoch): every rank computes the same
permutation, takes its contiguous slice of each global batch, and so sees a shard disjoint from
the others'. Step ``t`` of ``p`` ranks at per-rank batch ``b`` uses exactly the samples that step
``t`` of one rank at batch ``p*b`` uses, which is what makes runs at different rank counts
comparable, and makes the data position of a checkpoint just the step number.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UserError


class ShardError(UserError, ValueError):
    """The data cannot be split across the ranks as asked."""


@dataclass(frozen=True)
class Sharder:
    num_samples: int
    batch_size: int          # per rank
    rank: int = 0
    size: int = 1
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self):
        if self.batch_size <= 0:
            raise ShardError(f"batch size must be positive, got {self.batch_size}")
        if self.size <= 0 or not 0 <= self.rank < self.size:
            raise ShardError(f"bad rank {self.rank} of {self.size}")
        if self.num_samples < self.global_batch:
            raise ShardError(
                f"{self.num_samples} samples cannot fill one global batch of {self.global_batch} "
                f"({self.size} rank(s) x {self.batch_size}); use fewer ranks or a smaller --batch-size")

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.size

    @property
    def steps_per_epoch(self) -> int:
        return self.num_samples // self.global_batch

    def epoch_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_samples)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)

    def global_indices(self, step: int) -> np.ndarray:
        """The indices of the whole global batch at ``step`` (the same on every rank)."""
        epoch, pos = divmod(step, self.steps_per_epoch)
        start = pos * self.global_batch
        return self.epoch_order(epoch)[start:start + self.global_batch]

    def indices(self, step: int) -> np.ndarray:
        """This rank's part of the global batch at ``step``."""
        g = self.global_indices(step)
        return g[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]

    def epoch_shard(self, epoch: int) -> np.ndarray:
        """Every index this rank sees during ``epoch``."""
        base = epoch * self.steps_per_epoch
        return np.concatenate([self.indices(base + s) for s in range(self.steps_per_epoch)])


def even_split(n: int, rank: int, size: int) -> slice:
    """A contiguous slice of ``n`` items for ``rank`` (the first ``n % size`` ranks get one more)."""
    q, r = divmod(n, size)
    start = rank * q + min(rank, r)
    return slice(start, start + q + (1 if rank < r else 0))
