"""Sharding: disjoint shards that cover the data, and the same global batch at any rank count."""
import numpy as np
import pytest

from hpcdl.train.data import ShardError, Sharder, even_split


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_shards_are_disjoint_and_cover_the_epoch(size):
    n, b = 1000, 25
    shards = [Sharder(n, b, r, size, seed=7).epoch_shard(0) for r in range(size)]
    for i in range(size):
        for j in range(i + 1, size):
            assert not set(shards[i]) & set(shards[j])
    covered = np.concatenate(shards)
    steps = n // (b * size)
    assert len(covered) == len(set(covered)) == steps * b * size
    # Only the remainder that does not fill a global batch is left out of the epoch.
    assert n - len(covered) < b * size


@pytest.mark.parametrize("size", [2, 4])
def test_global_batch_is_the_same_for_any_rank_count(size):
    one = Sharder(1000, 100, 0, 1, seed=3)
    for step in (0, 5, 9, 10, 23):          # crosses epoch boundaries (10 steps per epoch)
        parts = [Sharder(1000, 100 // size, r, size, seed=3).indices(step) for r in range(size)]
        assert np.array_equal(np.concatenate(parts), one.indices(step))


def test_epochs_are_reshuffled_deterministically():
    s = Sharder(100, 10, 0, 1, seed=1)
    assert not np.array_equal(s.epoch_order(0), s.epoch_order(1))
    assert np.array_equal(s.epoch_order(1), Sharder(100, 10, 0, 1, seed=1).epoch_order(1))


def test_too_many_ranks_for_the_data_is_a_clear_error():
    with pytest.raises(ShardError, match="cannot fill one global batch"):
        Sharder(100, 30, 0, 4)
    with pytest.raises(ShardError, match="must be positive"):
        Sharder(100, 0, 0, 1)


def test_even_split_covers_every_item_once():
    n, size = 10, 3
    parts = [list(range(10))[even_split(n, r, size)] for r in range(size)]
    assert parts == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
