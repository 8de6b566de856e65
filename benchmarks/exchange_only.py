#!/usr/bin/env python
"""The forecast's exchange beyond the counts a study trains on: exchange-only box points.

The box can hold more nodes than it can train on (each node's TensorFlow needs its share of the
host's 2 cores), but enough to exchange: ``hpcdl tune --knobs algorithm`` times a workload's own
gradient tensors through Horovod, every allreduce algorithm, at each node count. The files made
at the input counts (at most 4 nodes, what a small allocation measures) are the forecast's
inputs, as a study's are (:func:`hpcdl.model.forecast.anchored`: the model's link shape, scaled
by what the allocation measured at the largest input count that ran the algorithm, or that
folds as p does; a fold with more steps after it, that count's time plus the added steps at
the 4-node file's rate); the files at the larger counts are held out. Beside the forecast, two
baselines: the link alone (the ring's bytes at the payload rate, nothing measured) and the
largest input's time unchanged.

The link shape here has no duplex share (a study fits it on its 2-node training runs, which an
exchange-only session has none of). Errors are (predicted - measured) / measured.

Each set: the link RATE, the WORKLOAD whose gradients are timed (a study file's, or named) and
the folder OUT, results/NAME (its table is OUT.txt), one box session a set (the last two
shared one); COUNTS "3 4 16 12" for the first set, "3 4 16 12 14 10" for the others:

    #  RATE     NAME                             WORKLOAD
    #  100mbit  exchange-only                    --study jobs/box-tuned-widemlp-375mbit.toml
    #  150mbit  exchange-only-mobilenet-150mbit  --study jobs/box-small-mobilenet-290mbit.toml
    #  125mbit  exchange-only-cnn-125mbit        --study jobs/box-small-cnn-290mbit.toml
    #  120mbit  exchange-only-cnn1000-120mbit    --workload cnn --model small --num-classes 1000
    #                                            --image-size 32 (1.5 MB; run after 227ac74)
    #  120mbit  exchange-only-cnn16k-120mbit     the same with --num-classes 16000 (17 MB)
    scripts/cluster-box.sh up 16 --link $RATE --cpus-per-node 0.1 && scripts/cluster-box.sh check
    eval "$(scripts/cluster-box.sh env | sed 's/^/export /')"; export HPCDL_THREADS=1
    for n in $COUNTS; do salloc -N$n -n$n --ntasks-per-node=1 --time=30 hpcdl tune \\
      $WORKLOAD --compression none --knobs algorithm --rounds 1 --iters 3 \\
      --out $OUT/exchange-${n}n-$RATE.json; done
    python -m benchmarks.exchange_only $OUT --network $RATE --inputs 3,4 > $OUT.txt
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

from hpcdl import costmodel
from hpcdl.costmodel import rate_bits
from hpcdl.model.allreduce import OMPI_ALLREDUCE, ompi_allreduce, on_link
from hpcdl.model.exchange_bench import Bench
from hpcdl.model.forecast import anchored

ALGORITHMS = ("ring", "rabenseifner", "recursive doubling")
LIBRARY = "library's choice"


class LinkShape:
    """The model's exchange with nothing fitted: each algorithm's link bytes at the payload
    rate (:func:`hpcdl.model.allreduce.on_link`)."""

    def exchange(self, p, algorithm, wire, rate):
        return 0.0 if p <= 1 else on_link(algorithm, wire, p, rate)


def _setting(doc: dict) -> str:
    """The Horovod settings every candidate of a file shares ("cycle 1 ms, fusion 64 MiB")."""
    names = [c["name"] for c in doc.get("candidates") or []
             if c.get("name", "").startswith(LIBRARY)]
    return names[0].split(", ", 1)[1] if names else ""


def _timed(bench: Bench, q: int, network: str, wire: float, rest: str) -> dict:
    """{algorithm: (seconds, where from)} a file timed, as a study's inputs take it
    (:meth:`Bench.small`): the library's choice under the algorithm Open MPI decides at q."""
    return bench.small(q, network, "none", f"{LIBRARY}, {rest}", wire,
                       OMPI_ALLREDUCE[ompi_allreduce(q, wire)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="the tune files, exchange-{nodes}n-{network}.json")
    ap.add_argument("--network", required=True, help="the box's link rate, as in the file names")
    ap.add_argument("--inputs", default="2,3,4", help="the input counts (at most 4)")
    opts = ap.parse_args()
    folder = Path(opts.folder)
    bench = Bench(str(folder / "exchange-{nodes}n-{network}.json"))
    counts = sorted(int(f.name.split("n-")[0].split("-")[-1])
                    for f in folder.glob(f"exchange-*n-{opts.network}.json"))
    inputs = [q for q in (int(x) for x in opts.inputs.split(",")) if q in counts and q <= 4]
    held = [p for p in counts if p > max(inputs, default=0)]
    if not inputs or not held:
        raise SystemExit(f"{folder}: needs files at input counts <= 4 and above them; has {counts}")
    doc = json.loads(bench.path(inputs[-1], opts.network).read_text())
    rest = _setting(doc)
    wire = costmodel.wire_bytes(int(doc["bytes"]) // 4, "none")
    rate = rate_bits(opts.network)
    anchors = {q: _timed(bench, q, opts.network, wire, rest) for q in inputs}
    s = {"wire": wire, "rate": rate}
    shape = LinkShape()
    print(f"# python -m benchmarks.exchange_only {opts.folder} --network {opts.network} "
          f"--inputs {opts.inputs}")
    print(f"# {wire:.0f} gradient bytes, links {opts.network}; inputs at {inputs} nodes, held out "
          f"at {held}; settings '{rest}'; machine {doc.get('made_for', {}).get('machine')}")
    print(f"{'nodes':>5} {'algorithm':>19} {'measured':>9} {'forecast':>9} {'error':>7} "
          f"{'link alone':>10} {'largest input':>13}  from")
    errs = {"forecast": [], "link alone": [], "largest input": []}
    ring_steps = []
    for p in held:
        timed = _timed(bench, p, opts.network, wire, rest)
        library = OMPI_ALLREDUCE[ompi_allreduce(p, wire)]
        for algo in ALGORITHMS:
            if algo not in timed:
                continue
            measured = timed[algo][0]
            pred, source = anchored(shape, anchors, p, algo, s)
            alone = shape.exchange(p, algo, wire, rate)
            q = max((q for q in inputs if algo in anchors[q]), default=None)
            largest = anchors[q][algo][0] if q else None
            row = {"forecast": pred, "link alone": alone, "largest input": largest}
            for k, v in row.items():
                if v is not None:
                    errs[k].append((v - measured) / measured)
            cell = {k: f"{(v - measured) / measured:+.1%}" if v is not None else "-"
                    for k, v in row.items()}
            if algo == "ring":
                steps = 2 * (p - 1)
                ring_steps.append((p, steps, alone / steps, (measured - pred) / steps))
            name = algo + (" (lib)" if algo == library else "")
            print(f"{p:>5} {name:>19} {measured:>8.3f}s {pred:>8.3f}s {cell['forecast']:>7} "
                  f"{cell['link alone']:>10} {cell['largest input']:>13}  {source}")
    print("# mean absolute error (signed mean), points within 15%:")
    for k, v in errs.items():
        if v:
            mae = statistics.mean(abs(e) for e in v)
            print(f"#   {k:>13}: {mae:.1%} ({statistics.mean(v):+.1%}), "
                  f"{sum(abs(e) <= 0.15 for e in v)} of {len(v)} within 15%")
    # a cost each step pays whatever its bytes (a box node's CPU period, say) shows here: the
    # forecast carries the inputs' time per byte, not per step
    print("# the ring a step at a time: each of its 2(p - 1) steps on the wire (the link alone)"
          " and what it took beyond the forecast:")
    for p, steps, wire_s, beyond in ring_steps:
        print(f"#   {p:>3} nodes: {steps} steps of {wire_s * 1e3:.1f} ms on the wire, "
              f"{beyond * 1e3:+.1f} ms a step beyond the forecast")
    return 0


if __name__ == "__main__":
    sys.exit(main())
