"""Data-parallel deep-learning training and scaling studies on supercomputers."""

__version__ = "0.1.0"
