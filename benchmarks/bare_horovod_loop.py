#!/usr/bin/env python
"""The canonical Horovod synthetic-benchmark loop, nothing else, on hpcdl's cnn workload.

As Horovod's ``examples/tensorflow2/tensorflow2_synthetic_benchmark.py``: the model, a
``DistributedGradientTape``, the optimizer step, variables broadcast after the first batch, and
per iteration the wall time of ``--num-batches-per-iter`` steps; prints
``Total img/sec on N rank(s): X +-Y``. The model, data, loss, optimizer, learning rate, threads
and rank defaults are hpcdl's own (the same functions ``hpcdl train`` calls), so the only
difference from ``hpcdl train --workload cnn`` is the loop around the step.

    mpirun -np 2 python -m benchmarks.bare_horovod_loop --model resnet50 --image-size 64 --batch-size 8
"""
import argparse
import sys
import timeit


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--num-warmup-batches", type=int, default=10)
    ap.add_argument("--num-batches-per-iter", type=int, default=10)
    ap.add_argument("--num-iters", type=int, default=10)
    opts = ap.parse_args(argv)
    opts.seed, opts.data = 0, None

    from hpcdl import cluster, workloads
    layout = cluster.discover()
    threads = cluster.configure_threads(layout)
    cluster.apply_rank_defaults()
    import numpy as np
    import tensorflow as tf
    cluster.apply_tf_threads(tf, threads)
    import horovod.tensorflow as hvd
    hvd.init()
    tf.keras.utils.set_random_seed(0)
    wl = workloads.load("cnn", opts)
    model, (data, target) = wl.model, wl.synthetic
    opt = wl.make_optimizer(wl.lr * opts.batch_size * hvd.size() / wl.ref_batch)

    @tf.function
    def benchmark_step(first_batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(wl.loss(target, model(data, training=True)))
        tape = hvd.DistributedGradientTape(tape)
        gradients = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(gradients, model.trainable_variables))
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            ov = opt.variables
            hvd.broadcast_variables(ov() if callable(ov) else ov, root_rank=0)

    def log(s):
        if hvd.rank() == 0:
            print(s, flush=True)

    log(f"Model: {opts.model}, image size {opts.image_size}, batch size {opts.batch_size} per rank, "
        f"{hvd.size()} rank(s), {threads} thread(s)/rank")
    benchmark_step(first_batch=True)
    timeit.timeit(lambda: benchmark_step(first_batch=False), number=opts.num_warmup_batches - 1)
    img_secs = []
    for _ in range(opts.num_iters):
        t = timeit.timeit(lambda: benchmark_step(first_batch=False), number=opts.num_batches_per_iter)
        img_secs.append(opts.batch_size * opts.num_batches_per_iter / t)
    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    log(f"Total img/sec on {hvd.size()} rank(s): {hvd.size() * mean:.1f} +-{hvd.size() * conf:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
