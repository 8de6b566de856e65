"""The README and docs stay true: every relative link leads somewhere, and every command they show
names a sub-command, module, script, study file or make target that exists."""
import argparse
import re
import shlex
from pathlib import Path

import pytest

from hpcdl import cli
from hpcdl_testing import ROOT

PAGES = ([ROOT / "README.md"] + sorted((ROOT / "results").glob("*.md"))
         + sorted((ROOT / "docs").glob("*.md")))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
README_LINES = 150


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def _links(page: Path):
    for target in LINK.findall(page.read_text()):
        if not re.match(r"^[a-z]+:", target):
            yield target


def test_the_readme_is_a_front_door():
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_LINES


def test_the_link_checker_sees_a_missing_file_and_a_missing_anchor(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Here\n[a](nowhere.md) [b](#here) [c](#there) [d](https://example.org)\n")
    assert _broken(page) == ["nowhere.md", "#there"]


def _broken(page: Path):
    bad = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(target)
        elif anchor and dest.suffix == ".md":
            anchors = {_anchor(h) for h in re.findall(r"^#+ (.*)$", dest.read_text(), re.M)}
            if anchor not in anchors:
                bad.append(target)
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page):
    assert _broken(page) == []


def _commands(page: Path):
    """Each line of the page's shell blocks, comments and prompts left out, split into words."""
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", page.read_text(), re.S):
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                for part in re.split(r"&&|;|\|", line):
                    try:
                        words = shlex.split(part)
                    except ValueError:
                        continue
                    while words and "=" in words[0] and not words[0].startswith("-"):
                        words = words[1:]               # VAR=value before the command
                    if words:
                        yield words


def _subcommands():
    """{'train', 'study run', 'bench allreduce', ...} from the hpcdl parser itself."""
    found = set()

    def walk(parser, prefix):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.add((prefix + " " + name).strip())
                    walk(sub, prefix + " " + name)
    walk(cli.build_parser(), "")
    return found


def _problems(words, subcommands, make_targets):
    if "hpcdl" in words:
        rest = [w for w in words[words.index("hpcdl") + 1:] if not w.startswith("-")]
        if rest and rest[0] not in subcommands:
            return f"hpcdl {rest[0]}: no such command"
        if len(rest) > 1 and rest[0] in ("study", "bench") and f"{rest[0]} {rest[1]}" not in subcommands:
            return f"hpcdl {rest[0]} {rest[1]}: no such command"
    if "-m" in words and words.index("-m") + 1 < len(words):
        mod = words[words.index("-m") + 1]
        if mod.startswith("hpcdl") and mod != "hpcdl":
            path = ROOT / mod.replace(".", "/")
            if not (path.with_suffix(".py").exists() or (path / "__init__.py").exists()):
                return f"python -m {mod}: no such module"
    for w in words:
        if re.match(r"^(scripts|jobs|benchmarks|examples)/[\w./-]+\.(sh|toml|py)$", w) \
                and not (ROOT / w).exists():
            return f"{w}: no such file"
    if words[0] == "make" and len(words) > 1 and words[1] not in make_targets:
        return f"make {words[1]}: no such target"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_shown_exists(page):
    subcommands = _subcommands()
    assert {"train", "study run", "bench allreduce"} <= subcommands
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    bad = [f"{' '.join(w)}: {p}" for w in _commands(page)
           if (p := _problems(w, subcommands, targets))]
    assert bad == []


def test_the_command_checker_sees_what_does_not_exist():
    subs, targets = _subcommands(), {"run", "test"}
    assert _problems(["hpcdl", "trian"], subs, targets)
    assert _problems(["hpcdl", "study", "sumbit", "x.toml"], subs, targets)
    assert _problems(["python", "-m", "hpcdl.nothing"], subs, targets)
    assert _problems(["hpcdl", "study", "run", "jobs/none.toml"], subs, targets)
    assert _problems(["make", "bench2"], subs, targets)
    assert _problems(["mpirun", "-np", "2", "hpcdl", "train", "--workload", "expmlp"], subs,
                     targets) is None


MAINTAINER_WORDS = ("400 lines", ":mod:", ":func:", ":class:", "``", "This module", "top level",
                    "imports only")


def _helps():
    """(command, its --help text) for hpcdl and every sub-command."""
    out = []

    def walk(parser, prefix):
        out.append((prefix or "hpcdl", parser.format_help()))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prefix} {name}".strip())
    walk(cli.build_parser(), "")
    return out


def test_help_is_written_for_users():
    helps = _helps()
    assert any(name == "train" for name, _ in helps)
    bad = [f"{name}: {w!r}" for name, text in helps for w in MAINTAINER_WORDS if w in text]
    assert bad == []


def test_where_to_look_names_a_room_file_and_function_that_exist():
    """docs/architecture.md's "Where to look": each behaviour's room is the module of the file
    it names, and the function it names is defined there."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    part = text.split("## Where to look", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in part.splitlines() if r.startswith("| ") and "`" in r]
    assert len(rows) >= 5, "the table did not parse"
    for row in rows:
        _, room, where = [c.strip() for c in row.strip("|").split("|")]
        path, *funcs = re.findall(r"`([^`]+)`", where)
        assert (ROOT / path).is_file(), row
        if path.endswith(".py"):
            assert path[:-3].replace("/", ".") == "hpcdl." + room.strip("`"), row
            source = (ROOT / path).read_text()
            for f in (f for f in funcs if "/" not in f):
                assert re.search(rf"^def {re.escape(f)}\(", source, re.M), (row, f)
