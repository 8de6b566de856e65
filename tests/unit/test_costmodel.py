"""The alpha-beta-gamma model: formulas, wire bytes, the fit recovering known parameters."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from hpcdl import costmodel as M

ROOT = Path(__file__).resolve().parents[2]


def ring_time(n, p, a, b, g):
    return M.predict("ring", n, p, a, b, g)


def ps_time(n, p, a, b, g):
    return M.predict("ps", n, p, a, b, g)

SIZES = [float(1 << k) for k in range(16, 29)]     # 64 KiB .. 256 MiB


def test_ring_and_ps_formulas():
    n, p, a, b, g = 1e6, 4, 1e-5, 1e-9, 1e-10
    assert ring_time(n, p, a, b, g) == pytest.approx(6 * a + 1.5 * n * b + 0.75 * n * g)
    assert ps_time(n, p, a, b, g) == pytest.approx(6 * a + 6 * n * b + 3 * n * g)
    assert M.predict("allgather", n, p, a, b, g) == pytest.approx(3 * a + 3 * n * b + n * g)
    assert ring_time(n, 1, a, b, g) == 0.0
    # at large n a parameter server takes p times a ring's time
    for p in (2, 3, 4, 8):
        assert ps_time(1e9, p, 0, b, g) / ring_time(1e9, p, 0, b, g) == pytest.approx(p)
    assert M.busbw_factor(2) == 1.0 and M.busbw_factor(4) == 1.5


def test_algorithm_for_each_backend():
    assert M.algorithm_for("ring") == M.algorithm_for("mpi") == M.algorithm_for("horovod", "fp16") == "ring"
    assert M.algorithm_for("ps", "int8") == "ps"
    assert M.algorithm_for("mpi", "int8") == M.algorithm_for("horovod", "int8") == "allgather"
    assert M.algorithm_for("ring", "int8") == "ring"


@pytest.mark.parametrize("model,p", [("ring", 2), ("ring", 4), ("ps", 3), ("allgather", 2)])
def test_fit_recovers_known_alpha_and_beta_from_synthetic_timings(model, p):
    alpha, beta, gamma = 12e-6, 0.25e-9, 0.08e-9
    rng = np.random.default_rng(1)
    t = np.array([M.predict(model, n, p, alpha, beta, gamma) for n in SIZES])
    noisy = t * (1 + rng.normal(0, 0.01, t.size))            # 1 % timing noise
    res = M.fit(model, SIZES, noisy, p, gamma=gamma)
    assert res["alpha_s"] == pytest.approx(alpha, rel=0.15)
    assert res["beta_s_per_byte"] == pytest.approx(beta, rel=0.02)
    assert res["gamma_s_per_byte"] == gamma
    assert res["r2"] > 0.999 and res["max_rel_err"] < 0.05
    exact = M.fit(model, SIZES, t, p, gamma=gamma)
    assert exact["alpha_s"] == pytest.approx(alpha, rel=1e-6)
    assert exact["beta_s_per_byte"] == pytest.approx(beta, rel=1e-6)


@pytest.mark.parametrize("p", [2, 3, 4])
def test_allgather_fit_recovers_one_encode_and_p_decodes(p):
    """int8 over mpi/horovod: encode once, receive p-1 payloads of n/4 + scales, decode-add p."""
    alpha, beta_wire, enc, dec = 15e-6, 0.4e-9, 0.5e-9, 0.3e-9
    chunk = 256
    wire = [n / 4 + 4 * (n / 4) / chunk for n in SIZES]          # codes + one float32 scale per chunk
    t = np.array([(p - 1) * alpha + (p - 1) * w * beta_wire + n * enc + p * n * dec
                  for n, w in zip(SIZES, wire)])
    res = M.fit("allgather", SIZES, t, p, gamma=enc + dec)        # gamma: the measured hop
    assert res["alpha_s"] == pytest.approx(alpha, rel=1e-6)
    # beta per float32 byte: the wire bytes' share plus the decode-add of each received payload
    assert res["beta_s_per_byte"] == pytest.approx(beta_wire * (0.25 + 1 / chunk) + dec, rel=1e-6)
    assert res["max_rel_err"] < 1e-9
    # the old model (p encodes and p decodes charged as p*n*gamma) cannot fit these timings
    pred_old = np.array([(p - 1) * alpha + (p - 1) * n * res["beta_s_per_byte"] + p * n * (enc + dec)
                         for n in SIZES])
    assert np.max(np.abs(pred_old / t - 1)) > 0.2


def test_fit_clamps_a_negative_latency_to_zero():
    t = [n * 1e-9 - 1e-6 for n in SIZES]      # a pure bandwidth line a hair below the origin
    res = M.fit("ring", SIZES, t, 2, gamma=0.0)
    assert res["alpha_s"] == 0.0 and res["beta_s_per_byte"] > 0


def test_wire_bytes_per_codec_are_what_the_codecs_send():
    from hpcdl.comm.compression import get_codec
    for n in (1, 255, 256, 257, 1000, 1 << 20):
        assert M.wire_bytes(n, "none") == 4 * n
        assert M.wire_bytes(n, "fp16") == 2 * n
        assert M.wire_bytes(n, "int8") == n + 4 * -(-n // 256)
        for comp in ("none", "fp16", "int8"):
            x = np.linspace(-1, 1, n, dtype=np.float32)
            assert get_codec(comp).encode(x).nbytes == M.wire_bytes(n, comp)
    with pytest.raises(ValueError):
        M.wire_bytes(4, "int4")


def test_the_formula_is_written_in_one_module():
    """The alpha-beta-gamma terms appear in hpcdl/costmodel.py and nowhere else in hpcdl/."""
    term = re.compile(r"2\s*\*?\s*\(p\s*[-−]\s*1\)\s*/\s*p\s*\*?\s*·?\s*n")
    found = [p.relative_to(ROOT).as_posix() for p in (ROOT / "hpcdl").rglob("*.py")
             if term.search(p.read_text())]
    assert found == ["hpcdl/costmodel.py"]


def _record(p=2, alpha=20e-6, beta=0.3e-9, gamma=0.1e-9):
    rows = []
    for backend, comp in [("ring", "none"), ("ps", "none"), ("mpi", "int8")]:
        model = M.algorithm_for(backend, comp)
        for k in range(2, 29, 2):
            n = 1 << k
            t = M.predict(model, n, p, alpha, beta, gamma)
            rows.append({"backend": backend, "compression": comp, "model": model, "size_bytes": n,
                         "time_us": {"median": t * 1e6}, "reduce_us": n * gamma * 1e6})
    return {"schema": "hpcdl.bench/1", "kind": "bench", "op": "allreduce", "time": "t",
            "layout": {"size": p, "hosts": ["h"]}, "rows": rows}


def test_bench_fit_writes_the_parameters_the_report_reads(tmp_path, capsys):
    from hpcdl import cli
    src = tmp_path / "allreduce.jsonl"
    src.write_text(json.dumps(_record()) + "\n")
    out = tmp_path / "fit.json"
    assert cli.main(["bench", "fit", "--input", str(src), "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "hpcdl.fit/1" and doc["ranks"] == 2
    assert set(doc["backends"]) == {"ring", "ps", "mpi+int8"}
    for key, fit in doc["backends"].items():
        assert fit["alpha_s"] == pytest.approx(20e-6, rel=1e-3), key
        assert fit["beta_s_per_byte"] == pytest.approx(0.3e-9, rel=1e-3), key
        assert fit["gamma_s_per_byte"] == pytest.approx(0.1e-9, rel=1e-6), key
        assert fit["r2"] > 0.9999 and fit["within_tolerance"]
    text = capsys.readouterr().out
    assert "predicted(us)" in text and "3/3 backends" in text


def test_bench_fit_without_records_is_a_user_error(tmp_path):
    from hpcdl import cli
    assert cli.main(["bench", "fit", "--input", str(tmp_path / "none.jsonl")]) == 2


def test_fit_finds_the_cache_breakpoint_of_a_two_regime_sweep():
    # in-cache sizes at 0.2 ns/B, memory-bound sizes from 16 MiB at 0.5 ns/B
    alpha, b_in, b_out, brk = 15e-6, 0.2e-9, 0.5e-9, float(16 << 20)
    t = [ring_time(n, 2, alpha, b_in if n < brk else b_out, 0) for n in SIZES]
    one = M.fit("ring", SIZES, t, 2, gamma=0.0)
    assert one["max_rel_err"] > 0.2                       # a single line misses
    res = M.fit_regimes("ring", SIZES, t, 2, gamma=0.0)
    assert res["breakpoint_bytes"] == brk
    assert res["regimes"][-1]["beta_s_per_byte"] == pytest.approx(b_out, rel=1e-6)
    assert res["regimes"][0]["beta_s_per_byte"] == pytest.approx(b_in, rel=1e-6)
    # the top level stays one line over all sizes, for models that know one alpha and beta
    assert res["beta_s_per_byte"] == one["beta_s_per_byte"]
    assert res["line_max_rel_err"] == pytest.approx(one["max_rel_err"])
    assert res["max_rel_err"] < 1e-6
    pred = M.predict_fit(res, SIZES, 2, gamma=0.0)
    assert np.allclose(pred, t, rtol=1e-6)


def test_fit_keeps_one_regime_when_one_line_holds():
    rng = np.random.default_rng(3)
    t = np.array([ring_time(n, 4, 10e-6, 0.3e-9, 0.05e-9) for n in SIZES]) * (1 + rng.normal(0, 0.01, len(SIZES)))
    res = M.fit_regimes("ring", SIZES, t, 4, gamma=0.05e-9)
    assert res["breakpoint_bytes"] is None and len(res["regimes"]) == 1
    assert res["beta_s_per_byte"] == pytest.approx(0.3e-9, rel=0.03)


def test_fit_takes_a_measured_gamma_per_size():
    gam = np.where(np.asarray(SIZES) < (4 << 20), 0.05e-9, 0.2e-9)      # the reduction leaves cache too
    t = [M.predict("ps", n, 3, 20e-6, 0.3e-9, g) for n, g in zip(SIZES, gam)]
    res = M.fit_regimes("ps", SIZES, t, 3, gamma=gam)
    assert res["breakpoint_bytes"] is None
    assert res["alpha_s"] == pytest.approx(20e-6, rel=1e-4) and res["beta_s_per_byte"] == pytest.approx(0.3e-9, rel=1e-6)


def test_ps_over_ring_ratio_per_bottleneck():
    # the code's ps receives everything, then sends: full-duplex links -> p; copies by the rank's
    # CPU in both directions -> p/2; more ranks than cores -> all copies share the cores -> 1
    for p in (2, 3, 4, 8):
        assert M.bandwidth_ratio(p, M.LINK_BOUND) == pytest.approx(
            ps_time(1e9, p, 0, 1e-9, 0) / ring_time(1e9, p, 0, 1e-9, 0))
        assert M.bandwidth_ratio(p, M.COPY_BOUND) == p / 2
        assert M.bandwidth_ratio(p, M.CPU_BOUND) == 1
    assert M.regime_for(2, cores=2) == M.COPY_BOUND and M.regime_for(4, cores=2) == M.CPU_BOUND
    assert M.regime_for(4, cores=2, nodes=4) == M.LINK_BOUND
    with pytest.raises(ValueError):
        M.bandwidth_ratio(2, "warp")


def test_fit_finds_three_regimes_cache_memory_and_fresh_mappings():
    # cache up to 4 MiB, memory from 8 MiB, buffers mapped afresh per call from 64 MiB
    def beta(n):
        return 0.15e-9 if n <= (4 << 20) else (0.3e-9 if n < (64 << 20) else 0.6e-9)
    t = [ring_time(n, 2, 10e-6, beta(n), 0) for n in SIZES]
    res = M.fit_regimes("ring", SIZES, t, 2, gamma=0.0)
    assert [g["from_bytes"] for g in res["regimes"]] == [1 << 16, 8 << 20, 64 << 20]
    assert res["breakpoint_bytes"] == 64 << 20 and res["max_rel_err"] < 1e-6
    two = M.fit_regimes("ring", SIZES, t, 2, gamma=0.0, max_regimes=2)
    assert len(two["regimes"]) == 2 and two["max_rel_err"] > 0.01


def test_bench_fit_over_repeated_sweeps_takes_the_median(tmp_path, capsys):
    from hpcdl import cli
    src = tmp_path / "allreduce.jsonl"
    recs = [_record(), _record(), _record()]
    # a busy moment at a different size in two of the sweeps
    recs[0]["rows"][8]["time_us"]["median"] *= 3       # 256 KiB
    recs[1]["rows"][10]["time_us"]["median"] *= 3      # 4 MiB
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "fit.json"
    assert cli.main(["bench", "fit", "--input", str(src), "--records", "3", "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert all(f["max_rel_err"] < 1e-6 for f in doc["backends"].values())
    assert "median of 3" in doc["source"]["time"]
    assert cli.main(["bench", "fit", "--input", str(src), "--output", "-"]) == 0   # the last alone
    assert cli.main(["bench", "fit", "--input", str(src), "--records", "4"]) == 2
    capsys.readouterr()


def test_fit_tries_three_regimes_when_one_split_gains_nothing():
    # a middle regime (4-32 MiB) with a higher latency and a lower slope, the same line on both
    # sides of it: no single split helps, two do (the search must not stop at the first)
    def time(n):
        a, b = (300e-6, 0.2e-9) if (4 << 20) <= n <= (32 << 20) else (10e-6, 0.5e-9)
        return ring_time(n, 2, a, b, 0)
    sizes = [s for s in SIZES if s >= 64 << 10]
    t = [time(n) for n in sizes]
    line = M.fit_regimes("ring", sizes, t, 2, gamma=0.0, max_regimes=1)
    two = M.fit_regimes("ring", sizes, t, 2, gamma=0.0, max_regimes=2)
    assert two["max_rel_err"] > 0.8 * line["max_rel_err"] > 0.1
    res = M.fit_regimes("ring", sizes, t, 2, gamma=0.0)
    assert [g["from_bytes"] for g in res["regimes"]] == [64 << 10, 4 << 20, 64 << 20]
    assert res["max_rel_err"] < 1e-6


def test_node_bytes_are_what_one_node_sends_and_receives_per_exchange():
    assert M.node_bytes("ring", 1000, 4) == (1500.0, 1500.0)
    assert M.node_bytes("ring", 1000, 2) == (1000.0, 1000.0)
    assert M.node_bytes("ps", 1000, 4, root=True) == (3000.0, 3000.0)   # 2(p-1)n in all
    assert M.node_bytes("ps", 1000, 4) == (1000.0, 1000.0)
    assert M.node_bytes("ring", 1000, 1) == (0.0, 0.0)
    with pytest.raises(ValueError):
        M.node_bytes("tree", 1000, 4)


@pytest.mark.parametrize("algorithm", ["ring", "ps", "allgather"])
def test_each_algorithms_bytes_are_written_once(algorithm):
    """The fit's alpha and beta terms, a node's expected counters and the forecast's messages
    all come from step_spans: the same count of messages and the same bytes at every p."""
    n = 3000.0
    for p in (2, 3, 4, 6, 8, 13, 64):
        spans = M.step_spans(algorithm, n, p)
        count, nbytes = sum(c for _, c, _ in spans), sum(m * c for m, c, _ in spans)
        a, b, _ = M.coefficients(algorithm, n, p)
        assert a == pytest.approx(count) and b == pytest.approx(nbytes), p
        sent = M.node_bytes(algorithm, n, p, root=True)[0]
        assert sent == pytest.approx(nbytes / 2 if algorithm == "ps" else nbytes), p
        if algorithm != "ps":
            assert M.link_bytes(algorithm, n, p) == pytest.approx(nbytes), p


def test_no_other_module_writes_an_algorithms_bytes():
    import ast
    from hpcdl_testing import ROOT
    owned = {"step_spans", "link_parts", "link_bytes", "node_bytes", "coefficients"}
    found = [f"{path.relative_to(ROOT)}:{node.name}"
             for path in (ROOT / "hpcdl").rglob("*.py") if path.name != "costmodel.py"
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.FunctionDef) and node.name in owned]
    assert found == []


def test_link_rates_read_as_tc_writes_them():
    assert M.rate_bits("200mbit") == 200e6 and M.rate_bits("1gbit") == 1e9
    assert M.rate_bits("512kbit") == 512e3
    with pytest.raises(ValueError):
        M.rate_bits("fast")
