"""The overlay modules form layers: no module is imported, at any depth,
by a module it imports (function-level imports included), and the core,
``ulysses.py`` (groups, exchange, head arithmetic, token slices), imports
no other overlay module.  So do the GPU harness (benchmarks/), the build's
scripts (scripts/) and the test harness; benchmarks/ sets its import path
in one place only (its ``__init__``).  The core's docstring names every
module built on it.  Read from the source: nothing is imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from harness.imports import circles, overlay_imports
from harness.repo import REPO

pytestmark = pytest.mark.once

OVERLAY = REPO / "overlay"
CORE = "vllm.distributed.ulysses"


def test_no_import_circles():
    graph = overlay_imports(OVERLAY)
    assert CORE in graph and len(graph) > 1, sorted(graph)
    found = circles(graph)
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


@pytest.mark.parametrize("root, under, one", [(REPO, "benchmarks", "benchmarks.run"),
                                               (REPO / "scripts", "", "build"),
                                               (REPO / "tests", "harness", "harness.engine")])
def test_no_import_circles_elsewhere(root, under, one):
    graph = overlay_imports(root, under)
    assert one in graph and any(graph.values()), sorted(graph)
    found = circles(graph)
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_benchmarks_set_their_path_in_one_place():
    """`python3 -m benchmarks.X` from the repository root is the one way in: no module of
    benchmarks/ but its ``__init__`` changes ``sys.path``."""
    changed = []
    for path in sorted((REPO / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                what = [node.func.value]                 # sys.path.insert(...), .append(...)
            else:
                what = getattr(node, "targets", [getattr(node, "target", None)])
            if any(w is not None and ast.unparse(w).startswith("sys.path") for w in what):
                changed.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert changed and all(c.startswith("benchmarks/__init__.py:") for c in changed), changed


def test_core_imports_no_overlay_module():
    assert overlay_imports(OVERLAY)[CORE] == set()


def built_on(graph: dict[str, set[str]], module: str) -> set[str]:
    """The modules that import ``module``, directly or through others."""
    found, grew = set(), True
    while grew:
        more = {m for m, imports in graph.items() if imports & (found | {module})} - found
        found |= more
        grew = bool(more)
    return found


def test_core_docstring_names_the_modules_built_on_it():
    """The core's docstring is the map a reader of the overlay starts from:
    every module built on the core (at any depth) is named in it (as
    ``name``), and every module it names there exists."""
    graph = overlay_imports(OVERLAY)
    path = OVERLAY / Path(*CORE.split(".")).with_suffix(".py")
    doc = ast.get_docstring(ast.parse(path.read_text()))
    package = CORE.rpartition(".")[0]
    named = {f"{package}.{n}" for n in re.findall(r"``(\w+)``", doc)
             if n.startswith(("ulysses", "shift"))}
    above = built_on(graph, CORE)
    assert above and not above - named, f"not named in {CORE}'s docstring: {above - named}"
    assert not named - set(graph), f"named, but no such module: {named - set(graph)}"


def test_walker_sees_function_level_and_package_imports(tmp_path):
    """The check itself: a circle closed by an import inside a function,
    through ``from package import module``, is found."""
    pkg = tmp_path / "vllm" / "distributed"
    pkg.mkdir(parents=True)
    (pkg / "core.py").write_text("def f():\n    from vllm.distributed import upper\n")
    (pkg / "upper.py").write_text("from vllm.distributed.core import f\n")
    (pkg / "free.py").write_text("import vllm.distributed.core\n")
    graph = overlay_imports(tmp_path)
    assert graph == {"vllm.distributed.core": {"vllm.distributed.upper"},
                     "vllm.distributed.upper": {"vllm.distributed.core"},
                     "vllm.distributed.free": {"vllm.distributed.core"}}
    assert circles(graph) == [["vllm.distributed.core", "vllm.distributed.upper",
                               "vllm.distributed.core"],
                              ["vllm.distributed.upper", "vllm.distributed.core",
                               "vllm.distributed.upper"]]
