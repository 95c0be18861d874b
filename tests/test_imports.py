"""The layers hold: nothing below `typhapki/commands/` imports it, and no module of the
package imports itself back through others (docs/architecture.md).

Read from the source with `ast`, lazy imports inside functions included: a cycle that
only closes at run time is still a cycle a reader has to untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import SOURCE

PACKAGE = SOURCE / "typhapki"
# Above commands/: the CLI (its entry point and fast path included), and what generates
# docs from it.
TOP = {"typhapki.cli", "typhapki.entry", "typhapki.fastcli", "typhapki.__main__", "typhapki.docgen"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The package's modules that `path` imports, at any depth of the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in known}
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(path, known) - {name} for name, path in mods.items()}


def test_nothing_below_commands_imports_them() -> None:
    upward = sorted(
        f"{mod} imports {dep}"
        for mod, deps in graph().items()
        for dep in deps
        if dep.startswith("typhapki.commands")
        and not mod.startswith("typhapki.commands")
        and mod not in TOP
    )
    assert upward == []


def test_no_import_cycles() -> None:
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(mod: str) -> None:
        state[mod] = 1
        path.append(mod)
        for dep in sorted(edges[mod]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep)
        path.pop()
        state[mod] = 2

    for mod in sorted(edges):
        if mod not in state:
            visit(mod)
    assert cycles == []


def test_the_graph_is_read() -> None:
    """The test above would pass on an empty graph: prove it sees real edges."""
    edges = graph()
    assert "typhapki.pki.plan" in edges["typhapki.pki.issuance"]
    assert "typhapki.settings.desired" in edges["typhapki.commands.check"]
