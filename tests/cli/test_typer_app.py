"""typhapki/cli/typer_app.py: what the root of the command line answers by itself."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

from tests.conftest import run_cli


def test_version_prints_the_packages_version(tmp_path: Path) -> None:
    result = run_cli("--version")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"typhapki {version('typhapki')}\n"
    # Even with a broken node configuration file, as --help does.
    broken = tmp_path / "typhapki.yaml"
    broken.write_text("defaults: [\n")
    again = run_cli("--version", env={"TYPHAPKI_CONFIG": str(broken)})
    assert (again.returncode, again.stdout) == (0, result.stdout)
    assert "--version" in run_cli("--help").stdout


def _leaves(group: Any, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, sub in group.commands.items():
        if isinstance(getattr(sub, "commands", None), dict):
            found.update(_leaves(sub, (*prefix, name)))
            if sub.callback is not None and sub.params:  # a group that is a command (fleet)
                found[" ".join((*prefix, name))] = sub
        else:
            found[" ".join((*prefix, name))] = sub
    return found


def test_typer_parses_exactly_the_table() -> None:
    """cli.py is built from typhapki/options.py: every command, and every
    option of it with its flags, help, requiredness and repetition, and nothing else."""
    import typer

    from typhapki import options
    from typhapki.cli import typer_app as cli

    leaves = _leaves(typer.main.get_command(cli.app))
    assert sorted(leaves) == sorted(c.name for c in options.COMMANDS)
    for spec in options.COMMANDS:
        command = leaves[spec.name]
        assert command.help.split()[:4] == spec.help.split()[:4], spec.name
        params = {p.name: p for p in command.params}
        assert list(params) == [o.name for o in spec.options], spec.name
        for opt in spec.options:
            param = params[opt.name]
            if opt.argument:
                assert (param.param_type_name, param.nargs) == ("argument", -1), opt
                continue
            assert set(param.opts) | set(param.secondary_opts) == set(opt.decls), opt
            assert param.help == opt.help, opt
            assert bool(param.required) is opt.required, (spec.name, opt.name)
            assert bool(param.multiple) is opt.multiple, (spec.name, opt.name)
            assert bool(getattr(param, "is_flag", False)) is (opt.kind is bool), opt


def test_declared_and_shared_build_typer_options_from_the_table() -> None:
    """The entry points for code that declares a typer parameter of a shared option."""
    from typhapki import options
    from typhapki.cli import typer_app as cli

    for opt in options.OPTIONS:
        info = cli.declared(opt.name)
        assert tuple(info.param_decls) == opt.decls
        assert (info.default, info.help) == (opt.default, opt.help)
    assert list(cli.shared("pki")) == [o.name for o in options.group("pki")]


def _help_sections(text: str) -> dict[str, list[str]]:
    """Each heading of a `--help` (a line ending in ':' at column 0) and the first word
    of each entry under it (a line indented by exactly two spaces)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  ") and line[2:3] not in ("", " "):
            current.append(line.split()[0].rstrip(","))
    return sections


def test_help_shows_the_common_options_first_and_the_rest_as_advanced() -> None:
    """Every command's `--help`, on this leg's typer: the options `options.advanced`
    declares advanced under "Advanced options", after every other, and nothing else
    there; a command without advanced options has no such heading."""
    from typhapki import options

    split = 0
    for spec in options.COMMANDS:
        result = run_cli(*spec.name.split(), "--help")
        assert result.returncode == 0, (spec.name, result.stderr)
        sections = _help_sections(result.stdout)
        # click names a short option first: `-q, --quiet`.
        advanced = [o.short or o.flag for o in spec.options if options.advanced(o)]
        common = [
            o.short or o.flag for o in spec.options if not o.argument and not options.advanced(o)
        ]
        assert sections["Options"] == [*common, "--help"], (spec.name, result.stdout)
        if advanced:
            split += 1
            assert sections["Advanced options"] == advanced, (spec.name, result.stdout)
            text = result.stdout
            assert text.index("\nOptions:") < text.index("\nAdvanced options:"), spec.name
        else:
            assert "Advanced options" not in sections, (spec.name, result.stdout)
    assert split >= 15  # check, issue, facts... (42 options in check)
