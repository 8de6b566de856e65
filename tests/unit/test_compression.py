"""The codecs: wire sizes, and the error of one rounding within the documented bound."""
import numpy as np
import pytest

from hpcdl.comm import compression as C
from hpcdl.comm import COMPRESSIONS, BACKENDS


def _data(n, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    # mixed magnitudes, so that per-chunk scales differ and fp16 sees small and large values
    return (rng.standard_normal(n) * scale * np.exp(rng.uniform(-4, 4, n))).astype(np.float32)


def test_names_are_the_contract_train_validates_against():
    assert BACKENDS == ("horovod", "mpi", "ring", "ps")
    assert COMPRESSIONS == ("none", "fp16", "int8")


@pytest.mark.parametrize("n", [1, 7, 255, 256, 257, 1001, 70001])
def test_none_is_exact(n):
    x = _data(n)
    assert np.array_equal(C.get_codec("none").roundtrip(x), x)


@pytest.mark.parametrize("n", [1, 7, 1001, 70001])
def test_fp16_sends_half_the_bytes_within_unit_roundoff(n):
    codec = C.get_codec("fp16")
    x = _data(n, scale=0.01)
    wire = codec.encode(x)
    assert wire.nbytes == codec.wire_nbytes(n) == 2 * n
    err = np.abs(codec.decode(wire, n).astype(np.float64) - x)
    assert np.all(err <= codec.bound(x))
    # the bound is tight enough to mean something: most values do round
    assert np.count_nonzero(err) > n // 2


@pytest.mark.parametrize("n", [1, 7, 255, 256, 257, 1001, 70001])
def test_int8_one_scale_per_chunk_error_below_half_a_step(n):
    codec = C.get_codec("int8")
    x = _data(n, seed=n)
    wire = codec.encode(x)
    chunks = -(-n // C.CHUNK)
    assert wire.nbytes == codec.wire_nbytes(n) == n + 4 * chunks
    back = codec.decode(wire, n)
    err = np.abs(back.astype(np.float64) - x)
    bound = codec.bound(x)
    assert np.all(err <= bound)
    # per chunk, not global: the bound of each chunk is its own max / 254
    for c in range(chunks):
        part = x[c * C.CHUNK:(c + 1) * C.CHUNK]
        assert bound[c * C.CHUNK] == pytest.approx(np.abs(part).max() / 254, rel=1e-3)
    # the largest element of each chunk survives exactly up to float32 rounding
    i = int(np.argmax(np.abs(x)))
    assert back[i] == pytest.approx(x[i], rel=1e-6)


def test_int8_zero_chunk_and_decode_add():
    codec = C.get_codec("int8")
    x = np.zeros(600, np.float32)
    x[300:] = np.linspace(-3, 3, 300, dtype=np.float32)
    back = codec.roundtrip(x)
    assert np.all(back[:256] == 0) and np.all(np.isfinite(back))
    acc = np.ones(600, np.float32)
    codec.decode_add(codec.encode(x), 600, acc)
    assert np.allclose(acc, 1 + back)


def test_fp16_decode_add_adds_in_float32():
    codec = C.get_codec("fp16")
    acc = np.full(5, 1e4, np.float32)
    codec.decode_add(codec.encode(np.full(5, 0.5, np.float32)), 5, acc)
    assert np.all(acc == np.float32(10000.5))   # a float16 sum would round to 10000


def test_unknown_codec_is_refused():
    with pytest.raises(ValueError, match="int4"):
        C.get_codec("int4")


def test_bench_tolerance_counts_an_error_beyond_the_bound():
    from hpcdl import bench
    p = 3
    xs = [bench._data(np, 0, 5000, r, 0).astype(np.float64) for r in range(p)]
    exact = sum(xs) / p
    abs_sum = sum(np.abs(x) for x in xs)
    for comp in COMPRESSIONS:
        tol = bench._tolerance(np, comp, abs_sum, float(p), p)
        assert np.all(tol > 0)
    tol = bench._tolerance(np, "none", abs_sum, float(p), p)
    assert np.all(np.abs(exact.astype(np.float32) - exact) <= tol)
    assert not np.any(np.abs((exact + 1e-3) - exact) <= tol)
