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


def _int8_reference(x, chunk=C.CHUNK):
    """The whole-vector form of the int8 encoding, written out: scales, then rint(x / scale)."""
    n = x.size
    k = -(-n // chunk)
    pad = np.zeros(k * chunk, np.float32)
    pad[:n] = x
    absmax = np.abs(pad.reshape(k, chunk)).max(axis=1)
    scales = (absmax / np.float32(C.INT8_LEVELS)).astype(np.float32)
    inv = np.zeros_like(absmax)
    np.divide(np.float32(C.INT8_LEVELS), absmax, out=inv, where=absmax > 0)
    codes = np.rint(pad.reshape(k, chunk) * inv[:, None]).astype(np.int8).ravel()[:n]
    return scales.tobytes() + codes.tobytes()


@pytest.mark.parametrize("block_chunks", [1, 3, 256])
@pytest.mark.parametrize("n", [0, 1, 255, 257, 768, 1001, 70001])
def test_int8_in_blocks_gives_the_whole_vector_bytes(n, block_chunks):
    """encode / decode_add work a block of chunks at a time through one reused temporary; the
    bytes and sums must be those of the whole-vector form, whatever the block and tail."""
    codec = C.Int8(block_chunks=block_chunks)
    x = _data(n, seed=n + 1)
    x[256:512] = 0.0                               # a zero chunk where there is one
    wire = codec.encode(x)
    assert wire.tobytes() == _int8_reference(x)
    # into a caller's (larger) buffer, reused: the same bytes, no new allocation
    out = np.full(codec.wire_nbytes(n) + 5, 0xAB, np.uint8)
    again = codec.encode(x, out=out)
    assert again.tobytes() == wire.tobytes()
    if n == 0:
        return
    assert np.shares_memory(again, out)
    with pytest.raises(ValueError, match="needs"):
        codec.encode(x, out=np.empty(codec.wire_nbytes(n) - 1, np.uint8))
    acc = _data(n, seed=7)
    want = acc + C.Int8().decode(wire, n)          # float32 adds, element by element
    codec.decode_add(wire, n, acc)
    assert acc.tobytes() == want.tobytes()


def test_fp16_decode_add_adds_in_float32():
    codec = C.get_codec("fp16")
    acc = np.full(5, 1e4, np.float32)
    codec.decode_add(codec.encode(np.full(5, 0.5, np.float32)), 5, acc)
    assert np.all(acc == np.float32(10000.5))   # a float16 sum would round to 10000


def test_unknown_codec_is_refused():
    with pytest.raises(ValueError, match="int4"):
        C.get_codec("int4")


def test_bench_tolerance_counts_an_error_beyond_the_bound():
    from hpcdl.bench import allreduce as bench
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


# --- the F16C kernels against numpy ----------------------------------------------------------------

def _kernels_or_skip():
    from hpcdl.comm import _native
    k = _native.kernels()
    if k is None:
        pytest.skip("F16C kernels not built or not supported here (scripts/setup.sh builds them)")
    return k


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 17, 1000, 4099])
def test_native_fp16_gives_numpy_bits_for_every_operation(n):
    from hpcdl.comm.compression import FP16
    _kernels_or_skip()
    fast, slow = FP16(native=True), FP16(native=False)
    assert fast.native is not None and slow.native is None
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * np.exp(rng.uniform(-12, 12, n))).astype(np.float32)
    x[:min(n, 3)] = [6.0e-8, 65519.0, 1 + 2 ** -11][:min(n, 3)]       # subnormal, tie, overflow edge
    with np.errstate(over="ignore"):
        wf, ws = fast.encode(x), slow.encode(x)
    assert np.array_equal(wf, ws)
    assert np.array_equal(fast.decode(wf, n), slow.decode(ws, n), equal_nan=True)
    assert np.array_equal(fast.decode(wf, n, scale=1 / 3), slow.decode(ws, n, scale=1 / 3),
                          equal_nan=True)
    y = rng.standard_normal(n).astype(np.float32)
    accf, accs = y.copy(), y.copy()
    fast.decode_add(wf, n, accf)
    slow.decode_add(ws, n, accs)
    assert np.array_equal(accf, accs, equal_nan=True)
    accf, accs = y.copy(), y.copy()
    with np.errstate(over="ignore"):
        of = fast.decode_add_encode(wf, n, accf, np.empty(2 * n, np.uint8))
        os_ = slow.decode_add_encode(ws, n, accs, np.empty(2 * n, np.uint8))
    assert np.array_equal(accf, accs, equal_nan=True) and np.array_equal(of, os_)
    # the ring's fused hops: acc = base + decode(wire), encoded (and averaged on the last hop)
    z = rng.standard_normal(n).astype(np.float32)
    z0 = z.copy()
    for p in (2, 3):
        got = {}
        for name, codec in (("fast", fast), ("slow", slow)):
            acc1, acc2 = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
            with np.errstate(over="ignore", invalid="ignore"):
                o1 = codec.decode_add_encode(wf, n, acc1, np.empty(2 * n, np.uint8), base=z)
                o2 = codec.decode_add_average_encode(wf, n, acc2, p, np.empty(2 * n, np.uint8),
                                                     base=z)
            got[name] = (acc1, o1, acc2, o2)
        for a, b in zip(got["fast"], got["slow"]):
            assert np.array_equal(a, b, equal_nan=True)
        acc1, o1, acc2, o2 = got["slow"]
        with np.errstate(over="ignore", invalid="ignore"):
            want = z + wf.view(np.float16).astype(np.float32)
            assert np.array_equal(acc1, want, equal_nan=True)
            assert np.array_equal(o1.view(np.float16), want.astype(np.float16), equal_nan=True)
            mean = (want * np.float32(1.0 / p)).astype(np.float16)
        assert np.array_equal(o2.view(np.float16), mean, equal_nan=True)
        assert np.array_equal(acc2, mean.astype(np.float32), equal_nan=True)
        assert np.array_equal(z, z0)          # the base (the ring's input) is only read
    hf, hs = y.astype(np.float16).view(np.uint16), y.astype(np.float16).view(np.uint16)
    with np.errstate(over="ignore"):
        fast.sum_halves(wf.view(np.uint16), hf, n)
        slow.sum_halves(ws.view(np.uint16), hs, n)
    assert np.array_equal(hf, hs)


def test_native_fp16_rejects_a_short_payload():
    from hpcdl.comm.compression import FP16
    _kernels_or_skip()
    with pytest.raises(ValueError):
        FP16(native=True).decode(np.zeros(6, np.uint8), 4)


def test_failed_kernel_build_leaves_numpy_in_charge(tmp_path, monkeypatch):
    from hpcdl.comm import _native
    lib = tmp_path / "_f16.so"
    monkeypatch.setattr(_native, "LIBRARY", lib)
    assert _native.build(cc="/bin/false", quiet=True) is False
    assert not lib.exists() and not list(tmp_path.iterdir())    # no half-written library left
    assert _native.build(cc=str(tmp_path / "no-such-cc"), quiet=True) is False


def test_kernel_build_makes_a_library_that_loads(tmp_path, monkeypatch):
    import ctypes
    import shutil
    from hpcdl.comm import _native
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler")
    lib = tmp_path / "_f16.so"
    monkeypatch.setattr(_native, "LIBRARY", lib)
    assert _native.build(quiet=True) is True and lib.is_file()
    if ctypes.CDLL(str(lib)).hpcdl_f16c_supported():
        assert _native._agrees(_native._Kernels(ctypes.CDLL(str(lib))))


def test_a_library_built_from_older_source_is_not_used(tmp_path, monkeypatch):
    import shutil
    from hpcdl.comm import _native
    _kernels_or_skip()                         # where the current library is used at all
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler")
    src = tmp_path / "_f16.c"
    text = _native.SOURCE.read_text()
    assert f"return {_native.ABI};" in text
    src.write_text(text.replace(f"return {_native.ABI};", f"return {_native.ABI - 1};", 1))
    lib = tmp_path / "_f16.so"
    monkeypatch.setattr(_native, "SOURCE", src)
    monkeypatch.setattr(_native, "LIBRARY", lib)
    monkeypatch.setattr(_native, "_loaded", False)
    monkeypatch.setattr(_native, "_kernels", None)
    assert _native.build(quiet=True) is True
    assert _native.kernels() is None           # its wrappers would pass the wrong arguments
