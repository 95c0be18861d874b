"""The node configuration file: defaults for every command's options, flags winning.

Puppet (the typhapki module) writes `/etc/typhapki/typhapki.yaml`, so that
`typhapki issue`, `check`, `ferm` or `facts` typed by hand on a node does exactly what
the Puppet run does, with no flags. `$TYPHAPKI_CONFIG` names another file (an empty
value: no file at all). An absent file means no defaults, whichever
path names it.

    version: 1
    defaults:              # every command that has the option (not `ca init`)
      out: /srv/calico-typha-pki
      ca_dir: /etc/typhapki/ca
      role: both
    commands:              # one command only; wins over `defaults`
      ferm:
        output: /etc/ferm/ferm.d/10_calico-typha

Keys are the option's parameter name (`ca_dir`) or its long name (`ca-dir`). A key no
command knows, or a value the option refuses, is a one-line usage error naming the
file and the key: a typo must not silently change what a Puppet run does. So is a
path holding a control character (NUL, a newline): it would name another file than
it shows, and break the one line of every message about it.

The file is obeyed as root, so it is trusted the way ssh trusts its configuration:
it and the directory holding it (and, through a symlink, the target's directory)
must be owned by root or the user typhapki runs as, and writable by neither group
nor others. It is held to hiera's YAML limits (typhapki/yamllimits.py: depth,
aliases, values after expansion; no tags) within LIMIT bytes. Options that skip a
safety check (FLAG_ONLY) are flags only: typed by whoever takes the decision, never
read from a file. Any of these refusals is a one-line usage error; `facts` reports
it inside the fact instead.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki import options
from typhapki.errors import ConfigError, unprintable
from typhapki.provenance import worded
from typhapki.record import field, record
from typhapki.safeio import read_regular

if TYPE_CHECKING:
    from typing import Any

DEFAULT_PATH = Path("/etc/typhapki/typhapki.yaml")
ENV_VAR = "TYPHAPKI_CONFIG"
VERSION = 1
LIMIT = 1024 * 1024

# `ca init --days` and `--key-type` are the CA's, not the leaves': `defaults` would
# hand a leaf lifetime to a new CA. The CA is made once, by hand, with flags.
NO_DEFAULTS = frozenset({("ca", "init")})
# Options that override a safety check (replacing a CA, going back a rotation stage,
# sending the CSR and the auth token in clear, writing a relaxed rule without the mTLS
# proof): marked flag-only where they are declared. A file must not decide them for
# every later run; the person who types the flag does, for one run.
FLAG_ONLY = options.FLAG_ONLY


@record(frozen=True)
class NodeConfig:
    """The file as written: defaults for all commands, then per command."""

    path: Path | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    commands: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def config_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The file to read: $TYPHAPKI_CONFIG (empty: none), else the default path."""
    env = os.environ if environ is None else environ
    if ENV_VAR not in env:
        return DEFAULT_PATH
    value = env[ENV_VAR]
    return Path(value) if value else None


def load(path: Path | None) -> NodeConfig:
    """Read and shape-check the file; values are checked against the commands later."""
    if path is None:
        return NodeConfig()
    if not os.path.lexists(path):
        return NodeConfig()
    check_trusted(path)
    data = read_regular(path, "node configuration file", LIMIT)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    doc = _as_json(text, path)
    if doc is _NOT_JSON:
        doc = _as_yaml(text, path)
    if doc is None:
        return NodeConfig(path)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping with defaults: and commands:")
    unknown = sorted(str(k) for k in doc if k not in ("version", "defaults", "commands"))
    if unknown:
        raise ConfigError(
            f"{path}: unknown top-level key {unknown[0]!r} (version, defaults, commands)"
        )
    version = doc.get("version", str(VERSION))
    if version != str(VERSION):
        raise ConfigError(f"{path}: version: {version!r} is not supported (expected {VERSION})")
    defaults = _mapping(path, "defaults", doc.get("defaults"))
    commands_raw = _mapping(path, "commands", doc.get("commands"))
    commands = {
        str(name): _mapping(path, f"commands.{name}", value) for name, value in commands_raw.items()
    }
    return NodeConfig(path, defaults, commands)


_NULLS = ("", "~", "null", "Null", "NULL")
_NOT_JSON = object()
_JSON_WORDS = {True: "true", False: "false", None: "null"}


def _as_yaml(text: str, path: Path) -> Any:
    import yaml

    from typhapki.yamllimits import scan_events

    try:
        scan_events(text, path, "the node configuration file")
        # BaseLoader: every scalar is text, converted like a flag's value.
        return _nulls_dropped(yaml.load(text, Loader=yaml.BaseLoader), path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"{path}:{where} not valid YAML: {problem}") from None


def _as_json(text: str, path: Path) -> Any:
    """The document as `_as_yaml` reads it, when the file is JSON after its comment lines
    (how the typhapki module writes it: YAML is a superset of JSON), else _NOT_JSON.

    Importing PyYAML costs more than the rest of a `check`; the json module, a tenth
    of it. Every scalar becomes the text YAML's BaseLoader would give (numbers as
    written, true/false/null as words), then goes through the same null rule and
    limits; anything json refuses is left to the YAML reader and its errors.
    """
    if not _plain_ascii(text):
        # Checked on the whole text, comment lines too: str.splitlines() breaks lines
        # at characters YAML does not (a form feed), str.lstrip() strips some YAML does
        # not take as space; either could turn part of a comment into a line obeyed.
        return _NOT_JSON
    # On this text splitlines() breaks at YAML's own line breaks only (\n, \r, \r\n),
    # and a line whose first character after spaces is '#' is YAML's comment (PyYAML
    # refuses a tab there inside a mapping: such a line is left to it).
    body = "\n".join(
        line for line in text.splitlines() if not line.lstrip(" ").startswith("#")
    ).strip(" \t\r\n")
    if not body.startswith("{"):
        return _NOT_JSON
    import json

    try:
        doc = json.loads(body, parse_int=str, parse_float=str, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return _NOT_JSON
    from typhapki.yamllimits import MAX_DEPTH

    def words(value: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ConfigError(f"{path}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, dict):
            return {k: words(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [words(v, depth + 1) for v in value]
        return _JSON_WORDS.get(value, value) if not isinstance(value, str) else value

    return _nulls_dropped(words(doc, 1), path)


def _plain_ascii(text: str) -> bool:
    """Printable ASCII, tabs and line breaks only, and no surrogate escapes: YAML's
    reader refuses other control characters, breaks lines at some others (NEL, U+2028)
    and refuses surrogates, where json would not. Anything else is left to it."""
    if not text.isascii() or "\x7f" in text or "\\ud" in text.lower():
        return False  # "\\ud800": PyYAML refuses the surrogates json would pair up
    return all(c >= " " or c in "\t\n\r" for c in text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: the YAML reader decides


def check_trusted(path: Path) -> None:
    """ssh's rule for its configuration: owner root or us, no group or other write,
    for the file and the directories holding its name and its target."""
    uid = os.geteuid()
    real = Path(os.path.realpath(path))
    for what, where in (
        ("", path),
        ("directory ", path.parent),
        ("directory ", real.parent),
    ):
        try:
            info = os.stat(where)
        except OSError as exc:
            raise ConfigError(f"{path}: {what}{where}: {exc.strerror or exc}") from None
        if info.st_uid not in (0, uid):
            raise ConfigError(
                f"{path}: {what}{where} is owned by uid {info.st_uid}, not root or the user "
                f"typhapki runs as (uid {uid}): not obeyed"
            )
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ConfigError(
                f"{path}: {what}{where} is writable by group or others "
                f"(mode {stat.S_IMODE(info.st_mode):04o}): not obeyed; chmod go-w it"
            )


def _nulls_dropped(value: Any, path: Path) -> Any:
    """YAML nulls (text under BaseLoader) as None; an option set to null is unset.

    Aliases are shared, not copied, by the loader; walking them here expands them, so
    the walk counts the values it makes (hiera's MAX_NODES) to stop an alias bomb.
    """
    from typhapki.yamllimits import MAX_NODES

    made = 0

    def walk(value: Any) -> Any:
        nonlocal made
        made += 1
        if made > MAX_NODES:
            raise ConfigError(f"{path}: more than {MAX_NODES} values (alias bomb?)")
        if isinstance(value, str):
            return None if value in _NULLS else value
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    return walk(value)


def _mapping(path: Path, key: str, value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"{path}: {key}: expected a mapping of option names")
    return dict(value)


def _commands() -> Iterator[tuple[tuple[str, ...], options.Command]]:
    """Every command of the table with its words: ("issue",), ("ca", "init")."""
    for command in sorted(options.COMMANDS, key=lambda c: c.name):
        yield tuple(command.name.split()), command


def _params(command: options.Command) -> dict[str, options.Opt]:
    """Options by every name the file may use: `ca_dir` and `ca-dir` alike."""
    names: dict[str, options.Opt] = {}
    for opt in command.options:
        if not opt.argument:
            names[opt.name] = opt
            names[opt.flag[2:]] = opt
    return names


_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def _problem(kind: type, text: str) -> str | None:
    """Why the option's conversion refuses `text`: a number's as on the command line
    (the number parser, typhapki/numbers.py), a flag's as click's."""
    from typhapki.errors import TyphapkiError
    from typhapki.numbers import option_number

    if kind in (int, float):
        try:
            option_number(kind, text, "")
        except TyphapkiError as exc:
            return str(exc).removeprefix(": ")
    elif kind is bool and text.strip().lower() not in _TRUE | _FALSE:
        return "expected true or false"
    return None


def _converted(path: Path, key: str, opt: options.Opt, value: Any) -> Any:
    """The value as the file gives it (text), checked the way the option converts it.

    An option in FLAG_ONLY is refused whatever its value.

    Scalars are read as text (YAML's BaseLoader), so `key_mode: 0640` stays "0640" and
    "90" or "true" convert exactly as they would on the command line.
    """
    if opt.name in FLAG_ONLY:
        raise ConfigError(
            f"{path}: {key}: {opt.flag} overrides a safety check and is a flag only: "
            "never read from this file"
        )
    if value is None:
        return None
    if opt.multiple and not isinstance(value, list):
        value = [value]
    items = value if isinstance(value, list) else [value]
    if (isinstance(value, list) and not opt.multiple) or isinstance(value, dict):
        raise ConfigError(f"{path}: {key}: expected a single value")
    if any(not isinstance(item, str) for item in items):
        raise ConfigError(f"{path}: {key}: expected a list of single values")
    for item in items:
        # A refused value is worded as every other one (typhapki/provenance.py).
        said = worded(opt.name, item, f"{path}: {key}")
        if (problem := _problem(opt.kind, item)) is not None:
            raise ConfigError(f"{said}: {problem}")
        if opt.kind is Path and (char := unprintable(item)) is not None:
            raise ConfigError(f"{said}: a path with the control character {char}")
    return value


def default_map(config: NodeConfig) -> dict[str, Any]:
    """click's `default_map` for every command of the option table
    (typhapki/options.py): per command, param name -> value."""
    return resolved(config)[0]


def resolved(config: NodeConfig) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """`default_map`, and where each of its values is written: per command (its words
    joined by a space), param name -> `FILE: defaults.KEY` or `FILE: commands.CMD.KEY`."""
    if config.path is None:
        return {}, {}
    path = config.path
    tree = dict(_commands())
    by_name = {" ".join(p): p for p in tree}
    for name in config.commands:
        if name not in by_name:
            known = ", ".join(sorted(by_name))
            raise ConfigError(f"{path}: commands: unknown command {name!r} (one of: {known})")
    result: dict[str, Any] = {}
    origins: dict[str, dict[str, str]] = {}
    used: set[str] = set()
    for cmd_path, command in tree.items():
        params = _params(command)
        values: dict[str, Any] = {}
        where: dict[str, str] = {}
        if cmd_path not in NO_DEFAULTS:
            for key, value in config.defaults.items():
                if key in params:
                    used.add(key)
                    param = params[key]
                    values[param.name] = _converted(path, f"defaults.{key}", param, value)
                    where[param.name] = f"{path}: defaults.{key}"
        own = config.commands.get(" ".join(cmd_path), {})
        for key, value in own.items():
            if key not in params:
                raise ConfigError(
                    f"{path}: commands.{' '.join(cmd_path)}.{key}: "
                    f"`typhapki {' '.join(cmd_path)}` has no option --{key.replace('_', '-')}"
                )
            param = params[key]
            values[param.name] = _converted(
                path, f"commands.{' '.join(cmd_path)}.{key}", param, value
            )
            where[param.name] = f"{path}: commands.{' '.join(cmd_path)}.{key}"
        values = {k: v for k, v in values.items() if v is not None}
        origins[" ".join(cmd_path)] = {k: where[k] for k in values}
        if values:
            node = result
            for part in cmd_path[:-1]:
                node = node.setdefault(part, {})
            node[cmd_path[-1]] = values
    for key in config.defaults:
        if key.replace("-", "_") in FLAG_ONLY:
            raise ConfigError(
                f"{path}: defaults.{key}: --{key.replace('_', '-')} overrides a safety check "
                "and is a flag only: never read from this file"
            )
        if key not in used:
            raise ConfigError(
                f"{path}: defaults.{key}: no command has an option --{key.replace('_', '-')}"
            )
    return result, origins
