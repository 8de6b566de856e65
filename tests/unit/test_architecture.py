"""The house plan stays true: imports follow docs/architecture.md, and functions stay short."""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdl_testing import ROOT

PKG = ROOT / "hpcdl"
HEAVY = {"numpy", "mpi4py", "tensorflow", "horovod", "matplotlib", "sklearn", "scipy", "keras",
         "msgspec"}
MAX_FUNCTION_LINES = 80


def _rooms():
    """{room: (allowed hpcdl rooms, allowed heavy packages)} from the table in docs/architecture.md."""
    rooms = {}
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        m = re.match(r"^\| `([\w.]+)` \|[^|]*\| ([^|]*) \| ([^|]*) \|$", line)
        if m:
            names = [[w.strip() for w in cell.split(",") if w.strip() not in ("", "-")]
                     for cell in m.group(2, 3)]
            rooms[m.group(1)] = (set(names[0]), set(names[1]))
    return rooms


def _module(path: Path) -> str:
    parts = list(path.relative_to(PKG).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str, rooms) -> str:
    """The table's row of a module: itself, or the package that holds it."""
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in rooms:
            return ".".join(parts[:k])
    return module


def _imports(path: Path):
    """(hpcdl modules, third-party top-level packages) a file imports, anywhere in it."""
    mod = _module(path)
    pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    inner, outer = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = pkg[:len(pkg) - node.level + 1] + (node.module.split(".") if node.module else [])
            if node.module:
                inner.add(".".join(base))
            else:
                inner.update(".".join(base + [a.name]) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            (inner if node.module.startswith("hpcdl") else outer).add(node.module)
        elif isinstance(node, ast.Import):
            for a in node.names:
                (inner if a.name.startswith("hpcdl") else outer).add(a.name)
    inner = {m[len("hpcdl."):] if m.startswith("hpcdl.") else m for m in inner}
    return {m for m in inner if m and m != "hpcdl"}, {m.split(".")[0] for m in outer}


def test_every_module_imports_only_what_its_room_allows():
    rooms = _rooms()
    assert "analysis" in rooms and "comm" in rooms, "the rooms table did not parse"
    faults = []
    for path in sorted(PKG.rglob("*.py")):
        mod = _module(path)
        if mod in ("", "__main__") or not path.read_text().strip("\n").count("\n"):
            continue      # the package and its __main__, or an empty package marker
        room = _room(mod, rooms)
        if room not in rooms:
            faults.append(f"{mod}: no row in docs/architecture.md")
            continue
        hpcdl_ok, heavy_ok = rooms[room]
        inner, outer = _imports(path)
        for target in inner:
            # a room may use itself; `from . import x` names may be attributes, not modules
            troom = _room(target, rooms)
            if troom == room or troom in hpcdl_ok or target == "__version__":
                continue
            if "." in target and _room(target.rsplit(".", 1)[0], rooms) in (room, *hpcdl_ok):
                continue
            faults.append(f"{mod} imports hpcdl.{target} (room {room} may import "
                          f"{', '.join(sorted(hpcdl_ok)) or 'nothing of hpcdl'})")
        for pkg in (outer & HEAVY) - heavy_ok:
            faults.append(f"{mod} imports {pkg} (room {room} may import "
                          f"{', '.join(sorted(heavy_ok)) or 'no heavy package'})")
        stdlib = set(sys.stdlib_module_names) | {"tomli"}
        for pkg in outer - HEAVY - stdlib:
            faults.append(f"{mod} imports {pkg}, which is neither the standard library nor a "
                          "package named in the plan")
    assert faults == [], "\n".join(faults)


BASE = {"__init__", "__main__", "cli", "cluster", "cgroup", "costmodel", "errors", "records", "checks",
        "box", "info", "machine", "stack"}


def _graph():
    """{hpcdl module: hpcdl modules it imports, at its top or inside a function}."""
    files = {_module(p) or "__init__": p for p in PKG.rglob("*.py")}
    graph = {}
    for mod, path in files.items():
        targets, _ = _imports(path)
        edges = set()
        for t in targets:
            while t not in files and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in files and t != mod:
                edges.add(t)
        graph[mod] = edges
    return graph


def _cycles(graph):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_loop_through_a_function_level_import():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_hpcdl_modules_import_each_other_in_a_loop():
    assert _cycles(_graph()) == []


LOGIN_NODE = ("hpcdl.cli", "hpcdl.study", "hpcdl.study.cli", "hpcdl.launch.jobscript",
              "hpcdl.launch.submit", "hpcdl.launch.gridengine", "hpcdl.launch.batch", "hpcdl.launch.prep", "hpcdl.launch.study_local", "hpcdl.launch.command",
              "hpcdl.bench")


@pytest.mark.parametrize("module", LOGIN_NODE)
def test_what_a_login_node_runs_imports_no_heavy_package(module):
    """Rendering, submitting and watching jobs needs only the standard library; the imports that
    would pull numpy in sit inside the functions that need them (and the loop test sees them)."""
    code = (f"import sys, {module}\n"
            "print(','.join(m for m in sorted(%r) if m in sys.modules))" % sorted(HEAVY))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"{module} imports {res.stdout.strip()}"


def test_the_top_level_holds_only_the_base_modules():
    top = {p.stem for p in PKG.glob("*.py")}
    assert top <= BASE, f"{sorted(top - BASE)}: put them in the package they serve"


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


MAX_MODULE_LINES = 500


def test_no_module_is_past_500_lines():
    over = {str(p.relative_to(ROOT)): n for p in sorted(PKG.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert over == {}, f"past {MAX_MODULE_LINES} lines: split them by what they serve: {over}"


def test_a_package_init_holds_re_exports_and_registries_only():
    """Past its docstring and imports, a package's __init__.py keeps at most 100 lines: a
    registry or an interface, not the package's logic."""
    heavy = {}
    for path in sorted(PKG.rglob("__init__.py")):
        tree = ast.parse(path.read_text())
        body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))
                and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        n = sum(node.end_lineno - node.lineno + 1 for node in body)
        if n > 100:
            heavy[str(path.relative_to(ROOT))] = n
    assert heavy == {}, f"logic in __init__.py (lines past the docstring and imports): {heavy}"


def test_benchmarks_run_as_modules_and_no_unit_test_loads_a_script():
    """benchmarks/ is a package run as ``python -m benchmarks.NAME``: none of its modules edits
    sys.path, and the unit tests import them as modules, never by file."""
    bench = ROOT / "benchmarks"
    assert (bench / "__init__.py").is_file()
    edits = [p.name for p in sorted(bench.glob("*.py")) if "sys.path" in p.read_text()]
    assert edits == [], f"benchmarks that edit sys.path: {edits}"
    loads = [p.name for p in sorted((ROOT / "tests" / "unit").glob("*.py"))
             if "spec_from_file_location" in p.read_text() and p.name != Path(__file__).name]
    assert loads == [], f"unit tests that load a script by its file: {loads}"


# the box is one kind of machine: its names live behind hpcdl.machine, in the box's own module
# and its check, and in the settings registry that names its file
BOX_MODULES = {"box.py", "machine.py", "bench/boxcheck.py", "cluster.py"}


def test_only_the_machine_interface_names_the_box():
    naming = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
              if re.search(r"box", p.read_text(), re.IGNORECASE)}
    assert naming <= BOX_MODULES, f"the box named outside the machine interface: {sorted(naming - BOX_MODULES)}"
    assert len(BOX_MODULES) <= 4
