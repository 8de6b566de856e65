"""Every committed exchange-only table is what the current code makes of its tune files: its
first line is the command, run again from the repository's root it prints the file byte for byte
(the forecast's pricing of the larger counts, and each table's figures, stay in step)."""
import shlex
import subprocess
import sys

import pytest

from hpcdl_testing import ROOT

TABLES = sorted(p.name for p in (ROOT / "results").glob("exchange-only*.txt"))


def test_there_are_committed_exchange_only_tables():
    assert len(TABLES) >= 2, TABLES


@pytest.mark.parametrize("table", TABLES)
def test_a_committed_exchange_only_table_is_made_again_by_its_command(table):
    text = (ROOT / "results" / table).read_text()
    command = shlex.split(text.splitlines()[0].removeprefix("# "))
    assert command[:3] == ["python", "-m", "benchmarks.exchange_only"], command
    out = subprocess.run([sys.executable, *command[1:]], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == text
