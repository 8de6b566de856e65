"""Workloads: a model, its loss, its data, and how to measure it.

Built-ins are ``expmlp`` (the y = e^x MLP), ``mnist`` (softmax regression) and ``cnn``
(synthetic-image throughput). A user's own model is ``package.module:factory``; the factory is
called with the parsed options and returns ``(model, loss, dataset)`` or a dict with those keys
(and optionally ``optimizer`` and ``test``), where ``dataset`` is an unbatched ``tf.data``
dataset of ``(x, y)`` pairs or a tuple of numpy arrays.
"""
from __future__ import annotations

import importlib

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
    return _load_user(name, opts)


def _load_user(spec: str, opts) -> Workload:
    import tensorflow as tf

    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WorkloadError(f"cannot import workload module '{module_name}' ({exc}); "
                            "is it on PYTHONPATH?") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise WorkloadError(f"'{spec}': {module_name} has no callable '{attr}'")
    made = factory(opts)
    if isinstance(made, dict):
        parts = made
    else:
        try:
            model, loss, dataset = made
        except (TypeError, ValueError) as exc:
            raise WorkloadError(f"'{spec}' must return (model, loss, dataset) or a dict") from exc
        parts = {"model": model, "loss": loss, "dataset": dataset}
    for key in ("model", "loss", "dataset"):
        if key not in parts:
            raise WorkloadError(f"'{spec}' returned no '{key}'")
    loss = parts["loss"]
    if isinstance(loss, str):
        loss = tf.keras.losses.get(loss)
    optimizer = parts.get("optimizer")
    make_opt = optimizer if callable(optimizer) and not hasattr(optimizer, "apply_gradients") else (
        (lambda lr: optimizer) if optimizer is not None else (lambda lr: tf.keras.optimizers.Adam(lr)))
    return Workload(name=spec, model=parts["model"], loss=loss, make_optimizer=make_opt,
                    train=parts["dataset"], test=parts.get("test"), lr=parts.get("lr", 1e-3),
                    ref_batch=parts.get("ref_batch", 100), batch_size=parts.get("batch_size", 32),
                    steps=parts.get("steps", 100), accuracy=bool(parts.get("accuracy", False)))
