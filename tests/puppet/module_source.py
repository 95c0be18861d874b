"""The typhapki Puppet module read as text: each class's parameters, their types and
their puppet-strings `@param` texts, the type aliases' enums, the module's data, and
the README's parameter tables. Pure parsing, no puppet: tests/puppet/test_module_options.py
holds them to one another and to the option table (typhapki/options.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.puppet import MODULE as MODULE


@dataclass(frozen=True)
class Param:
    cls: str  # typhapki::certs
    name: str  # cfssl_url
    type: str  # Optional[Stdlib::HTTPUrl]
    default: str | None  # as written after `=`, None without one
    doc: str  # the @param text, one line

    @property
    def key(self) -> str:
        """The hiera key of automatic parameter lookup (the define: the name)."""
        return self.name if self.cls == "typhapki::restart" else f"{self.cls}::{self.name}"


_PARAM_LINE = re.compile(r"^  ([A-Z].*?) \$(\w+)(?: = (.*?))?,$", re.M)


def params() -> dict[str, Param]:
    """Every class's and the define's parameters, by hiera key."""
    found: dict[str, Param] = {}
    for path in sorted(MODULE.glob("manifests/**/*.pp")):
        text = path.read_text()
        head = re.search(r"^(?:class|define) ([\w:]+)\s*(\(\n(.*?)\n\))?\s*\{", text, re.S | re.M)
        assert head is not None, path
        docs = {
            m[1]: " ".join(line[1:].strip() for line in m[2].splitlines())
            for m in re.finditer(r"^# @param (\w+)\n((?:#   .*\n)+)", text, re.M)
        }
        for m in _PARAM_LINE.finditer(head[3] or ""):
            param = Param(head[1], m[2], m[1], m[3], docs.get(m[2], ""))
            found[param.key] = param
    return found


def readme_rows() -> dict[str, tuple[str, str]]:
    """README.md's parameter tables: hiera key -> (type, meaning)."""
    rows = {}
    for line in (MODULE / "README.md").read_text().splitlines():
        m = re.match(r"\| `([\w:]+)` \| `(.*?)` \| (.*) \|$", line)
        if m:
            rows[m[1]] = (m[2], m[3])
    return rows


def enum(alias: str) -> tuple[str, ...]:
    """The values of a type alias `Enum[...]` (types/NAME.pp)."""
    name = alias.split("::")[-1].lower()
    text = (MODULE / "types" / f"{name}.pp").read_text()
    m = re.search(rf"type {re.escape(alias)} = Enum\[(.*?)\]", text)
    assert m is not None, alias
    return tuple(re.findall(r"'([^']*)'", m[1]))


def struct(path: str) -> dict[str, str]:
    """A Struct alias's keys -> types (types/certs/NAME.pp), optional keys bare."""
    text = (MODULE / "types" / path).read_text()
    return {
        m[1] or m[2]: m[3]
        for m in re.finditer(r"^\s+(?:Optional\[(\w+)\]|(\w+))\s+=> (.*?),$", text, re.M)
    }


def data() -> dict[str, object]:
    """The module's own defaults (data/common.yaml)."""
    loaded = yaml.safe_load((MODULE / "data" / "common.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def readme_path() -> Path:
    return MODULE / "README.md"
