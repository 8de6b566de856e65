"""The hpcdl command: train, bench, study, info.

Every command module is imported lazily and keeps TensorFlow, Horovod and mpi4py out of its top
level, so ``hpcdl --help``, ``hpcdl info`` and ``hpcdl study report`` start in well under a second.

Exit statuses: 0 success; 1 a crash (with a traceback); 2 a user error (one line naming what to
fix); 75 training stopped early on a signal or time limit after writing a checkpoint.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Callable, List, Optional

from . import __version__
from .errors import EXIT_FAILURE, EXIT_USAGE, UserError

# (name, module, help). Each module defines add_arguments(parser) and main(opts) -> int;
# a module may instead define register(subparsers) to add its own subcommand tree.
COMMANDS = [
    ("train", "hpcdl.train", "train a workload data-parallel (run under mpirun or srun)"),
    ("bench", "hpcdl.bench", "communication benchmarks (allreduce sweep, alpha-beta-gamma fit)"),
    ("study", "hpcdl.study_cli", "scaling studies: validate, run, submit, status, report"),
    ("info", "hpcdl.info", "versions, Horovod build, MPI library and the detected rank layout"),
]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, like every other user error
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hpcdl", description=(
        "Data-parallel deep-learning training and scaling studies on supercomputers. "
        "Launch training with 'mpirun -np N hpcdl train ...' or 'srun hpcdl train ...'."))
    parser.add_argument("--version", action="version", version=f"hpcdl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name, help_text in COMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue            # a command not in this build
            raise
        if hasattr(module, "register"):
            module.register(sub, name, help_text)
            continue
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip())
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def _abort_mpi(code: int) -> None:
    """End every rank of the job, not just this one, when MPI is live in this process."""
    mpi = sys.modules.get("mpi4py.MPI")
    hvd_live = "horovod.tensorflow" in sys.modules
    size = 1
    try:
        from . import cluster
        size = cluster.discover().size
    except Exception:  # noqa: BLE001
        pass
    if size <= 1:
        return
    sys.stderr.flush()
    sys.stdout.flush()
    if mpi is None and hvd_live:
        try:
            from mpi4py import MPI as mpi  # Horovod initialised MPI already; mpi4py attaches
        except Exception:  # noqa: BLE001
            mpi = None
    if mpi is not None:
        try:
            mpi.COMM_WORLD.Abort(code)
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    opts = parser.parse_args(argv)
    if not getattr(opts, "_main", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(opts._main(opts) or 0)
    except UserError as exc:
        from . import cluster
        layout = cluster.discover()
        prefix = f"{layout.tag} " if layout.size > 1 else ""
        sys.stderr.write(f"{prefix}hpcdl {opts.command}: error: {exc}\n")
        _abort_mpi(EXIT_USAGE)
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except SystemExit:
        raise
    except BaseException:
        import traceback
        from . import cluster
        layout = cluster.discover()
        sys.stderr.write(f"{layout.tag} hpcdl {opts.command}: unhandled error, ending the job:\n")
        traceback.print_exc()
        _abort_mpi(EXIT_FAILURE)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
