"""A plain Keras script without Horovod (one process), with or without hpcdl's ScalingRecorder:
``python keras_plain.py RESULTS WEIGHTS.npz [--no-recorder]``. Deterministic on the CPU, so the
weights it saves show whether the callback changed the training."""
import sys

import numpy as np
import tensorflow as tf

from hpcdl.train.keras import ScalingRecorder


def main(results, weights, recorder=True):
    tf.keras.utils.set_random_seed(7)
    tf.config.experimental.enable_op_determinism()
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    x = rng.random((640, 12), dtype=np.float32)
    y = (x.sum(axis=1) > 6).astype("int64")
    model = tf.keras.Sequential([tf.keras.Input((12,)), tf.keras.layers.Dense(32),
                                 tf.keras.layers.BatchNormalization(),
                                 tf.keras.layers.ReLU(), tf.keras.layers.Dense(2)], name="plain")
    model.compile(tf.keras.optimizers.SGD(0.05),
                  tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [ScalingRecorder(results, batch_size=16, warmup=4, per_iter=4, log_every=10)] \
        if recorder else []
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, callbacks=callbacks, verbose=0)
    np.savez(weights, *[v.numpy() for v in model.variables])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--no-recorder" not in sys.argv)
