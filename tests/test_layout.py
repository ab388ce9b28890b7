"""The package's import graph has no loops, and no strl_jax import hides inside a function (the
usual way to dodge a loop): checked from the source, without importing anything."""

from __future__ import annotations

import ast
from pathlib import Path

import strl_jax

PACKAGE = Path(strl_jax.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def ancestors(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def imported_modules(node: ast.AST, known: set[str]) -> set[str]:
    """strl_jax modules an import statement loads (`from a import b` loads `a.b` when it is a module)."""
    names = set()
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
        names = {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {n for n in names if n in known}


def test_no_import_loops_and_no_function_local_imports():
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(files)
    graph, local = {}, []
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        top = set()
        for node in tree.body:
            top |= imported_modules(node, known)
        graph[name] = top
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if imported_modules(node, known):
                    local.append(f"{name}.{func.name}")
    assert not local, f"strl_jax imports inside functions: {local}"
    # importing `a.b.c` first runs the packages `a` and `a.b` (their __init__ may import more); a
    # module's own packages are already being initialised when it runs, so they add no edge
    for name, deps in graph.items():
        own = ancestors(name)
        graph[name] = {m for d in deps for m in {d, *ancestors(d)} if m in known and m not in own} - {name}
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                loop = stack[stack.index(dep) :] + [dep] if dep in stack else [node, dep]
                raise AssertionError("import loop: " + " -> ".join(loop))
            if dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
