"""Image-classification throughput on synthetic data, as Horovod's synthetic benchmark measures it.

``--model`` picks a network from ``keras.applications`` (weights=None) or a small CNN for CPUs;
``--image-size`` sets the input resolution.
"""
from __future__ import annotations

from .base import Workload, WorkloadError

APPLICATIONS = {
    "resnet50": "ResNet50",
    "resnet101": "ResNet101",
    "vgg16": "VGG16",
    "mobilenetv2": "MobileNetV2",
    "densenet121": "DenseNet121",
}
MODELS = tuple(APPLICATIONS) + ("small",)


def _small(tf, size: int, classes: int):
    """A 4-layer CNN (about 0.6 M parameters at 10 classes) for throughput on CPUs."""
    L = tf.keras.layers
    return tf.keras.Sequential([
        tf.keras.Input(shape=(size, size, 3)),
        L.Conv2D(32, 3, padding="same", activation="relu"), L.MaxPool2D(),
        L.Conv2D(64, 3, padding="same", activation="relu"), L.MaxPool2D(),
        L.Conv2D(128, 3, padding="same", activation="relu"), L.GlobalAveragePooling2D(),
        L.Dense(256, activation="relu"), L.Dense(classes),
    ], name="small_cnn")


def build(opts) -> Workload:
    import tensorflow as tf

    name = getattr(opts, "model", None) or "resnet50"
    size = int(getattr(opts, "image_size", None) or 224)
    classes = int(getattr(opts, "num_classes", None) or 1000)
    batch = int(getattr(opts, "batch_size", None) or 32)
    if size < 32 and name != "small":
        raise WorkloadError(f"--image-size {size} is too small for {name} (needs >= 32)")
    if name == "small":
        model = _small(tf, size, classes)
    elif name in APPLICATIONS:
        ctor = getattr(tf.keras.applications, APPLICATIONS[name])
        model = ctor(weights=None, input_shape=(size, size, 3), classes=classes,
                     classifier_activation=None)
    else:
        raise WorkloadError(f"unknown --model '{name}': choose one of {', '.join(MODELS)}")
    seed = int(getattr(opts, "seed", 0) or 0)
    x = tf.random.stateless_uniform([batch, size, size, 3], seed=[seed, 1])
    y = tf.random.stateless_uniform([batch], seed=[seed, 2], maxval=classes, dtype=tf.int64)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return Workload(name="cnn", autograph=False, model=model, loss=loss,
                    make_optimizer=lambda lr: tf.keras.optimizers.SGD(lr, momentum=0.9),
                    synthetic=(x, y), lr=0.0125, ref_batch=32, batch_size=32, steps=110,
                    unit="img", info={"model": name, "image_size": size, "classes": classes,
                                      "params": int(model.count_params())})
