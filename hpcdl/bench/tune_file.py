"""What ``hpcdl tune`` (:mod:`.tune`) picked and how it says so: the pick for each compression
from a :class:`.tune.Search`'s figures (the confirmed one where confirmation ran, hpcdl's own
flat backends where they were faster), the table it prints, and the tuning file a run takes
(``hpcdl.tuning/1``, :mod:`hpcdl.comm.tuning`)."""
from __future__ import annotations

import json
import statistics
from typing import Dict, List, Optional, Tuple

from .tune_launch import PRUNE
from .. import cluster, machine, records
from ..costmodel import setting_name
from ..comm import tuning

MIB = 1 << 20


def setting_label(effective: dict, alg: Optional[str] = None) -> str:
    """A candidate's name: Horovod's settings ``effective``, after the algorithm "N/segment"."""
    if alg is None:
        return setting_name(effective).split(", ", 1)[1]
    number, segment = (int(x) for x in alg.split("/"))
    return setting_name({**effective, "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                         "OMPI_MCA_coll_tuned_allreduce_algorithm": str(number),
                         "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": str(segment)})


def rows(se, comp: str) -> List[Tuple[float, str, str, List[float]]]:
    """(median, setting key, algorithm, times) of every candidate measured for ``comp``, fastest first."""
    out = []
    for key, runs in se.runs.items():
        env = dict(json.loads(key))
        for alg in dict.fromkeys(a for run in runs for a in run["times"]):
            ts = se.times(env, alg, comp)
            if ts:
                out.append((statistics.median(ts), key, alg, ts))
    return sorted(out)


def picks(se, base: dict, alg: Tuple[int, int], confirm: dict) -> Dict[str, dict]:
    """Per compression the search's result, unless the confirmation found the default (the job's
    environment, the library's own algorithm) within ``--margin`` of it."""
    picks = {}
    for comp in se.comps:
        found = alg
        if not se.knobs and len(se.algorithms) > 1 and not se.backends:
            # only the algorithm was searched: every algorithm ran beside the default in the same
            # launches for every compression, so each compression takes its own fastest
            found = min(se.algorithms, key=lambda a: se.median({}, a, comp))
            confirm = dict(confirm, pick=dict(confirm["pick"], **{
                comp: se.times({}, f"{found[0]}/{found[1]}", comp)}))
        d = statistics.median(confirm["default"][comp])
        t = statistics.median(confirm["pick"][comp])
        cd, ct = (confirm.get("compute") or {}).get("default"), (confirm.get("compute") or {}).get("pick")
        both = cd is not None and ct is not None   # then the step's exchange and compute together
        chosen = t + ct < (1 - se.opts.margin) * (d + cd) if both else t < (1 - se.opts.margin) * d
        env_, alg_ = (base, found) if chosen else ({}, (0, 0))
        effective = se.effective(env_)
        picks[comp] = {"name": setting_label(effective, f"{alg_[0]}/{alg_[1]}"),
                       "env": pick_env(effective, alg_),
                       "exchange_s": t if chosen else d, "default_s": d,
                       "searched": setting_label(se.effective(base), f"{found[0]}/{found[1]}"),
                       "searched_s": t, "gain": d / t if chosen else 1.0, "chosen": chosen,
                       **({"compute_s": ct if chosen else cd, "default_compute_s": cd,
                           "searched_compute_s": ct,
                           "step_gain": (d + cd) / (t + ct) if chosen else 1.0} if both else {}),
                       "confirm_times_s": {k: confirm[k][comp] for k in ("default", "pick")}}
        if confirm.get("flat"):
            _flat_pick(se, picks[comp], comp, confirm, {"default": {}, "pick": base})
    return picks


def pick_env(effective: dict, alg: Tuple[int, int]) -> Dict[str, str]:
    """A pick's full settings: Horovod's ``effective`` ones and Open MPI's allreduce algorithm
    ``alg`` (dynamic rules on only where one is forced)."""
    return {**effective, "OMPI_MCA_coll_tuned_use_dynamic_rules": "1" if alg[0] else "0",
            "OMPI_MCA_coll_tuned_allreduce_algorithm": str(alg[0]),
            "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": str(alg[1])}


def _flat_name(backend: str, side: str) -> str:
    """A flat backend's candidate name: the backend, and whose launches timed it."""
    return f"hpcdl {backend}, no Horovod (in the {side}'s launches)"


def _flat_pick(se, pick: dict, comp: str, confirm: dict, envs: Dict[str, dict]) -> None:
    """Make ``pick`` (Horovod's, for ``comp``) a flat backend's where one was ``--margin`` faster
    in the same launches: by exchange + compute where both were measured (Horovod's compute with
    its thread beside it, the flat backend's with none, as each trains), else by exchange.
    Horovod's exchange overlaps the backward pass in a step, which these timings do not credit:
    ``benchmarks/tune_local.py`` checks the pick by training."""
    computed = confirm.get("flat_compute") or {}
    both = "compute_s" in pick and None not in computed.values()
    horovod = pick["exchange_s"] + (pick["compute_s"] if both else 0.0)
    cands = [{"backend": b, "side": side, "name": _flat_name(b, side),
              "times_s": by[comp], "compute_s": computed.get(side)}
             for side, v in confirm["flat"].items() for b, by in v.items() if by.get(comp)]
    pick["flat_candidates"] = cands
    best = min(cands, default=None, key=lambda fc: statistics.median(fc["times_s"])
               + ((fc["compute_s"] or 0.0) if both else 0.0))
    if best is None:
        return
    t = statistics.median(best["times_s"])
    c = best["compute_s"] if both else None
    step = t + (c or 0.0)
    if not step < (1 - se.opts.margin) * horovod:
        return
    backend, effective = best["backend"], se.effective(envs[best["side"]])
    pick.update({"backend": backend, "name": best["name"],
                 "env": pick_env(effective, (0, 0)),    # as it was timed: the library's choice
                 "horovod_pick": pick["name"], "exchange_s": t, "flat_gain": horovod / step,
                 **({"compute_s": c} if c is not None else {})})


def table(se, picks: dict, first: dict) -> List[str]:
    from ..costmodel import busbw_factor, wire_bytes
    nbytes, limit = first["bytes"], first.get("link_limit_s")
    copy = None if limit else first.get("memcpy_s")
    native = statistics.median([t for runs in se.runs.values() for r in runs for t in r["native"]])
    bus = busbw_factor(first["ranks"])
    computed = any(r.get("compute") for runs in se.runs.values() for r in runs)
    out = [f"{'compr':>5}  {'candidate':<66} {'n':>3} {'exchange(ms)':>12} "
           + (f"{'compute(ms)':>11} " if computed else "")
           + f"{'busbw(GB/s)':>11} {'vs MPI':>6} {'vs default':>10}"
           + ("  vs link" if limit else " vs memcpy" if copy else "")]
    for comp in se.comps:
        base = se.median({}, (0, 0), comp)
        # the link carries the compressed bytes: fp16's limit is half fp32's
        lim = limit and limit * wire_bytes(nbytes // 4, comp) / wire_bytes(nbytes // 4, "none")

        def row(name: str, n: int, t: float, c: Optional[float]) -> str:
            mark = "*" if name == picks[comp]["name"] else " "
            return (f"{comp:>5} {mark}{name:<66} {n:>3} {t * 1e3:>12.2f} "
                    + ((f"{c * 1e3:>11.1f} " if c is not None else f"{'-':>11} ")
                       if computed else "")
                    + f"{nbytes / t / 1e9 * bus:>11.3f} {native / t:>6.2f} "
                    f"{base / t:>10.2f}" + (f"  {lim / t:>7.2f}" if limit else
                                            f" {copy / t:>10.2f}" if copy else ""))
        for t, key, alg, ts in rows(se, comp):
            out.append(row(setting_label(dict(json.loads(key)), alg), len(ts), t,
                           se.compute(dict(json.loads(key)), alg) if computed else None))
        for fc in sorted(picks[comp].get("flat_candidates") or [],
                         key=lambda fc: statistics.median(fc["times_s"])):
            out.append(row(fc["name"], len(fc["times_s"]), statistics.median(fc["times_s"]),
                           fc["compute_s"]))
    out.append(f"# {first['tensors']} gradient tensors, {nbytes / MIB:.2f} MiB a step, {first['ranks']} "
               f"ranks on {first['nodes']} node(s); n: rounds measured (each the median of --iters)"
               + (f"; timed once, being over {PRUNE:g}x the fastest for every compression in the "
                  "first round: " + ", ".join(setting_label(se.effective({}), a) for a in first["dropped"])
                  if first.get("dropped") else ""))
    out.append(f"# references in the same launches: MPI_Allreduce of one buffer of those bytes "
               f"{native * 1e3:.2f} ms (busbw {nbytes / native / 1e9 * bus:.3f} GB/s)"
               + (f"; the link's limit for a ring {limit * 1e3:.2f} ms" if limit else "")
               + (f"; a memcpy of those bytes on every rank at once {copy * 1e3:.2f} ms (the "
                  "ranks share memory: a ring moves 2(p-1)/p of them through it at least)"
                  if copy else ""))
    out.append("# * the pick; vs MPI, vs default, vs link, vs memcpy: their time over the candidate's "
               "(above 1: the candidate is faster)"
               + ("; compute: the forward and backward pass on one batch while the setting's "
                  "Horovod ran beside it (measured in launches of one algorithm; a Horovod knob "
                  "goes by exchange + compute), for hpcdl's flat backends with no Horovod beside "
                  "it" if computed else "")
               + ("; fp16: busbw and vs MPI over the float32 bytes the step averages, vs link over "
                  "the half as many bytes on the wire" if "fp16" in se.comps else ""))
    for comp, pk in picks.items():
        n = len(pk["confirm_times_s"]["default"])
        step = "default_compute_s" in pk
        out.append(f"# {comp}: the search found {pk['searched']}; against the default, launched "
                   f"alike and alternating ({n} round(s) each): {pk['searched_s'] * 1e3:.2f} ms "
                   f"against {pk['default_s'] * 1e3:.2f} ms"
                   + (f" exchanging, {pk['searched_compute_s'] * 1e3:.1f} ms against "
                      f"{pk['default_compute_s'] * 1e3:.1f} ms computing beside it" if step else "")
                   + ", so the file takes "
                   + (f"it ({pk['step_gain' if step else 'gain']:.2f}x)" if pk["chosen"]
                      else "the default")
                   + _against_bound(pk, limit and limit * wire_bytes(nbytes // 4, comp)
                                    / wire_bytes(nbytes // 4, "none")))
        if pk.get("flat_candidates"):
            out.append(f"# {comp}: hpcdl's flat backends, timed in those launches before their "
                       "Horovod started (training starts none for them): "
                       + (f"{pk['name']} is {pk['flat_gain']:.2f}x Horovod's pick "
                          f"({pk['horovod_pick']}), so the file takes it; hpcdl train runs it "
                          "where no --backend is given" if pk.get("backend", "horovod") != "horovod"
                          else f"none was {se.opts.margin:.0%} faster than Horovod's pick"))
    return out


def _against_bound(pk: dict, bound: Optional[float]) -> str:
    """The file's pick against the link's bound for a ring (its bytes at the line rate), the
    bound a study's report holds each point's step to."""
    if not bound:
        return ""
    return (f"; it takes {pk['exchange_s'] / bound:.2f}x the link's bound for a ring "
            f"({bound * 1e3:.1f} ms, its bytes at the line rate)")


def document(se, picks: dict, first: dict, skipped: List[str],
              partial: bool = False) -> dict:
    import sys
    return {"partial": partial,
        "schema": tuning.SCHEMA, "time": records.now_iso(),
        "command": "hpcdl " + " ".join(a for a in sys.argv[1:]),
        "made_for": {"cluster": cluster.scheduler_facts().get("cluster") or first["host"],
                     "nodes": first["nodes"], "ranks": first["ranks"],
                     "ranks_per_node": first["ranks_per_node"], "cpu": records.cpu_identity(),
                     "mpi": records.mpi_library_version(),
                     "machine": machine.exchange_setting(first["host"])},
        "workload": first["workload"], "tensors": first["tensors"], "bytes": first["bytes"],
        "references": {"mpi_allreduce_s": statistics.median(
            [t for runs in se.runs.values() for r in runs for t in r["native"]]),
            "link_limit_s": first.get("link_limit_s"), "memcpy_s": first.get("memcpy_s")},
        "skipped": skipped, "launches": se.launches, "picks": picks,
        "candidates": [{"compression": comp, "name": setting_label(dict(json.loads(key)), alg),
                        "times_s": ts} for comp in se.comps for _, key, alg, ts in rows(se, comp)]
        + [{"compression": comp, "name": fc["name"], "backend": fc["backend"],
            "times_s": fc["times_s"]}
           for comp in se.comps for fc in picks[comp].get("flat_candidates") or []],
    }
