"""Which TensorFlow stack this environment is: TensorFlow, the Keras that ``tf.keras`` is, and
the patches Horovod was built with.

``scripts/setup.sh`` installs one of two stacks (``HPCDL_STACK``): *tf2.15*, TensorFlow 2.15.1
with its own Keras 2 on Python 3.9–3.11, Horovod 0.28.1 unpatched; and *tf2.21*, TensorFlow
2.21 on Python 3.11–3.12 with tf-keras 2.21 as ``tf.keras``, Horovod 0.28.1 built with the
patches in ``scripts/horovod-patches/tf2.21/``. It writes the stack's name and patches to
``hpcdl-stack.json`` in the venv, which :func:`horovod_patches` reads for ``hpcdl info`` and every
record's manifest.

Why tf-keras and not Keras 3 on TensorFlow ≥ 2.16: Horovod 0.28.1 (its last release) keys
gradients by ``Variable.ref()``, which Keras 3's variables do not have (horovod issue 4290), and
its Keras integration (``horovod.tensorflow.keras``: the optimizer wrapper and callbacks that
users' own ``model.fit`` scripts take) subclasses Keras 2's optimizer. TensorFlow reads
``TF_USE_LEGACY_KERAS`` when it is first imported, so importing hpcdl sets it (unless the user
did: :func:`prefer_legacy_keras`) before anything imports TensorFlow, and its processes'
children inherit it; a script that imports TensorFlow itself before hpcdl gets a
clear error from :func:`check_keras` instead of Horovod's.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import List, Optional

from .cluster import LEGACY_KERAS, legacy_keras, set_legacy_keras
from .errors import UserError

STACK_FILE = "hpcdl-stack.json"


def package_version(*names: str) -> Optional[str]:
    """The installed version of the first of ``names`` that is installed, else None."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def tensorflow_version() -> Optional[str]:
    return package_version("tensorflow-cpu", "tensorflow", "tensorflow-gpu", "tf-nightly")


def keras_3_by_default(tf_version: Optional[str]) -> bool:
    """TensorFlow 2.16 and later make ``tf.keras`` Keras 3 unless told otherwise."""
    if not tf_version:
        return False
    major, minor = (int(x) for x in tf_version.split(".")[:2])
    return (major, minor) >= (2, 16)


def prefer_legacy_keras(environ=None) -> None:
    """Make ``tf.keras`` Keras 2 in this process and its children, before TensorFlow loads: on
    TensorFlow ≥ 2.16, TF_USE_LEGACY_KERAS=1 unless the user set it; on earlier TensorFlow
    without tf-keras installed, no TF_USE_LEGACY_KERAS asking for it (TensorFlow 2.15 honours
    it too, and then fails to import tf.keras: a variable inherited from a tf2.21 environment
    would break a tf2.15 one)."""
    tf = tensorflow_version()
    if tf is None:
        return
    new = keras_3_by_default(tf)
    if new or package_version("tf-keras", "tf_keras") is None:
        set_legacy_keras(new, environ)


def keras(environ=None, tf: Optional[str] = "") -> Optional[str]:
    """What ``tf.keras`` is in this environment, as 'package version', read from the installed
    packages without importing TensorFlow; None without TensorFlow. ``tf``: TensorFlow's
    version where the caller has looked it up already."""
    tf = tensorflow_version() if tf == "" else tf
    if tf is None:
        return None
    if keras_3_by_default(tf) and legacy_keras(environ):
        return f"tf-keras {package_version('tf-keras', 'tf_keras') or '(not installed)'}"
    return f"keras {package_version('keras') or '(not installed)'}"


def check_keras(tf) -> None:
    """Refuse to go on where ``tf.keras`` is Keras 3, which Horovod 0.28.1 cannot train."""
    version = str(getattr(tf.keras, "__version__", "2"))
    if int(version.split(".")[0]) >= 3:
        raise UserError(
            f"tf.keras is Keras {version} (TensorFlow {tf.__version__}): Horovod 0.28.1 cannot "
            f"average Keras 3's variables (they have no .ref(), horovod issue 4290). Set "
            f"{LEGACY_KERAS}=1 before TensorFlow is imported, with tf-keras installed "
            f"(scripts/setup.sh with HPCDL_STACK=tf2.21 does both; 'source .venv/bin/activate' "
            f"exports it), or import hpcdl before TensorFlow")


def setup_facts(prefix: Optional[str] = None) -> dict:
    """What scripts/setup.sh wrote of the stack it installed ({} outside such a venv)."""
    path = Path(prefix or sys.prefix) / STACK_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def horovod_patches(prefix: Optional[str] = None) -> List[str]:
    """The patches Horovod was built with, by file name, in the order applied."""
    return [str(p) for p in setup_facts(prefix).get("horovod_patches") or []]


# What TensorFlow 2.21's CPU wheel writes to stderr at import through absl, before its logging is
# set up and so whatever TF_CPP_MIN_LOG_LEVEL says: twice per process, on every rank. On CPUs
# where oneDNN's custom operations are on by default (AVX-512 VNNI and newer), also its note
# that they are, twice (TF_ENABLE_ONEDNN_OPTS; a record's manifest keeps that variable if set).
_START_NOISE = re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called "
                          r"are written to STDERR$|cudart_stub\.cc:\d+\] Could not find cuda drivers"
                          r"|port\.cc:\d+\] oneDNN custom operations are on\.")


def import_tensorflow():
    """TensorFlow, imported with its start-up notes about CUDA left out of stderr (a CPU run
    needs none of them, and an error hpcdl reports in one line stays one line); anything else
    TensorFlow writes there while it loads is passed on."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    sys.stderr.flush()
    with tempfile.TemporaryFile() as caught:
        saved = os.dup(2)
        os.dup2(caught.fileno(), 2)
        try:
            import tensorflow as tf
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            for line in caught.read().decode(errors="replace").splitlines(keepends=True):
                if not _START_NOISE.search(line.rstrip("\n")):
                    sys.stderr.write(line)
            sys.stderr.flush()
    return tf
