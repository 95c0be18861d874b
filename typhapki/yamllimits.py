"""The limits every YAML file typhapki reads is held to: hiera and the node
configuration file alike (typhapki/puppet/hiera.py, typhapki/nodeconfig.py).

Checked on the event stream, before anything is composed: libyaml's composer
recurses in C (deep nesting crashes it) and its parser slows down quadratically
with depth; aliases are counted here, and the values they expand to by the reader
that builds the document (MAX_NODES).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typhapki.errors import ConfigError

MAX_ALIASES = 100  # per file
MAX_NODES = 100_000  # per file, after alias and merge-key expansion
MAX_DEPTH = 64  # nesting of mappings and lists, after alias expansion (hiera needs ~6)


def yaml_loader() -> Any:
    """libyaml's safe loader when PyYAML has it: same events, several times faster
    (facts run on every Puppet agent run)."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def scan_events(text: str, file: Path, what: str) -> None:
    """Refuse, naming `file` and the line: nesting deeper than MAX_DEPTH, more than
    MAX_ALIASES aliases, more than one document, and any explicit tag (`what` names
    the data in that message: "hiera data")."""
    import yaml

    aliases = 0
    documents = 0
    depth = 0
    for event in yaml.parse(text, Loader=yaml_loader()):
        line = event.start_mark.line + 1 if event.start_mark is not None else 0
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ConfigError(f"{file}:{line}: nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise ConfigError(f"{file}:{line}: more than one YAML document in the file")
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise ConfigError(f"{file}:{line}: YAML tag {tag!r} is not allowed in {what}")
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise ConfigError(
                    f"{file}:{line}: more than {MAX_ALIASES} YAML aliases (alias bomb?)"
                )
