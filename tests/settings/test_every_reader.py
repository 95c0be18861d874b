"""Every reader of one node configuration sees the same values: for every shared option
of the table (typhapki/options.py OPTIONS, bar the flag-only ones) and every
command that takes it, the value `defaults:` gives reaches the command's body, with the
node configuration's key as its source, on typer's path and on the fast path alike.

Generated from the table: a command or an option added there is covered here. Each
command runs once per path in this process (tests/support/inprocess.py); the body is
stopped where it would start (`request_of`, typhapki/cli/boundary.py, builds its request),
so no command does any work: what is proven is what each one was handed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import typhapki.cli.boundary
from tests.support.inprocess import run_in_process
from typhapki import options
from typhapki.cli.boundary import Call
from typhapki.cli.fast_path import FAST_COMMANDS
from typhapki.cli.nodeconfig import NO_DEFAULTS

SHARED = tuple(o for o in options.OPTIONS if not o.flag_only)
STOPPED = 99


def _text(opt: options.Opt) -> str:
    """A value the option accepts, as the file writes it, unlike its default."""
    if opt.choices:
        return opt.choices[-1]
    return {int: "7", float: "3.5", Path: f"/srv/typhapki-test/{opt.name}"}.get(
        opt.kind, f"from-file-{opt.name}"
    )


def _takes(command: options.Command) -> list[options.Opt]:
    """The shared options `command` takes (by name and group: `facts` takes them as text)."""
    groups = {o.name: o.group for o in command.options}
    return [o for o in SHARED if groups.get(o.name) == o.group]


def _required(command: options.Command) -> list[str]:
    """Command-line values for the command's own required options."""
    argv: list[str] = []
    for opt in command.options:
        if not opt.required or opt in SHARED:
            continue
        value = opt.choices[0] if opt.choices else f"/srv/typhapki-test/arg-{opt.name}"
        argv += [value] if opt.argument else [opt.flag, value]
    return argv


READERS = [c for c in options.COMMANDS if _takes(c) and tuple(c.name.split()) not in NO_DEFAULTS]
PATHS = [(c.name, "typer") for c in READERS] + [
    (c.name, "fast") for c in READERS if c.name in FAST_COMMANDS
]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One node configuration setting every shared option under `defaults:`."""
    path = tmp_path_factory.mktemp("etc") / "typhapki.yaml"
    doc = {"version": 1, "defaults": {o.name: _text(o) for o in SHARED}}
    path.write_text(yaml.safe_dump(doc))
    return path


def test_every_shared_option_has_a_reader() -> None:
    read = {o.name for c in READERS for o in _takes(c)}
    assert read == {o.name for o in SHARED}


def test_the_state_directory_is_one_option_of_every_state_reader() -> None:
    """check, issue (with check --nagios: the signer-CA cache), facts and metrics (the
    cache and ferm.json), ferm and nft (ferm.json): one option, one declaration."""
    state = options.BY_NAME["state_dir"]
    takers = {c.name for c in options.COMMANDS if state in _takes(c)}
    assert takers == {"check", "issue", "facts", "metrics", "ferm", "nft"}


def _handed(kwargs: dict[str, Any], name: str) -> tuple[Any, str | None]:
    """The value `name` reached the body with, and the source its options object names
    (None where the body takes the value as it is)."""
    for group in ("pki", "signer", "db"):  # the options objects first: `signer` is both
        bag = kwargs.get(group)
        if bag is not None and not isinstance(bag, str) and hasattr(bag, name):
            source = bag.source(name) if hasattr(bag, "source") else None
            return getattr(bag, name), source
    if name in kwargs:
        return kwargs[name], None
    raise AssertionError(f"{name} reached the body in no argument: {sorted(kwargs)}")


@pytest.mark.parametrize(("name", "path"), PATHS)
def test_every_reader_sees_the_node_configuration(
    monkeypatch: pytest.MonkeyPatch, config: Path, name: str, path: str
) -> None:
    command = options.COMMAND[name]
    seen: list[tuple[dict[str, str], dict[str, Any]]] = []
    real = typhapki.cli.boundary.request_of

    def stop(call: Call) -> Any:
        request = real(call)
        handed = {**request.values, "pki": request.pki, "signer": request.signer}
        seen.append((dict(call.sources), handed))
        raise SystemExit(STOPPED)  # the body is never run

    monkeypatch.setattr(typhapki.cli.boundary, "request_of", stop)
    env = {"TYPHAPKI_CONFIG": str(config)}
    if path == "typer":
        env["TYPHAPKI_NO_FAST_PATH"] = "1"
    code, stdout, stderr = run_in_process([*name.split(), *_required(command)], env, 60)
    assert (code, len(seen)) == (STOPPED, 1), (code, stdout, stderr)
    sources, kwargs = seen[0]
    for opt in _takes(command):
        where = f"{config}: defaults.{opt.name}"
        assert sources.get(opt.name) == where, (name, opt.name, sources.get(opt.name))
        text = _text(opt)
        kind = command.option(opt.name).kind  # `facts` takes text
        value, source = _handed(kwargs, opt.name)
        assert value == (kind(text) if kind is not str else text), (name, opt.name, value)
        assert source in (None, where), (name, opt.name, source)
