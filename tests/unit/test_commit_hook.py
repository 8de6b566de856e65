"""The commit-msg hook (scripts/commit-msg, `make hooks`): a subject of at most 72 characters,
then a blank line before any body."""
import subprocess

import pytest

from hpcdl_testing import ROOT

HOOK = ROOT / "scripts" / "commit-msg"


def _hook(tmp_path, text):
    msg = tmp_path / "COMMIT_EDITMSG"
    msg.write_text(text)
    return subprocess.run(["bash", str(HOOK), str(msg)], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("text", [
    "x" * 72 + "\n",
    "Box check: alternating rounds\n\nThe body may run\nover many lines of any length " + "y" * 90,
    "A subject — with an em dash, " + "z" * 42 + "\n",           # 72 characters, more bytes
    "Short subject\n# Please enter the commit message (git's hint, not kept)\n",
    "Merge branch 'main' of somewhere/with/a/very/long/path/that/git/wrote/itself/for/this\n",
])
def test_a_good_message_passes(tmp_path, text):
    res = _hook(tmp_path, text)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("text, why", [
    ("x" * 73 + "\n", "the subject is 73 characters; at most 72"),
    ("Subject\nbody right under it\n", "the second line must be blank"),
    ("\n\nbody only\n", "no subject line"),
])
def test_a_bad_message_is_refused_saying_why(tmp_path, text, why):
    res = _hook(tmp_path, text)
    assert res.returncode == 1 and why in res.stderr, res.stderr
