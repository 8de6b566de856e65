"""The stages of a pipeline (:mod:`.pipeline`): the functions one stage runs on a micro-batch,
where the model is cut into stages (equal layer counts, or by time: the cut whose slowest stage
is fastest), the checks of a job's layout against them, and the bubble GPipe's schedule gives."""
from __future__ import annotations

import time
from typing import List, Tuple

from ..errors import UserError


def cut(n_layers: int, stages: int) -> List[Tuple[int, int]]:
    """Contiguous [start, end) layer ranges of ``stages`` stages, as equal in count as they go."""
    if stages > n_layers:
        raise UserError(f"--stages {stages}: the model has {n_layers} layer(s), so at most "
                        f"{n_layers} stage(s)")
    base, extra = divmod(n_layers, stages)
    out, start = [], 0
    for k in range(stages):
        end = start + base + (1 if k < extra else 0)
        out.append((start, end))
        start = end
    return out


def stage_functions(tf, layers, loss_fn, micro: int, autograph: bool = True):
    """(fwd, bwd, last) of a stage of ``layers``: its forward; its backward, recomputing the
    forward, the gradients of its variables and its input from its output's; and, for the last
    stage, the micro-batch's loss (its mean over 1/micro of the batch) with those gradients."""
    variables = [v for layer in layers for v in layer.trainable_variables]
    function = tf.function(autograph=autograph)

    def forward(h):
        for layer in layers:
            h = layer(h, training=True)
        return h

    @function
    def fwd(a):
        return forward(a)

    @function
    def bwd(a, g_out):
        with tf.GradientTape() as tape:
            tape.watch(a)
            out = forward(a)
        return tape.gradient(out, variables + [a], output_gradients=g_out)

    @function
    def last(a, y):
        with tf.GradientTape() as tape:
            tape.watch(a)
            loss = tf.reduce_mean(loss_fn(y, forward(a))) / micro
        return (loss,) + tuple(tape.gradient(loss, variables + [a]))
    return fwd, bwd, last


def balanced_cut(costs: dict, n_layers: int, stages: int) -> List[Tuple[int, int]]:
    """The contiguous cut whose slowest stage is fastest, from ``costs[(a, b)]``: the seconds a
    micro-batch takes through layers [a, b) as a stage there (the last stage's own way)."""
    inf = float("inf")
    # best[k][b]: (slowest stage, cut) of the first b layers in k stages
    best = [[(inf, None)] * (n_layers + 1) for _ in range(stages + 1)]
    best[0][0] = (0.0, [])
    for k in range(1, stages + 1):
        for b in range(k, n_layers + 1):
            if k == stages and b != n_layers:
                continue
            for a in range(k - 1, b):
                prev, ranges = best[k - 1][a]
                if ranges is None or (a, b) not in costs:
                    continue
                worst = max(prev, costs[(a, b)])
                if worst < best[k][b][0]:
                    best[k][b] = (worst, ranges + [(a, b)])
    return best[stages][n_layers][1]


def time_stages(rep, stages: int, micro: int, repeats: int = 5) -> dict:
    """``{(a, b): seconds}``: one micro-batch of the first batch through each run of layers that
    a cut into ``stages`` can make a stage, forward and backward as that stage would run it
    (median of ``repeats`` after one untimed)."""
    import statistics
    tf, model, loss = rep.rt.tf, rep.model, rep.wl.loss
    layers, mb = model.layers, rep.plan.batch // micro
    x, y = rep.sample_batch()
    acts = [x[:mb]]
    for layer in layers:
        acts.append(layer(acts[-1], training=True))
    n, out = len(layers), {}
    for a in range(n):
        for b in range(a + 1, n + 1):
            if not _can_be_stage(a, b, n, stages):
                continue
            fwd, bwd, last = stage_functions(tf, layers[a:b], loss, micro, rep.wl.autograph)
            h = tf.constant(acts[a])
            if b == n:
                def run():
                    return [t.numpy() for t in last(h, y[:mb])]
            else:
                g = tf.ones_like(acts[b])

                def run():
                    fwd(h).numpy()
                    return [t.numpy() for t in bwd(h, g)]
            times = []
            for _ in range(repeats + 1):
                t0 = time.perf_counter()
                run()
                times.append(time.perf_counter() - t0)
            out[(a, b)] = statistics.median(times[1:])
    return out


def _can_be_stage(a: int, b: int, n: int, stages: int) -> bool:
    """Whether layers [a, b) of ``n`` are a stage of some cut into ``stages`` stages of at least
    one layer each: the first starts at 0, the last ends at n, stage k has k layers before it
    and stages - 1 - k after."""
    for k in range(stages):
        starts = a == 0 if k == 0 else a >= k
        ends = b == n if k == stages - 1 else b <= n - (stages - 1 - k)
        if starts and ends:
            return True
    return False


def bubble_expected(costs: List[float], micro: int) -> float:
    """The mean idle share of GPipe's schedule over stages of these per-micro-batch times: a
    step takes (M - 1) x the slowest stage + all of them once (fill and drain)."""
    step = (micro - 1) * max(costs) + sum(costs)
    return sum(1 - micro * c / step for c in costs) / len(costs)


def bubble_theory(stages: int, micro: int) -> float:
    """GPipe's idle share of a step for equal stages: (K - 1) / (M + K - 1)."""
    return (stages - 1) / (micro + stages - 1)


def check_layout(size: int, stages: int, batch: int, micro: int) -> None:
    """The job's ranks and the batch against the stages and micro-batches asked for."""
    if size != stages:
        raise UserError(f"--parallel pipeline --stages {stages} needs {stages} ranks, one "
                        f"per stage; this job has {size}")
    if batch % micro:
        raise UserError(f"--micro-batches {micro} does not divide the batch of {batch}")


def check(rep, stages: int, micro: int) -> None:
    rt, tf, model = rep.rt, rep.rt.tf, rep.model
    check_layout(rt.size, stages, rep.plan.batch, micro)
    if not isinstance(model, tf.keras.Sequential):
        raise UserError(f"--parallel pipeline cuts a Keras Sequential model; workload "
                        f"{rep.wl.name}'s model is a {type(model).__name__}")
    cut(len(model.layers), stages)          # enough layers


def choose_cut(rep, stages: int, micro: int, how: str):
    """(ranges, seconds per micro-batch of each stage or None): ``time``: rank 0 times every
    stage a cut could make and takes the cut whose slowest stage is fastest; ``layers``: equal
    layer counts. Every rank gets rank 0's (collective)."""
    rt = rep.rt
    found = None
    if rt.root:
        n = len(rep.model.layers)
        if how == "time" and stages > 1:
            costs = time_stages(rep, stages, micro)
            ranges = balanced_cut(costs, n, stages)
            found = (ranges, [costs[r] for r in ranges])
        else:
            found = (cut(n, stages), None)
    ranges, costs = rt.hvd.broadcast_object(found, root_rank=0, name="hpcdl.pipe.cut")
    return [tuple(r) for r in ranges], costs
