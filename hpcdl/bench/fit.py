"""Fit the cost model to allreduce sweeps: ``hpcdl bench fit``.

It reads ``hpcdl bench allreduce`` records and fits alpha and beta of each backend's algorithm
(:mod:`hpcdl.costmodel`, gamma measured in the same sweep), prints the prediction beside the
measurement for each size, and writes the parameters to ``results/bench/fit.json``
(``hpcdl.fit/1``). It needs no MPI.
"""
from __future__ import annotations

import json
from pathlib import Path

from .allreduce import BENCH_SCHEMA, DEFAULT_RESULTS, parse_size
from .. import records
from ..errors import UserError

DEFAULT_FIT = "results/bench/fit.json"
FIT_SCHEMA = "hpcdl.fit/1"


def add_arguments(f):
    f.add_argument("--input", "-i", default=DEFAULT_RESULTS, help=f"bench records ({DEFAULT_RESULTS})")
    f.add_argument("--record", type=int, default=-1,
                   help="which record of the file (Python index among allreduce records; -1: last)")
    f.add_argument("--ranks", type=int, default=None,
                   help="use the last record with this many ranks")
    f.add_argument("--tag", default=None,
                   help="use only records whose tag contains this text")
    f.add_argument("--records", type=int, default=1,
                   help="fit the median over this many records ending at --record (repeated "
                        "sweeps of the same backends; 1)")
    f.add_argument("--min-bytes", type=parse_size, default=64 << 10,
                   help="fit and judge sizes from this up (64K)")
    f.add_argument("--tolerance", type=float, default=0.20,
                   help="relative error the prediction must stay within (0.20)")
    f.add_argument("--output", "-o", default=DEFAULT_FIT, help=f"fitted parameters ({DEFAULT_FIT}); "
                   "'-' for none")


def _pick_record(opts):
    path = Path(opts.input)
    if not path.is_file():
        raise UserError(f"--input {path} does not exist: run 'mpirun -np 2 hpcdl bench allreduce' first")
    recs = [r for r in records.read(path) if r.get("schema") == BENCH_SCHEMA and r.get("op") == "allreduce"]
    if opts.ranks is not None:
        recs = [r for r in recs if r.get("layout", {}).get("size") == opts.ranks]
    if opts.tag is not None:
        recs = [r for r in recs if opts.tag in (r.get("tag") or "")]
    if not recs:
        raise UserError(f"no allreduce record{' with %d ranks' % opts.ranks if opts.ranks else ''}"
                        f"{' tagged %r' % opts.tag if opts.tag else ''} in {path}")
    try:
        rec = recs[opts.record]
    except IndexError:
        raise UserError(f"--record {opts.record}: {path} holds {len(recs)} allreduce record(s)") from None
    if opts.records > 1:
        end = recs.index(rec) + 1
        if end < opts.records:
            raise UserError(f"--records {opts.records}: only {end} allreduce record(s) up to "
                            f"--record {opts.record} in {path}")
        rec = median_record(recs[end - opts.records:end])
    return rec, path


def median_record(recs):
    """One record whose rows hold, per backend, compression and size, the median over ``recs``.

    A sweep on a shared machine catches some sizes in a busy moment; the median of a few sweeps
    is the machine's behaviour rather than its neighbours'. Only rows present in every record
    are kept; the layout must agree.
    """
    import statistics
    sizes = {r["layout"]["size"] for r in recs}
    if len(sizes) != 1:
        raise UserError(f"--records: the records have different rank counts {sorted(sizes)}")
    keyed = [{(r["backend"], r["compression"], r["size_bytes"]): r for r in rec["rows"]}
             for rec in recs]
    rows = []
    for key, row in keyed[-1].items():
        if not all(key in k for k in keyed):
            continue
        new = dict(row)
        new["time_us"] = dict(row["time_us"], median=statistics.median(
            k[key]["time_us"]["median"] for k in keyed))
        new["reduce_us"] = statistics.median(k[key]["reduce_us"] for k in keyed)
        rows.append(new)
    out = dict(recs[-1], rows=rows)
    out["time"] = f"{recs[0].get('time')} .. {recs[-1].get('time')} (median of {len(recs)})"
    return out


def _human(nbytes) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g}{unit}"
    return f"{nbytes:g}"


def _gamma_of(row) -> float:
    return row["reduce_us"] * 1e-6 / row["size_bytes"] if row.get("reduce_us") else 0.0


def fit_record(record: dict, min_bytes: int = 64 << 10) -> dict:
    """Fit every backend+compression of one bench record; return the ``backends`` mapping."""
    from ..costmodel import algorithm_for, fit_regimes, predict_fit
    p = int(record["layout"]["size"])
    groups = {}
    for row in record["rows"]:
        groups.setdefault((row["backend"], row["compression"]), []).append(row)
    out = {}
    for (backend, comp), rows in groups.items():
        rows = sorted(rows, key=lambda r: r["size_bytes"])
        use = [r for r in rows if r["size_bytes"] >= min_bytes]
        if len(use) < 2:
            continue
        model = rows[0].get("model") or algorithm_for(backend, comp)
        sizes = [r["size_bytes"] for r in use]
        # gamma(n): the reduction hop's measured time per byte at each size (it too changes
        # between in-cache and out-of-cache sizes), not a single slope
        gam = [_gamma_of(r) for r in use]

        res = fit_regimes(model, sizes, [r["time_us"]["median"] * 1e-6 for r in use], p, gamma=gam)
        res["points"] = [[r["size_bytes"], r["time_us"]["median"] * 1e-6,
                          predict_fit(res, r["size_bytes"], p, gamma=_gamma_of(r))] for r in rows]
        out[backend if comp == "none" else f"{backend}+{comp}"] = res
    return out


def main(opts) -> int:
    from ..costmodel import FORMULAS
    record, path = _pick_record(opts)
    p = int(record["layout"]["size"])
    fits = fit_record(record, opts.min_bytes)
    if not fits:
        raise UserError(f"the record holds fewer than two sizes >= {opts.min_bytes} B per backend: "
                        "sweep to larger --maxbytes")
    print(f"# hpcdl bench fit: {path} record of {record.get('time')} ({p} ranks, "
          f"hosts {','.join(record['layout'].get('hosts', []))}); fit and judged from {opts.min_bytes} B")
    print("# models (n = float32 bytes, hpcdl.costmodel): "
          + "; ".join(f"{k} t = {v}" for k, v in FORMULAS.items()))
    print("# g (gamma) is measured: the reduction hop's local time per byte at each size, same run")
    print("# alpha, beta: one line over all sizes (weighted least squares on relative error); "
          "where it misses, up to three regimes (in cache, in memory, buffers mapped afresh per "
          "call), each [from-to] alpha beta, predict and are judged")
    print(f"#{'backend':>13} {'model':>9} {'alpha(us)':>10} {'beta(ns/B)':>11} {'gamma(ns/B)':>11} "
          f"{'r2':>7} {'max|err|':>8} {'within':>7}")
    verdicts = {}
    for key, res in fits.items():
        judged = [abs(pr / m - 1) for s, m, pr in res["points"] if s >= opts.min_bytes]
        ok = max(judged) <= opts.tolerance
        verdicts[key] = ok
        res["within_tolerance"] = ok
        print(f" {key:>13} {res['model']:>9} {res['alpha_s'] * 1e6:>10.2f} "
              f"{res['beta_s_per_byte'] * 1e9:>11.4f} {res['gamma_s_per_byte'] * 1e9:>11.4f} "
              f"{res['r2']:>7.4f} {max(judged) * 100:>7.1f}% {'yes' if ok else 'NO':>7}"
              + ("  " + "; ".join(f"[{_human(g['from_bytes'])}-{_human(g['to_bytes'])}] "
                                    f"{g['alpha_s'] * 1e6:.1f} us {g['beta_s_per_byte'] * 1e9:.3f} ns/B"
                                    for g in res["regimes"])
                 if len(res.get("regimes", ())) > 1 else ""))
    print("#")
    print(f"#{'backend':>13} {'size(B)':>11} {'measured(us)':>13} {'predicted(us)':>14} {'pred/meas':>9} {'fit':>4}")
    for key, res in fits.items():
        for size, meas, pred in res["points"]:
            print(f" {key:>13} {size:>11} {meas * 1e6:>13.1f} {pred * 1e6:>14.1f} {pred / meas:>9.3f} "
                  f"{'*' if size >= opts.min_bytes else '':>4}")
    good = sum(verdicts.values())
    print(f"# Prediction within +-{opts.tolerance * 100:.0f}% from {opts.min_bytes} B: {good}/{len(verdicts)} "
          f"backends ({', '.join(k for k, v in verdicts.items() if not v) or 'all'}"
          f"{' off' if good < len(verdicts) else ' within'})")
    if opts.output != "-":
        doc = {"schema": FIT_SCHEMA, "ranks": p, "min_bytes": opts.min_bytes,
               "tolerance": opts.tolerance,
               "source": {"path": str(path), "time": record.get("time"), "tag": record.get("tag")},
               "backends": fits,
               "manifest": records.manifest(extra={"bench_manifest": record.get("manifest", {})})}
        out = Path(opts.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        records.write_atomic(out, json.dumps(doc, indent=1, sort_keys=True,
                                             default=records._jsonable) + "\n")
        print(f"# Fit written to {out}")
    return 0

