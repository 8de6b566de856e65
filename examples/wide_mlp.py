"""A user's own model for ``hpcdl train --workload examples.wide_mlp:factory``: a wide MLP on
synthetic features (1024 in, three hidden layers of 1536, 512 classes; 7.1 M parameters, 28 MB
of float32 gradients in 8 tensors). Its exchange outweighs its compute on a slow link, which is
where the allreduce algorithm matters. Run from the repository's root (or put it on PYTHONPATH)."""
import tensorflow as tf

FEATURES, WIDTH, CLASSES, SAMPLES = 1024, 1536, 512, 4096


def factory(opts):
    inputs = tf.keras.Input((FEATURES,))
    x = inputs
    for _ in range(3):
        x = tf.keras.layers.Dense(WIDTH, activation="relu")(x)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(CLASSES)(x))
    g = tf.random.Generator.from_seed(int(getattr(opts, "seed", 0) or 0))
    features = g.normal((SAMPLES, FEATURES))
    labels = g.uniform((SAMPLES,), maxval=CLASSES, dtype=tf.int32)
    data = tf.data.Dataset.from_tensor_slices((features, labels))
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return model, loss, data
