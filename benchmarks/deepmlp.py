"""A workload of equal layers for the pipeline's bubble: eight Dense(512) layers with ReLU on
random inputs, a regression head, loaded as ``--workload benchmarks.deepmlp:factory`` from the
repository's root. Every layer costs the same, so a cut can make equal stages."""


def factory(opts):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(8192, 512)).astype(np.float32)
    y = rng.normal(size=(8192, 1)).astype(np.float32)
    layers = [tf.keras.Input(shape=(512,))]
    layers += [tf.keras.layers.Dense(512, activation="relu") for _ in range(8)]
    layers += [tf.keras.layers.Dense(1)]
    model = tf.keras.Sequential(layers, name="deepmlp")
    return {"model": model, "loss": "mse", "dataset": tf.data.Dataset.from_tensor_slices((x, y)),
            "batch_size": 256, "steps": 60}
