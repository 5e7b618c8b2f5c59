"""Which modules each module of a tree imports (the overlay's, benchmarks/, scripts/, the
test harness), read from the source (no import runs): every ``import`` and ``from ...
import`` in the file, at module level, inside functions and under ``TYPE_CHECKING`` alike.

Why every level: a function-level import is how an import circle hides --
it runs later, so nothing fails at import time, but the two modules are
still built on each other and neither can be read, tested or changed
alone.  Any import counts."""

from __future__ import annotations

import ast
from pathlib import Path


def module_name(overlay: Path, path: Path) -> str:
    rel = path.relative_to(overlay).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imported(node: ast.AST, file_module: str, is_pkg: bool) -> list[str]:
    """Dotted names an import statement may bind a module from: for
    ``from a import b``, both ``a`` and ``a.b`` (``b`` may be a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = file_module.split(".")
        parts = parts if is_pkg else parts[:-1]
        parts = parts[:len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]


def overlay_imports(overlay: Path, under: str = "") -> dict[str, set[str]]:
    """Module -> the modules its source imports, of those under ``overlay / under``, each
    named from ``overlay`` (the folder its imports start from: ``overlay/`` for
    ``vllm.distributed.ulysses``, the repository for ``benchmarks.run``)."""
    files = {module_name(overlay, p): p for p in sorted((overlay / under).rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        found = set()
        for node in ast.walk(tree):
            for dotted in _imported(node, name, is_pkg):
                # ``import a.b.c`` also imports a and a.b.
                prefixes = [".".join(dotted.split(".")[:i + 1])
                            for i in range(dotted.count(".") + 1)]
                found.update(p for p in prefixes if p in files and p != name)
        graph[name] = found
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """For each module that one of its imports imports back, at any depth,
    one shortest path from it back to itself (``[a, b, a]``)."""
    found = []
    for start in sorted(graph):
        paths, seen = [[start]], {start}
        back = None
        while paths and back is None:
            nxt = []
            for path in paths:
                for m in sorted(graph[path[-1]]):
                    if m == start:
                        back = path + [start]
                        break
                    if m not in seen:
                        seen.add(m)
                        nxt.append(path + [m])
                if back:
                    break
            paths = nxt
        if back:
            found.append(back)
    return found
