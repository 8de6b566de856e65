"""Data-parallel deep-learning training and scaling studies on supercomputers."""

__version__ = "0.1.0"

from .stack import prefer_legacy_keras as _prefer_legacy_keras

# before anything imports TensorFlow: on TensorFlow >= 2.16 tf.keras is then tf-keras (Keras 2),
# which Horovod 0.28.1 can train (hpcdl.stack says why)
_prefer_legacy_keras()
