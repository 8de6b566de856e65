"""hpcdl bench allreduce on real ranks: the table, the footer, the JSON twin, and #wrong."""
import re

import pytest

from hpcdl_testing import BENCH_QUICK as QUICK, check, mpirun, read_records

COLUMNS = ["backend", "compr", "size(B)", "count", "type", "min(us)", "median(us)", "p99(us)",
           "algbw(GB/s)", "busbw(GB/s)", "memcpy(GB/s)", "MPI(GB/s)", "bus/MPI", "reduce(us)",
           "#wrong"]


def _rows(stdout):
    return [line.split() for line in stdout.splitlines() if line.startswith(" ") and line.split()]


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_every_backend_and_compression_is_correct_and_the_table_well_formed(tmp_path, request,
                                                                          np_):
    if np_ == 2:        # every backend, Horovod's too: the launch test_train_backends also reads
        res, out, _ = request.getfixturevalue("bench_two_ranks")
    else:
        out = tmp_path / "bench.jsonl"
        res = check(mpirun(np_, ["bench", "allreduce", "-B", "mpi,ring,ps", "-C", "all", *QUICK,
                                 "--results", str(out), "--tag", "t"], timeout=240))
    text = res.stdout
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert header[0].startswith(f"# hpcdl bench allreduce: ranks={np_}")
    assert any("versions:" in h and "mpi4py=" in h and "numpy=" in h for h in header)
    assert any(h.split()[1:] == COLUMNS for h in header if "busbw(GB/s)" in h)
    # the settings training gets, and no other (ranks yield while idle, Horovod's own cycle)
    assert any("OMPI_MCA_mpi_yield_when_idle=1" in h for h in header if "env:" in h)
    assert not any("HOROVOD_CYCLE_TIME" in h or "HPCDL_HOROVOD_NICE" in h for h in header)
    assert any("MPI_Allreduce (a sum, through mpi4py)" in h for h in header)
    rows = _rows(text)
    sizes = [4, 64, 1024, 16384]
    names = ["horovod", "mpi", "ring", "ps"] if np_ == 2 else ["mpi", "ring", "ps"]
    assert len(rows) == len(names) * 3 * len(sizes)
    for row in rows:
        assert len(row) == len(COLUMNS), row
        assert row[0] in names and row[1] in ("none", "fp16", "int8")
        assert int(row[2]) in sizes and int(row[3]) == int(row[2]) // 4 and row[4] == "float"
        tmin, tmed, tp99 = map(float, row[5:8])
        assert 0 < tmin <= tmed <= tp99
        algbw, busbw = float(row[8]), float(row[9])
        assert busbw == pytest.approx(algbw * 2 * (np_ - 1) / np_, rel=0.01, abs=2e-3)
        assert row[-1] == "0", row
    assert "# Out of bounds values : 0 OK" in text
    assert re.search(r"# Avg bus bandwidth\s*:\s*[0-9.]+ GB/s\s+ring\+fp16", text)
    assert text.rstrip().splitlines()[-2] == "# Result: OK"

    rec, = read_records(out)
    assert rec["schema"] == "hpcdl.bench/1" and rec["kind"] == "bench" and rec["op"] == "allreduce"
    assert rec["status"] == "ok" and rec["tag"] == "t" and rec["layout"]["size"] == np_
    assert len(rec["rows"]) == len(rows)
    r0 = rec["rows"][0]
    for key in ("backend", "compression", "model", "size_bytes", "wire_bytes", "time_us", "algbw_gbs",
                "busbw_gbs", "memcpy_gbs", "mpi_busbw_gbs", "reduce_us", "wrong", "identical"):
        assert key in r0
    assert set(r0["time_us"]) >= {"min", "median", "p99"}
    assert rec["manifest"]["versions"]["mpi4py"] and rec["manifest"]["git_commit"]
    fp16 = [r for r in rec["rows"] if r["compression"] == "fp16" and r["size_bytes"] == 16384]
    assert all(r["wire_bytes"] == 8192 for r in fp16)
    assert all(r["mpi_busbw_gbs"] > 0 for r in rec["rows"])


def test_a_wrong_result_is_counted_and_the_run_fails(tmp_path):
    out = tmp_path / "bench.jsonl"
    res = mpirun(2, ["bench", "allreduce", "-B", "ring,mpi", "-C", "none", *QUICK,
                     "--inject-error", "--results", str(out)], timeout=120)
    assert res.returncode == 1, res.stderr[-3000:]
    rows = _rows(res.stdout)
    # one element wrong on one rank, and that rank disagrees with rank 0: 2 per size
    assert rows and all(row[-1] == "2" for row in rows), rows
    assert "# Out of bounds values : 16 FAILED" in res.stdout
    assert "# Result: FAILED" in res.stdout
    rec, = read_records(out)
    assert rec["status"] == "failed" and rec["summary"]["ring"]["wrong"] == 8


def test_min_busbw_not_reached_fails(tmp_path):
    res = mpirun(2, ["bench", "allreduce", "-B", "mpi", "-C", "none", *QUICK, "--min-busbw", "1e6",
                     "--results", "-"], timeout=120)
    assert res.returncode == 1
    assert "# Result: FAILED (mpi below --min-busbw 1e+06)" in res.stdout


def test_unknown_backend_is_a_user_error():
    res = mpirun(1, ["bench", "allreduce", "-B", "nccl"], timeout=60)
    assert res.returncode == 2 and "unknown backend 'nccl'" in res.stderr
    assert "Traceback" not in res.stderr
