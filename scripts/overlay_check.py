#!/usr/bin/env python3
"""Do the names our code takes from vLLM still exist in a vLLM tree?

    scripts/overlay_check.py TREE [FILE ...]

Checked statically (no install of that release needed): in each overlay
module and each file our patches touch, every ``from vllm.x import y``
(module level or inside a function), every ``import vllm.x``, and every
``m.name`` read off a vLLM module ``m`` bound by such an import must
resolve in TREE: the module file exists and defines the name at its top
level (def, class, assignment, import), or the name is a submodule.  A
module with a ``__getattr__`` or a star import is taken on trust.

Why: upstream renames and moves things between releases; the overlay has
no patch context for git to conflict on, so a moved name would otherwise
surface only as an ImportError at engine start.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path


def module_file(tree: Path, module: str) -> Path | None:
    base = tree.joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


@cache
def _top_names(path: Path) -> tuple[frozenset[str], bool]:
    """Names a module defines at its top level; True if it may define
    more than it shows (module __getattr__, star import)."""
    names, open_ended = set(), False

    def visit(body):
        nonlocal open_ended
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                open_ended |= node.name == "__getattr__"
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif (isinstance(node, (ast.AnnAssign, ast.AugAssign))
                  and isinstance(node.target, ast.Name)):
                names.add(node.target.id)
            elif isinstance(node, ast.Import):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    open_ended |= a.name == "*"
                    names.add(a.asname or a.name)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)
                visit(getattr(node, "finalbody", []))
    visit(ast.parse(path.read_text(), str(path)).body)
    return frozenset(names), open_ended


def has_name(tree: Path, module: str, name: str) -> bool:
    if module_file(tree, f"{module}.{name}"):
        return True
    path = module_file(tree, module)
    if path is None:
        return False
    names, open_ended = _top_names(path)
    return open_ended or name in names


def absolute(module: str | None, level: int, file_module: str, is_pkg: bool) -> str:
    if level == 0:
        return module or ""
    parts = file_module.split(".")
    parts = parts if is_pkg else parts[:-1]
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


OPTIONAL = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def optional_imports(src: ast.AST) -> set[int]:
    """ids of the imports inside ``try:`` blocks that catch ImportError, or
    ``with contextlib.suppress(ImportError):`` blocks: the code runs without
    them (compiled extensions the sdist lacks, such as vllm.spinloop or
    vllm._moe_C_stable_libtorch, are imported this way), so they cannot
    break startup."""
    def catches(expr: ast.AST | None) -> bool:
        return expr is None or any(isinstance(n, ast.Name) and n.id in OPTIONAL
                                   for n in ast.walk(expr))

    def suppresses(item: ast.withitem) -> bool:
        call = item.context_expr
        if not isinstance(call, ast.Call):
            return False
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        return name == "suppress" and any(catches(a) for a in call.args)

    out = set()
    for node in ast.walk(src):
        if (isinstance(node, ast.Try) and any(catches(h.type) for h in node.handlers)) or \
                (isinstance(node, ast.With) and any(suppresses(i) for i in node.items)):
            for stmt in node.body:
                out.update(id(n) for n in ast.walk(stmt)
                           if isinstance(n, (ast.Import, ast.ImportFrom)))
    return out


def check_file(tree: Path, path: Path, rel: str) -> list[str]:
    file_module = rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    is_pkg = rel.endswith("__init__.py")
    src = ast.parse(path.read_text(), str(path))
    problems, aliases = [], {}
    optional = optional_imports(src)
    for node in ast.walk(src):
        if id(node) in optional:
            continue
        if isinstance(node, ast.ImportFrom):
            mod = absolute(node.module, node.level, file_module, is_pkg)
            if not mod.startswith("vllm"):
                continue
            if module_file(tree, mod) is None:
                problems.append(f"{rel}:{node.lineno}: module {mod} is gone")
                continue
            for a in node.names:
                if a.name == "*":
                    continue
                if not has_name(tree, mod, a.name):
                    problems.append(f"{rel}:{node.lineno}: {mod} has no {a.name}")
                elif module_file(tree, f"{mod}.{a.name}"):
                    aliases[a.asname or a.name] = f"{mod}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("vllm"):
                    if module_file(tree, a.name) is None:
                        problems.append(f"{rel}:{node.lineno}: module {a.name} is gone")
                    elif a.asname:
                        aliases[a.asname] = a.name
    for node in ast.walk(src):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and isinstance(node.ctx, ast.Load)):
            mod = aliases[node.value.id]
            if not has_name(tree, mod, node.attr):
                problems.append(f"{rel}:{node.lineno}: {mod} has no {node.attr}")
    return list(dict.fromkeys(problems))


def check(tree: Path, overlay: Path, touched: list[str]) -> list[str]:
    """Problems in the overlay modules and in ``touched`` (paths relative
    to ``tree``, as the patches name them); the tree holds the overlay."""
    files = sorted({p.relative_to(overlay).as_posix() for p in overlay.rglob("*.py")}
                   | {t for t in touched if t.endswith(".py")})
    problems = []
    for rel in files:
        if (tree / rel).is_file():
            problems += check_file(tree, tree / rel, rel)
    return problems


if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    found = check(Path(sys.argv[1]), root / "overlay", sys.argv[2:])
    print("\n".join(found) or "every vllm.* name resolves")
    sys.exit(1 if found else 0)
