"""Run the hpcdl command: python -m hpcdl ..."""
import sys

from .cli import main

sys.exit(main())
