#!/usr/bin/env python
"""The named networks' message prices (hpcdl/model/networks.json), from SimGrid SMPI.

Each named network of :data:`hpcdl.costmodel.PRESETS` becomes an SMPI platform: a two-level fat
tree of full bisection, 32 nodes a leaf switch and 1024 nodes (switches of 64 ports), every link
at the network's line rate with half its published point-to-point latency (two links between
nodes of one leaf, four across the tree). SMPI's own network model adds what the MPI stack and
the protocol cost on top (its default latency and bandwidth factors, which change at fixed
message sizes: :data:`CUTS`). Between two of those sizes a message's cost is linear in its
bytes, so each span is measured at two sizes near its ends: what one more step of a size adds
to an MPI ring, over rings of 2, 4 and 8 ranks within a leaf and over two leaves
(:func:`benchmarks.smpi_check.marginal`), in network time alone (SMPI adds none of this host's
own time in the collective's copies). Nothing here is measured above 8 ranks;
``python -m benchmarks.network_check`` compares the result with SMPI at 16-1024.

    python -m benchmarks.network_prices            # writes hpcdl/model/networks.json
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

from hpcdl import costmodel
from hpcdl.model import networks
from benchmarks.smpi_check import marginal, platform_file, prepared

# where SMPI 3.32's default smpi/bw-factor and smpi/lat-factor change (bytes): a message's cost is
# linear between them (a send stops being detached at 65,536 bytes: no change in a ring's step)
CUTS = (0, 257, 732, 1426, 3484, 5776, 9376, 15424, 65472)
TOP = (262144, 16777216)     # the sizes measured above the last cut
LEAF = 32


def platform(key: str) -> str:
    """The SMPI cluster of the named network ``key``: line rate and half the latency a link."""
    net = costmodel.PRESETS[key]
    gbit = 8.0 / net.beta / costmodel.LINE_SHARE / 1e9        # the preset's line rate
    return (f'bw="{gbit:g}Gbps" lat="{net.alpha / 2 * 1e6:g}us" topology="FAT_TREE" '
            f'topo_parameters="2;{LEAF},{LEAF};1,{LEAF};1,1"')


def spans():
    """(from bytes, [two sizes measured, whole floats]) of each span between :data:`CUTS`, 2%
    inside its ends: SMPI's own cut lies a few bytes below the figure it is configured with (a
    ring step of 65,468 bytes already cost the 65,472-byte rate, 23.3 us against 13.1 at 65,400)."""
    out = []
    for lo, hi in zip(CUTS, CUTS[1:]):
        out.append((lo, [max(4, int(lo * 1.02 + 4) // 4 * 4), int(hi * 0.98) // 4 * 4]))
    return out + [(CUTS[-1], list(TOP))]


def fitted(work: Path, name: str, leaf: int = 0):
    """[[from bytes, a, b], ...] and the fixed costs of the rings: a + b·m a step."""
    rows, fixed = [], []
    for lo, sizes in spans():
        got = [marginal(work, name, m, leaf, network_only=True) for m in sizes]
        fixed += [f for _, f in got]
        b, a = np.polyfit(np.array(sizes, float), np.array([s for s, _ in got]), 1)
        rows.append([lo, float(a), float(b)])
    return rows, fixed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", default=",".join(costmodel.PRESETS))
    ap.add_argument("--work", default="build/smpi")
    ap.add_argument("--out", default=str(networks.TABLE))
    opts = ap.parse_args(argv)
    work = Path(opts.work)
    version = prepared(work)
    table = {}
    for key in opts.networks.split(","):
        name = f"net-{key}"
        attrs = platform(key)
        platform_file(work, name, attrs)
        near, fixed = fitted(work, name)
        far, _ = fitted(work, name, LEAF)
        table[key] = {"platform": attrs, "leaf": LEAF, "fixed_s": float(np.median(fixed)),
                      "near": near, "far": far}
        print(f"{key}: fixed {table[key]['fixed_s'] * 1e6:.2f} us, a 1 MiB step "
              f"{near[-1][1] + near[-1][2] * 2 ** 20:.3e} s near, "
              f"{far[-1][1] + far[-1][2] * 2 ** 20:.3e} s far", flush=True)
    doc = {"command": "python -m benchmarks.network_prices",
           "source": f"{version} SMPI, a fat tree of {LEAF} nodes a leaf at each network's line "
                     "rate and latency, priced by rings of 2-8 ranks",
           "networks": table}
    Path(opts.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
