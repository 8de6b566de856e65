"""A user's own Sequential workload on a tf.data dataset, three layers (tests only)."""


def factory(opts):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(1)
    x = rng.normal(size=(1024, 8)).astype(np.float32)
    y = (np.sin(x[:, :1]) + 0.1 * x[:, 1:2]).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)),
                                 tf.keras.layers.Dense(16, activation="tanh"),
                                 tf.keras.layers.Dense(16, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    return {"model": model, "loss": "mse", "dataset": tf.data.Dataset.from_tensor_slices((x, y)),
            "batch_size": 32}
