"""Workloads: a model, its loss, its data, and how to measure it.

Built-ins are ``expmlp`` (the y = e^x MLP), ``mnist`` (softmax regression) and ``cnn``
(synthetic-image throughput). A user's own model is ``package.module:factory``; the factory is
called with the parsed options and returns ``(model, loss, dataset)`` or a dict with those keys
(and optionally ``optimizer`` and ``test``), where ``dataset`` is an unbatched ``tf.data``
dataset of ``(x, y)`` pairs or a tuple of numpy arrays.
"""
from __future__ import annotations

from .base import Workload, WorkloadError

BUILTIN = ("expmlp", "mnist", "cnn")


def resolve(name: str) -> str:
    """Check a workload name without importing TensorFlow; return it unchanged."""
    if name in BUILTIN:
        return name
    if ":" in name:
        module, _, attr = name.partition(":")
        if module and attr:
            return name
    raise WorkloadError(f"unknown workload '{name}': choose one of {', '.join(BUILTIN)}, "
                        "or give your own as package.module:factory")


def load(name: str, opts) -> Workload:
    """Build the workload (imports TensorFlow)."""
    resolve(name)
    if name == "expmlp":
        from . import expmlp
        return expmlp.build(opts)
    if name == "mnist":
        from . import mnist
        return mnist.build(opts)
    if name == "cnn":
        from . import cnn
        return cnn.build(opts)
    from .user import load_user
    return load_user(name, opts)
