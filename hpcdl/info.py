"""Show versions, the Horovod build, the MPI library, and the rank layout this process sees.

Horovod's build is read from its compiled library through ctypes, so no TensorFlow Python import
is needed; ``--check`` exits 2 unless Horovod is built with TensorFlow and MPI.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys
from typing import Optional

from . import cluster, records, stack
from .errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--check", action="store_true",
                   help="exit 2 unless Horovod is built with TensorFlow and MPI")


def horovod_build() -> dict:
    """Frameworks, controllers and tensor operations compiled into Horovod (no TF import)."""
    import importlib.util
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return {"installed": False}
    root = list(spec.submodule_search_locations)[0]
    out = {"installed": True, "version": records.package_version("horovod"),
           "frameworks": {}, "controllers": {}, "tensor_operations": {}}
    libs = {"tensorflow": glob.glob(os.path.join(root, "tensorflow", "mpi_lib*.so")),
            "pytorch": glob.glob(os.path.join(root, "torch", "mpi_lib_v2*.so")),
            "mxnet": glob.glob(os.path.join(root, "mxnet", "mpi_lib*.so"))}
    for fw, found in libs.items():
        out["frameworks"][fw] = bool(found)
    lib_path = (libs["tensorflow"] or libs["pytorch"] or [None])[0]
    if lib_path is None:
        return out
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        # The TensorFlow extension needs libtensorflow_framework; load it from its package first.
        tf_spec = importlib.util.find_spec("tensorflow")
        if tf_spec is not None and tf_spec.submodule_search_locations:
            tf_dir = list(tf_spec.submodule_search_locations)[0]
            for name in ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2"):
                if os.path.exists(os.path.join(tf_dir, name)):
                    ctypes.CDLL(os.path.join(tf_dir, name), mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(lib_path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        out["error"] = f"cannot load {lib_path}: {exc}"
        return out

    def flag(name: str) -> Optional[bool]:
        fn = getattr(lib, name, None)
        if fn is None:
            return None
        fn.restype = ctypes.c_bool
        return bool(fn())

    out["controllers"] = {"mpi": flag("horovod_mpi_built"), "gloo": flag("horovod_gloo_built")}
    out["tensor_operations"] = {"nccl": flag("horovod_nccl_built"), "ddl": flag("horovod_ddl_built"),
                                "ccl": flag("horovod_ccl_built"), "cuda": flag("horovod_cuda_built"),
                                "rocm": flag("horovod_rocm_built"),
                                "mpi": flag("horovod_mpi_built"), "gloo": flag("horovod_gloo_built")}
    return out


def collect() -> dict:
    layout = cluster.discover()
    return {"versions": records.versions(), "stack": stack.setup_facts() or None,
            "horovod_build": horovod_build(),
            "layout": layout.as_dict(), "threads_per_rank": cluster.threads_per_rank(layout),
            "executable": sys.executable}


def _stack_words(facts) -> str:
    if not facts:
        return "not set up by scripts/setup.sh (its stack and Horovod's patches unknown)"
    if facts.get("system"):
        return (f"{facts['stack']} (scripts/setup.sh HPCDL_STACK; TensorFlow and Horovod are "
                "the environment's own, used as they are: their patches unknown)")
    return (f"{facts['stack']} (scripts/setup.sh HPCDL_STACK; Horovod "
            + (f"{len(facts['horovod_patches'])} patch(es) from scripts/horovod-patches/"
               f"{facts['stack']}/" if facts.get("horovod_patches") else "unpatched") + ")")


def _mark(v) -> str:
    return "[X]" if v else "[ ]"


def import_error() -> Optional[str]:
    """Why ``import horovod.tensorflow`` fails here (its error, one line), None where it works:
    a built extension that does not load (another TensorFlow, a missing library) shows only here."""
    try:
        stack.import_tensorflow()
        import horovod.tensorflow  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure to import is the answer
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")
    return None


def main(opts) -> int:
    info = collect()
    hb = info["horovod_build"]
    good = bool(hb.get("installed") and hb["frameworks"].get("tensorflow") and hb["controllers"].get("mpi"))
    # only where the build's flags fail: a good build is checked without starting TensorFlow
    failed = import_error() if opts.check and hb.get("installed") and not good else None
    if opts.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        v = info["versions"]
        print(f"hpcdl       {v['hpcdl']}")
        print(f"Python      {v['python']} ({info['executable']})")
        print(f"TensorFlow  {v['tensorflow'] or 'not installed'}")
        print(f"Keras       {v['keras'] or 'not installed'} (tf.keras)")
        print(f"Stack       {_stack_words(info['stack'])}")
        print(f"Horovod     {v['horovod'] or 'not installed'}"
              + (f" + patches: {', '.join(v['horovod_patches'].split('+'))}"
                 if v.get("horovod_patches") else ""))
        if hb.get("installed"):
            print("  frameworks:        " + "  ".join(f"{_mark(b)} {k}" for k, b in hb["frameworks"].items()))
            print("  controllers:       " + "  ".join(f"{_mark(b)} {k}" for k, b in hb.get("controllers", {}).items()))
            print("  tensor operations: " + "  ".join(f"{_mark(b)} {k}" for k, b in hb.get("tensor_operations", {}).items()))
            if hb.get("error"):
                print(f"  error: {hb['error']}")
            if failed:
                print(f"  import horovod.tensorflow: FAILS: {failed}")
        print(f"MPI         {v['mpi'] or 'not found (no mpirun on PATH)'}")
        print(f"mpi4py      {v['mpi4py'] or 'not installed'}")
        print(f"numpy       {v['numpy'] or 'not installed'}")
        lay = info["layout"]
        print(f"Launcher    {lay['launcher']}: rank {lay['rank']} of {lay['size']}, local rank "
              f"{lay['local_rank']} of {lay['local_size']}, node {lay['node']} of {lay['num_nodes']} "
              f"({lay['host']}), {info['threads_per_rank']} thread(s) per rank")
    if opts.check and not hb.get("installed"):
        raise UserError("Horovod is not installed; build it with scripts/setup.sh (or load the "
                        "cluster's Horovod module)")
    if opts.check and failed:
        raise UserError(f"Horovod {info['versions']['horovod'] or ''} is installed but 'import "
                        f"horovod.tensorflow' fails ({failed}); rebuild it against this "
                        "TensorFlow with scripts/setup.sh")
    if opts.check and not good:
        raise UserError("Horovod is not built with TensorFlow and MPI"
                        + (f" ({hb['error']})" if hb.get("error") else "")
                        + "; rebuild it with scripts/setup.sh (HOROVOD_WITH_TENSORFLOW=1 "
                        "HOROVOD_WITH_MPI=1)")
    return 0
