"""One rank of a user's own command, with the threads ``hpcdl train`` would take.

``python -m hpcdl.launch.with_threads COMMAND...``, started by mpirun or srun once per rank,
exports OMP_NUM_THREADS and TensorFlow's thread counts for this rank
(:func:`hpcdl.cluster.thread_env`) unless the user exported them already, then becomes the
command (exec: its exit status and signals are the command's own)."""
from __future__ import annotations

import os
import sys
from typing import List, Optional

from .. import cluster


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m hpcdl.launch.with_threads COMMAND [ARGS...]", file=sys.stderr)
        return 2
    for name, value in cluster.thread_env().items():
        os.environ.setdefault(name, value)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"error: cannot run '{argv[0]}': {e.strerror}", file=sys.stderr)
        return 127
    return 0   # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
