"""The folders are the layers (docs/architecture.md, "Layers"): every module of the
package belongs to one layer of the documented list, imports nothing from a layer
above its own, and no module or layer imports itself back through others.

Read from the source with `ast`, lazy imports inside functions included: a cycle that
only closes at run time is still a cycle a reader has to untangle. The layer list is
read from docs/architecture.md, so the page is the contract this test checks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import SOURCE

PACKAGE = SOURCE / "typhapki"
ARCHITECTURE = SOURCE / "docs" / "architecture.md"


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


def documented_layers(text: str) -> list[list[str]]:
    """The numbered list under "## Layers": each item's backticked paths (a folder ends
    with "/"), bottom first."""
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n(?=\d+\. )", "\n" + section)
    layers = []
    for item in items:
        if re.match(r"\d+\. ", item):
            layers.append(re.findall(r"`(typhapki/[\w/.]*)`", item))
    return layers


def layer_of(layers: list[list[str]]) -> dict[str, tuple[int, str]]:
    """Each module -> (its layer's index, the documented path that places it): a file
    listed by name, else the deepest folder listed above it."""
    placed: dict[str, tuple[int, str]] = {}
    for mod, path in modules().items():
        rel = path.relative_to(SOURCE).as_posix()
        best: tuple[int, str] | None = None
        for index, paths in enumerate(layers):
            for doc in paths:
                hit = rel == doc or (doc.endswith("/") and rel.startswith(doc))
                if hit and (best is None or len(doc) > len(best[1])):
                    best = (index, doc)
        if best is not None:
            placed[mod] = best
    return placed


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return cycles


LAYERS = documented_layers(ARCHITECTURE.read_text())


def test_every_module_is_in_a_documented_layer() -> None:
    placed = layer_of(LAYERS)
    assert sorted(set(modules()) - set(placed)) == []


def test_nothing_imports_upwards() -> None:
    placed = layer_of(LAYERS)
    upward = sorted(
        f"{mod} ({placed[mod][1]}) imports {dep} ({placed[dep][1]})"
        for mod, deps in graph().items()
        for dep in deps
        if placed[dep][0] > placed[mod][0]
    )
    assert upward == []


def test_no_import_cycles() -> None:
    assert find_cycles(graph()) == []


def test_no_package_cycles() -> None:
    """Two folders of one layer (or a folder and a listed file) never import each other."""
    placed = layer_of(LAYERS)
    edges: dict[str, set[str]] = {}
    for mod, deps in graph().items():
        unit = placed[mod][1]
        edges.setdefault(unit, set()).update(placed[d][1] for d in deps if placed[d][1] != unit)
    assert find_cycles(edges) == []


def test_the_base_holds_the_table_and_typhas_ports() -> None:
    """The option table, its provenance wording and Typha's ports are base modules,
    directly in typhapki/: no layer's folder holds a file of a lower layer."""
    placed = layer_of(LAYERS)
    for mod in ("typhapki.options", "typhapki.provenance", "typhapki.typhaports"):
        assert placed[mod][0] == 0, (mod, placed[mod])
        assert modules()[mod].parent == PACKAGE, mod


def _calls_of(name: str) -> list[str]:
    """Where the package calls the function `name`: `module:line` for each call."""
    found = []
    for mod, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if called == name:
                    found.append(f"{mod}:{node.lineno}")
    return found


def test_the_command_line_is_one_room_with_one_boundary() -> None:
    """The console entry, typer's app and the fast path are modules of typhapki/cli/;
    the console script is the entry; the error boundary (`guarded`) is called in one
    place, the dispatch both parsers end in."""
    mods = modules()
    for mod in ("typhapki.cli.console", "typhapki.cli.typer_app", "typhapki.cli.fast_path"):
        assert mod in mods, mod
    assert 'typhapki = "typhapki.cli.console:script"' in (SOURCE / "pyproject.toml").read_text()
    calls = _calls_of("guarded")
    assert len(calls) == 1 and calls[0].startswith("typhapki.cli.boundary:"), calls
    assert len(_calls_of("dispatch")) == 1, _calls_of("dispatch")


def test_the_contract_is_read() -> None:
    """The tests above would pass on an empty graph or an empty list: prove they see
    real edges, the whole order, and an upward import when there is one."""
    edges = graph()
    assert "typhapki.pki.plan" in edges["typhapki.pki.issuance"]
    assert "typhapki.settings.desired" in edges["typhapki.commands.check"]
    placed = layer_of(LAYERS)
    bottom_up = ("typhapki.errors", "typhapki.pki.store", "typhapki.inventory.hiera",
                 "typhapki.settings.desired", "typhapki.firewall.pipeline",
                 "typhapki.commands.ferm", "typhapki.cli.console")  # fmt: skip
    ranks = [placed[m][0] for m in bottom_up]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks), ranks
    assert placed["typhapki.options"][0] < placed["typhapki.inventory.hiera"][0]
    swapped = [LAYERS[3], LAYERS[2], *LAYERS[:2], *LAYERS[4:]]  # settings below pki
    wrong = layer_of(swapped)
    assert any(wrong[d][0] > wrong[m][0] for m, deps in edges.items() for d in deps)


# --- commands (issue 42): thin, and never one from another ------------------------------

COMMANDS = "typhapki.commands."
COMMAND_LINES = 150
# A command module over COMMAND_LINES lines, and why it may be: domain work belongs in
# the layers below (docs/architecture.md, "Commands"), so each entry is a debt named.
LONG_COMMANDS = {
    "typhapki.commands.facts": (
        "the fact takes every value as text, so that a bad one is said inside the fact "
        "instead of exiting 2 (docs/puppet.md): reading each value is the command's own "
        "work, and it asks the live switch's Typha (typhapki/kubernetes/typhatarget.py), "
        "which typhapki/puppet/, a layer below, may not import"
    ),
}


def command_modules(names: set[str]) -> set[str]:
    """The command modules among NAMES: typhapki/commands/*.py, not the package."""
    return {n for n in names if n.startswith(COMMANDS)}


def commands_importing_commands(edges: dict[str, set[str]]) -> list[str]:
    """Each import of a command module by another: shared work belongs to a layer."""
    commands = command_modules(set(edges))
    return sorted(
        f"{mod} imports {dep}" for mod in commands for dep in edges[mod] if dep in commands
    )


def long_commands(lines: dict[str, int], listed: dict[str, str]) -> list[str]:
    """Command modules over COMMAND_LINES lines that LISTED does not name, and named
    ones that are no longer over (their entry goes)."""
    over = {m for m in command_modules(set(lines)) if lines[m] > COMMAND_LINES}
    return sorted(
        [f"{m}: {lines[m]} lines, not in LONG_COMMANDS" for m in over - set(listed)]
        + [f"{m}: in LONG_COMMANDS, {lines.get(m, 0)} lines" for m in set(listed) - over]
    )


def command_lines() -> dict[str, int]:
    return {m: len(p.read_text().splitlines()) for m, p in modules().items()}


def test_no_command_imports_another() -> None:
    assert commands_importing_commands(graph()) == []


def test_a_long_command_is_listed_with_its_reason() -> None:
    assert all(reason.strip() for reason in LONG_COMMANDS.values())
    assert long_commands(command_lines(), LONG_COMMANDS) == []


def test_the_command_rules_are_read() -> None:
    """Both rules see a violation on a synthetic graph and synthetic sizes, and read the
    real package: its command modules, their imports and their lengths."""
    edges = graph()
    commands = command_modules(set(edges))
    assert {"typhapki.commands.manifests", "typhapki.commands.issue"} <= commands
    assert "typhapki.commands" not in commands  # the package itself is no command
    assert "typhapki.kubernetes.delivery" in edges["typhapki.commands.manifests"]
    synthetic = {
        "typhapki.commands.install": {"typhapki.commands.issue", "typhapki.pki.restarts"},
        "typhapki.commands.issue": {"typhapki.commands"},
        "typhapki.cli.typer_app": {"typhapki.commands.issue"},
    }
    assert commands_importing_commands(synthetic) == [
        "typhapki.commands.install imports typhapki.commands.issue"
    ]
    lines = command_lines()
    assert 0 < lines["typhapki.commands.manifests"] <= COMMAND_LINES
    sizes = {"typhapki.commands.a": 151, "typhapki.commands.b": 150, "typhapki.cli.c": 900}
    assert long_commands(sizes, {}) == ["typhapki.commands.a: 151 lines, not in LONG_COMMANDS"]
    assert long_commands(sizes, {"typhapki.commands.a": "why"}) == []
    assert long_commands(sizes, {"typhapki.commands.a": "why", "typhapki.commands.b": "why"}) == [
        "typhapki.commands.b: in LONG_COMMANDS, 150 lines"
    ]
