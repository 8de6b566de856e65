"""y = e^x approximated by a 1-16-32-1 MLP with leaky ReLU, trained with Adam at batch 100."""
from __future__ import annotations

import numpy as np

from .base import Workload

X_RANGE = (-2.0, 2.0)
NUM_TRAIN = 20_000
NUM_TEST = 1_000


def make_data(seed: int = 0):
    """Training points drawn uniformly from X_RANGE (fixed by the seed) and an even test grid."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(*X_RANGE, size=(NUM_TRAIN, 1)).astype(np.float32)
    xt = np.linspace(*X_RANGE, NUM_TEST, dtype=np.float32).reshape(-1, 1)
    return (x, np.exp(x)), (xt, np.exp(xt))


def build(opts) -> Workload:
    import tensorflow as tf

    seed = int(getattr(opts, "seed", 0) or 0)
    leaky = tf.keras.layers.LeakyReLU(alpha=0.2)
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(1,)),
        tf.keras.layers.Dense(16, activation=leaky),
        tf.keras.layers.Dense(32, activation=tf.keras.layers.LeakyReLU(alpha=0.2)),
        tf.keras.layers.Dense(1),
    ], name="expmlp")
    train, test = make_data(seed)
    mse = tf.keras.losses.MeanSquaredError()
    return Workload(name="expmlp", autograph=False, model=model, loss=mse,
                    make_optimizer=lambda lr: tf.keras.optimizers.Adam(lr),
                    train=train, test=test, lr=1e-2, ref_batch=100, batch_size=100, steps=1000,
                    info={"layers": [1, 16, 32, 1], "activation": "leaky_relu", "x_range": X_RANGE})
