"""Job-script templates (package data), rendered by :mod:`hpcdl.launch.jobscript`."""
