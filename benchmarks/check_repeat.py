#!/usr/bin/env python
"""Whether the cluster box's check gives one verdict on an unchanged box: ``scripts/cluster-box.sh
check`` run ``--runs`` times in a row on the box that is up, each run's verdict, the range of its
nodes' compute against one node alone, the alone passes' range and the links' shares, then how
many runs gave the commoner verdict.

    scripts/cluster-box.sh up 6 --link 500mbit --cpus-per-node 0.2
    python -m benchmarks.check_repeat --runs 10 > results/box-check-repeat.txt

Each run writes the box's check.json as a check does; the last run's verdict is the one a study
then finds.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from hpcdl import box

ROOT = Path(__file__).resolve().parents[1]


def one(extra) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        res = subprocess.run(["bash", str(ROOT / "scripts" / "cluster-box.sh"), "check", "--json",
                              out.name, *extra], capture_output=True, text=True, timeout=1800)
        if res.returncode not in (0, 1) or not Path(out.name).stat().st_size:
            raise SystemExit(f"check failed to run ({res.returncode}): {res.stderr[-2000:]}")
        return json.loads(Path(out.name).read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--check", default="", help="more options of check, e.g. '--rounds 5'")
    opts = ap.parse_args()
    b = box.load()
    if not b:
        raise SystemExit("the cluster box is not up (scripts/cluster-box.sh up N ...)")
    print(f"# python -m benchmarks.check_repeat --runs {opts.runs}"
          + (f" --check '{opts.check}'" if opts.check else ""))
    print(f"# box: {b['nodes_count']} nodes of {b['cpus_per_node']:g} cores, links "
          f"{b['link_rate']}; scripts/cluster-box.sh check {opts.check}".rstrip())
    print(f"{'run':>3}  {'verdict':<7} {'compute vs alone':>17} {'alone (s)':>13} {'links':>9}")
    verdicts = []
    for k in range(1, opts.runs + 1):
        v = one(opts.check.split())
        c = [r["compute_vs_alone"] for r in v["rows"]]
        links = [r[f"{w}_share"] for r in v["rows"] for w in ("tx", "rx") if f"{w}_share" in r]
        lo, hi = v.get("alone_range") or [v["alone_s"], v["alone_s"]]
        verdicts.append("passed" if v["passed"] else "FAILED")
        print(f"{k:>3}  {verdicts[-1]:<7} {min(c):>8.3f}-{max(c):.3f} {lo:>6.3f}-{hi:.3f} "
              f"{min(links):>4.0%}-{max(links):.0%}", flush=True)
    (common, n), = Counter(verdicts).most_common(1)
    print(f"# {n} of {opts.runs} runs {common}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
