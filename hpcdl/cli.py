"""The hpcdl command: train, bench, tune, study, info.

Every command module is imported lazily and keeps TensorFlow, Horovod and mpi4py out of its top
level, so ``hpcdl --help``, ``hpcdl info`` and ``hpcdl study report`` start in well under a second.

Exit statuses: 0 success; 1 a crash (with a traceback); 2 a user error (one line naming what to
fix); 3 the run ended but its record is in a fallback file (named on stderr), not the results
file asked for; 75 training stopped early on a signal or time limit after writing a checkpoint.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from typing import List, Optional

from . import __version__
from .errors import EXIT_FAILURE, EXIT_USAGE, UserError

# (name, module, help). Each module defines add_arguments(parser) and main(opts) -> int;
# a module may instead define register(subparsers) to add its own subcommand tree.
COMMANDS = [
    ("train", "hpcdl.train.run", "train a workload data-parallel (run under mpirun or srun)"),
    ("bench", "hpcdl.bench", "communication benchmarks (allreduce sweep, alpha-beta-gamma fit)"),
    ("tune", "hpcdl.bench.tune", "the allocation's fastest exchange settings, into a tuning file "
                           "(run under mpirun or srun)"),
    ("study", "hpcdl.study.cli", "scaling studies: validate, run, submit, status, report"),
    ("info", "hpcdl.info", "versions, Horovod build, MPI library and the detected rank layout"),
]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, like every other user error
        layout = _layout()
        if layout.size > 1 and layout.rank != 0:
            _wait_for_rank0()
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
        # --help shows the docstring's first paragraph: what the command does, for users
        p = sub.add_parser(name, help=help_text,
                           description=(module.__doc__ or help_text).strip().split("\n\n")[0])
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def _mpi_if_live():
    """mpi4py's MPI module when this process has initialised MPI (through mpi4py or Horovod).

    Never initialises MPI itself: MPI_Init is collective under Open MPI and would wait forever for
    ranks that have already failed.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        if "horovod.common.basics" not in sys.modules and "horovod.tensorflow" not in sys.modules:
            return None
        try:
            import mpi4py
            mpi4py.rc.initialize = False
            mpi4py.rc.finalize = False
            from mpi4py import MPI as mpi
        except Exception:  # noqa: BLE001 - no mpi4py, or its libmpi does not load
            return None
    try:
        return mpi if mpi.Is_initialized() and not mpi.Is_finalized() else None
    except Exception:  # noqa: BLE001
        return None


def _end_job(code: int, layout) -> None:
    """End every rank of the job, not just this one.

    With MPI live, ``MPI_Abort`` makes mpirun (or srun through PMIx) kill the other ranks at
    once, wherever they are blocked; otherwise this process leaves with ``code`` and the launcher
    ends the job on the non-zero exit (mpirun always; srun with ``--kill-on-bad-exit=1``).
    ``os._exit`` skips interpreter teardown, which can block on Horovod's background thread.
    """
    sys.stderr.flush()
    sys.stdout.flush()
    if layout.size > 1:
        mpi = _mpi_if_live()
        if mpi is not None:
            try:
                mpi.COMM_WORLD.Abort(code)
            except Exception:  # noqa: BLE001
                pass
    os._exit(code)


# How long a rank other than 0 waits before reporting a user error: an error every rank hits (a
# bad flag, an impossible split) is then reported once, by rank 0, which ends the job meanwhile.
# Ranks start seconds apart on a loaded node (a cold file cache, another job's ranks): 2 s let
# both ranks of a 2-rank job report the same bad flag on a 2-core machine running two suites.
# Only an error that rank 0 does not hit waits this long to be seen.
_USER_ERROR_GRACE_S = 10.0


def _wait_for_rank0() -> None:
    import time
    time.sleep(_USER_ERROR_GRACE_S)


def _layout():
    from . import cluster
    try:
        return cluster.discover()
    except Exception:  # noqa: BLE001 - reporting an error must not fail on a bad environment
        return cluster.Layout()


def _warning_line(message, category, filename, lineno, file=None, line=None):
    """hpcdl's own warnings (a skipped torn record) as one line; others as Python shows them."""
    if category.__module__.startswith("hpcdl"):
        (file or sys.stderr).write(f"hpcdl: {message}\n")
    else:
        _show_warning(message, category, filename, lineno, file, line)


_show_warning = warnings.showwarning


def main(argv: Optional[List[str]] = None) -> int:
    """Run one hpcdl command. As the program (``argv`` None), a process that loaded TensorFlow
    leaves through :func:`_leave` once the command has returned."""
    code = _command(argv)
    if argv is None:
        _leave(code)
    return code


def _leave(code: int) -> None:
    """End a process that loaded TensorFlow without Python's teardown of its modules.

    Tearing down TensorFlow's thousands of modules costs every process seconds of CPU after
    its work is done (docs/decisions.md), in every rank of every run and every point of a study. What a normal exit does that matters runs
    first, in its order: non-daemon threads are joined, the atexit handlers run (Horovod's
    shutdown, logging's flush, TensorFlow's own), MPI is finalised where it is still live
    (mpi4py would do it at teardown), stdout and stderr are flushed. A process without
    TensorFlow returns as usual.
    """
    if "tensorflow" not in sys.modules:
        return
    import atexit
    import threading
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon and thread.is_alive():
            thread.join()
    atexit._run_exitfuncs()
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            mpi.Finalize()
    except Exception:  # noqa: BLE001 - MPI's own teardown would have met the same error
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _command(argv: Optional[List[str]]) -> int:
    warnings.showwarning = _warning_line
    parser = build_parser()
    opts = parser.parse_args(argv)
    if not getattr(opts, "_main", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        try:
            return int(opts._main(opts) or 0)
        except (MemoryError, Exception) as exc:
            if isinstance(exc, MemoryError) or type(exc).__name__ == "ResourceExhaustedError":
                # TensorFlow's or Python's: the model and batch do not fit this node's memory
                raise UserError(f"out of memory ({type(exc).__name__}"
                                f"{': ' + str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                                "lower --batch-size (or the image size), or use more ranks "
                                "with strong scaling") from None
            raise
    except UserError as exc:
        layout = _layout()
        message = str(exc).strip().replace("\n", " ") or type(exc).__name__
        if layout.size <= 1:
            sys.stderr.write(f"hpcdl {opts.command}: error: {message}\n")
            return EXIT_USAGE
        if layout.rank != 0:
            _wait_for_rank0()
        sys.stderr.write(f"{layout.tag} hpcdl {opts.command}: error: {message}\n")
        _end_job(EXIT_USAGE, layout)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        code = getattr(exc, "exit_code", 130)       # 128 + the signal's number
        sys.stderr.write(f"interrupted ({'SIGTERM' if code == 143 else 'SIGINT'}); exit {code}\n")
        return code
    except SystemExit:
        raise
    except BaseException as exc:
        import traceback
        layout = _layout()
        traceback.print_exc()
        # The last line names the rank and host, so that it is what a user sees first in a log;
        # only ranks of a job of several have a job to end
        sys.stderr.write(f"{layout.tag} hpcdl {opts.command}: {type(exc).__name__}: {exc}"
                         + (f"; ending the job (rank {layout.rank} of {layout.size} on "
                            f"{layout.host})" if layout.size > 1 else "") + "\n")
        if layout.size > 1:
            _end_job(EXIT_FAILURE, layout)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
