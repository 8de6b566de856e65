"""Errors a user can cause, and the exit statuses of the hpcdl command."""

EXIT_OK = 0
EXIT_FAILURE = 1        # a bug or a crash: the message comes with a traceback
EXIT_USAGE = 2          # a user error: one line naming what to fix, no traceback
EXIT_RECORD_ELSEWHERE = 3   # the run ended, but its record is in a fallback file (named), not
                            # in the results file asked for
EXIT_INTERRUPTED = 75   # stopped early on a signal or time limit, checkpoint written: resume it


class UserError(Exception):
    """Something the user can fix: a bad flag, a missing file, an impossible rank count."""


class Interrupted(Exception):
    """Training stopped cleanly before its end (signal, STOP file, or time limit)."""

    def __init__(self, message: str, checkpoint=None):
        super().__init__(message)
        self.checkpoint = checkpoint
