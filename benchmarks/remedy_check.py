#!/usr/bin/env python
"""Do the remedies a weak-scaling report predicts deliver their gain? Predicted beside measured.

For the largest point of each uncompressed axis of a study calibrated on its smallest node counts,
:func:`hpcdl.model.transfer.remedies` gives the efficiency the part-by-part model predicts with
each remedy (fp16 gradients; twice the batch per rank) and the gain over the efficiency it
predicts as run. The measured gain comes from the same study's fp16 axis (same box, same commit)
and from a second study of the same workload with the remedy applied (twice the batch).

    python -m benchmarks.remedy_check results/box-cnn-weak results/box-cnn-b256-weak \\
        --loop-bench results/tuning/box-loop-cpu.json --spread-bench results/tuning/box-spread.json \
        > results/remedy-check.txt

With ``--loop-bench FILE`` the model's compute beyond the calibration follows the share of a node
Horovod's loop takes (:mod:`hpcdl.model.loop_share`), and with ``--spread-bench FILE`` its
slowest rank is drawn from the nodes' spread (:mod:`hpcdl.model.host_spread`), as the report's
are with the same flags.
"""
import argparse
import sys
from pathlib import Path


from hpcdl import records
from hpcdl.analysis import provenance
from hpcdl.model import Inputs, predict
from hpcdl.model.host_spread import HostSpread
from hpcdl.model.loop_share import LoopShare
from hpcdl.analysis.reading import row_key as _row_key


def load(folder: Path):
    recs = records.read(folder / "runs.jsonl" if folder.is_dir() else folder)
    return [r for r in recs if r.get("kind", "train") == "train"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", type=Path, help="the study's results folder (calibrated on ≤ N nodes)")
    ap.add_argument("remedied", type=Path, nargs="*",
                    help="results folders of the same workload run with a remedy applied")
    ap.add_argument("--loop-bench", default=None, metavar="FILE",
                    help="a loop file (benchmarks/cycle_cpu.py --json) the compute follows")
    ap.add_argument("--spread-bench", default=None, metavar="FILE",
                    help="a spread file (benchmarks/box_contention.py --json) the slowest rank "
                         "is drawn from")
    a = ap.parse_args(argv)
    recs = load(a.study)
    others = [r for f in a.remedied for r in load(f)]
    machines = {provenance.machine_setting(r) for r in recs + others}
    machine = machines.pop() if len(machines) == 1 else None
    loop = LoopShare(a.loop_bench, machine) if a.loop_bench else None
    spread = HostSpread(a.spread_bench, machine) if a.spread_bench else None
    res = predict.of_records(recs, _row_key, Inputs.declared(recs).nodes_max or 2, "weak", others, loop=loop,
                          spread=spread)
    print(f"# python -m benchmarks.remedy_check {a.study} {' '.join(map(str, a.remedied))}"
          + (f" --loop-bench {a.loop_bench}" if a.loop_bench else "")
          + (f" --spread-bench {a.spread_bench}" if a.spread_bench else ""))
    if loop is not None:
        print(f"# compute beyond the calibration after {loop.source}"
              + "".join(f"; not taken: {why}" for why in loop.misses()))
    if spread is not None:
        print(f"# the slowest rank beyond the calibration from {spread.source}"
              + "".join(f"; not taken: {why}" for why in spread.misses()))
    print("# model: calibrated on each axis's runs with at most "
          f"{res.get('nodes_max')} node(s); efficiency = 1-node step / p-node step")
    print(f"{'axis':24s} {'nodes':>5s}  {'remedy':26s} {'E model':>8s} {'gain model':>10s} "
          f"{'E meas':>8s} {'gain meas':>9s} {'gain err':>8s}")
    for r in res.get("remedies", []):
        def pct(x):
            return "-" if x is None else f"{x * 100:.1f}%"

        def ratio(x):
            return "-" if x is None else f"{x:.3f}x"
        print(f"{r['axis']:24s} {r['nodes']:5d}  {r['remedy']:26s} {pct(r['model_efficiency']):>8s} "
              f"{ratio(r['model_gain']):>10s} {pct(r['measured_efficiency']):>8s} "
              f"{ratio(r['measured_gain']):>9s} {pct(r['gain_error']):>8s}")
        print(f"{'':24s} {'':5s}  {'  (as run)':26s} {pct(r['model_efficiency_as_run']):>8s} "
              f"{'':>10s} {pct(r['measured_efficiency_as_run']):>8s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
