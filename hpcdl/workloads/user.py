"""A user's own workload, ``package.module:factory``: the factory called with the parsed options,
its values checked one by one before training (which is wrong and what was expected), then
made a :class:`.base.Workload`."""
from __future__ import annotations

import importlib

from .base import Workload, WorkloadError


def load_user(spec: str, opts) -> Workload:
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
    loss = _checked(spec, parts, tf)
    optimizer = parts.get("optimizer")
    make_opt = optimizer if callable(optimizer) and not hasattr(optimizer, "apply_gradients") else (
        (lambda lr: optimizer) if optimizer is not None else (lambda lr: tf.keras.optimizers.Adam(lr)))
    return Workload(name=spec, model=parts["model"], loss=loss, make_optimizer=make_opt,
                    train=parts["dataset"], test=parts.get("test"), lr=parts.get("lr", 1e-3),
                    ref_batch=parts.get("ref_batch", 100), batch_size=parts.get("batch_size", 32),
                    steps=parts.get("steps", 100), accuracy=bool(parts.get("accuracy", False)))


_ORDER = "the factory returns (model, loss, dataset) or a dict with those keys"


def _checked(spec: str, parts: dict, tf):
    """The loss of a user factory's values, each checked before training: which one is wrong
    and what was expected, instead of TensorFlow's traceback from the first step."""
    model, loss, data = parts["model"], parts["loss"], parts["dataset"]
    if not (callable(model) and hasattr(model, "trainable_variables")):
        raise WorkloadError(f"'{spec}': its model (the first value) is a {type(model).__name__}, "
                            f"not a Keras model; {_ORDER}")
    if isinstance(loss, str):
        try:
            loss = tf.keras.losses.get(loss)
        except ValueError:
            raise WorkloadError(f"'{spec}': its loss (the second value) {loss!r} names no Keras "
                                "loss") from None
    if not callable(loss):
        raise WorkloadError(f"'{spec}': its loss (the second value) is a {type(loss).__name__}, "
                            f"not a function of (labels, predictions) nor a Keras loss's name; {_ORDER}")
    x, y = _first_pair(spec, data, tf)
    try:
        out = model(x)
        _widths_meet(spec, out, y, tf)
        value = loss(y, out)
        bad = not bool(tf.reduce_all(tf.math.is_finite(tf.cast(value, tf.float32))))
    except WorkloadError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever TensorFlow raised, said in one line
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise WorkloadError(f"'{spec}': its model's output on a batch of features {tuple(x.shape)} "
                            f"does not meet labels {tuple(y.shape)} under its loss ({first}); "
                            "check the model's output width against the labels") from None
    if bad:
        raise WorkloadError(f"'{spec}': its loss on the first sample is not finite")
    return loss


def _first_pair(spec: str, data, tf):
    """The dataset's first (features, labels), batched by one; WorkloadError where the dataset
    (the third value) is not (x, y) pairs of numbers."""
    expect = ("an unbatched tf.data dataset of (x, y) pairs or a tuple of two numpy arrays of "
              "numbers")
    if isinstance(data, (tuple, list)) and len(data) == 2:
        x, y = data[0][:1], data[1][:1]
    elif isinstance(data, tf.data.Dataset):
        spec_ = data.element_spec
        if not (isinstance(spec_, tuple) and len(spec_) == 2):
            raise WorkloadError(f"'{spec}': its dataset (the third value) yields "
                                f"{type(spec_).__name__}, not (x, y) pairs; expected {expect}")
        x, y = next(iter(data.take(1)))
        x, y = x[None, ...], y[None, ...]
    else:
        raise WorkloadError(f"'{spec}': its dataset (the third value) is a "
                            f"{type(data).__name__}; expected {expect}; {_ORDER}")
    for what, arr in (("features", x), ("labels", y)):
        if not _numeric(arr, tf):
            raise WorkloadError(f"'{spec}': its dataset's {what} are "
                                f"{getattr(arr, 'dtype', type(arr).__name__)}, not numbers; "
                                f"expected {expect}")
    return x, y


def _numeric(arr, tf) -> bool:
    try:
        dtype = tf.as_dtype(arr.dtype)
    except (AttributeError, TypeError):
        return False
    return dtype.is_floating or dtype.is_integer or dtype.is_bool


def _widths_meet(spec: str, out, y, tf) -> None:
    """The model's output as wide as the labels, or the labels class numbers (integers: one per
    sample, or one per position of a sequence) for an output of one column per class: a loss
    would otherwise broadcast one against the other and train on nonsense without an error. A
    model of several outputs is left to its loss."""
    if not (hasattr(out, "shape") and hasattr(y, "shape")) or len(out.shape) < 2:
        return
    width = int(out.shape[-1])
    ylast = int(y.shape[-1]) if len(y.shape) > 1 else 1
    classes = tf.as_dtype(y.dtype).is_integer and (ylast == 1 or len(y.shape) == len(out.shape) - 1)
    if width != ylast and not classes:
        raise WorkloadError(f"'{spec}': its model's output is {width} wide and its labels "
                            f"{ylast} ({tuple(out.shape)} against {tuple(y.shape)}); check the "
                            "model's output width against the labels")
