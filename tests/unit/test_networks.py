"""The named networks' exchange (hpcdl.model.networks): SMPI's prices, read without SMPI, and the
committed check (results/network-check.txt) made by the table the package ships."""
import re
import shutil
import subprocess
import sys

import pytest

from hpcdl import costmodel
from hpcdl.model import networks
from hpcdl_testing import ROOT

CHECK = ROOT / "results" / "network-check.txt"


def test_every_named_network_has_prices_that_grow_with_bytes_and_distance():
    for key in costmodel.PRESETS:
        pr = networks.prices(key)
        assert pr is not None, key
        assert pr.leaf > 1 and pr.fixed > 0
        sizes = [4, 256, 1024, 9000, 65536, 2 ** 20, 2 ** 24, 2 ** 27]
        near = [pr.near(m) for m in sizes]
        assert all(t > 0 for t in near), key
        assert near[-1] > near[-2] > near[-3] > near[0], key       # bandwidth-bound sizes
        # across the tree a message crosses four links, not two: more latency where it counts
        assert all(pr.far(m) > pr.near(m) for m in sizes[:4]), key
        # a step of 16 MiB takes longer than its bytes at the line rate: the stack's own cost
        line = 8 / (costmodel.PRESETS[key].beta * costmodel.LINE_SHARE)
        assert pr.near(2 ** 24) > 2 ** 24 * 8 / line


def test_an_exchange_adds_the_algorithms_messages_at_their_spans():
    pr = networks.prices("ib-edr")
    n = 9 * 2 ** 20
    assert networks.exchange("ib-edr", "ring", n, 1) == 0.0
    assert networks.exchange("no-such-network", "ring", n, 16) is None
    within = networks.exchange("ib-edr", "ring", n, 16)
    # 16 ranks in one leaf: the ring's 30 steps, its wrap-around pair 15 nodes apart, all near
    assert within == pytest.approx(pr.fixed + 30 * pr.near(n / 16))
    # 64 over two leaves: its wrap-around pair crosses the tree, and every step waits on it
    assert networks.exchange("ib-edr", "ring", n, 64) == pytest.approx(
        pr.fixed + 126 * pr.far(n / 64))
    # 64 ranks over two leaves: Rabenseifner's last halving pairs ranks 32 apart, across the tree
    rab = networks.exchange("ib-edr", "rabenseifner", n, 64)
    steps = [(n / 2 ** i, 2 ** (i - 1)) for i in range(1, 7)]
    assert rab == pytest.approx(pr.fixed + sum(
        2 * (pr.far(m) if span >= pr.leaf else pr.near(m)) for m, span in steps))
    # a ring's 2(p - 1) steps: more ranks, more latency, for the same bytes
    assert networks.exchange("ib-edr", "ring", n, 1024) > within


def _rows():
    rows = []
    for line in CHECK.read_text().splitlines():
        if line.startswith("#") or not line.strip() or line.startswith("network"):
            continue
        # network, workload (one or two words), algorithm (one or two words), ranks, bytes, ...
        m = re.match(r"(\S+) +(.+?) +(ring|rabenseifner|recursive doubling|segmented ring) +"
                     r"(\d+) +(\d+) +([\d.]+) +([\d.]+) +([+-][\d.]+)%", line)
        assert m, line
        rows.append((m.group(1), m.group(3), int(m.group(4)), int(m.group(5)),
                     float(m.group(6)), float(m.group(7)), float(m.group(8))))
    return rows


def test_the_committed_check_is_of_the_table_the_package_ships():
    rows = _rows()
    assert len(rows) >= 4 * 3 * 6
    assert {r[0] for r in rows} == set(costmodel.PRESETS)
    assert {16, 64, 256, 1024} <= {r[2] for r in rows}
    assert any(p & (p - 1) for _, _, p, *_ in rows)                 # not a power of two
    for key, algo, p, n, sim_ms, got_ms, err in rows:
        assert networks.exchange(key, algo, n, p) * 1e3 == pytest.approx(got_ms, rel=2e-3, abs=2e-3)
        # SMPI's time is printed to 1 us: the error, from it, to that much of the time
        assert (got_ms - sim_ms) / sim_ms * 100 == pytest.approx(err, abs=0.06 + 0.1 / sim_ms)
    within = sum(abs(r[6]) <= 15 for r in rows)
    assert f"within 15% of SMPI: {within} of {len(rows)}" in CHECK.read_text()


@pytest.mark.skipif(not shutil.which("smpirun"), reason="SimGrid SMPI (libsimgrid-dev) not installed")
def test_the_check_runs_against_smpi_at_16_ranks(tmp_path):
    out = subprocess.run([sys.executable, "-m", "benchmarks.network_check", "--networks",
                          "roce-25g", "--ranks", "16", "--work", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert "within 15% of SMPI" in out.stdout, out.stderr[-2000:]
    assert out.returncode == 0, out.stdout
