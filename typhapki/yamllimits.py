"""The limits every YAML file typhapki reads is held to: hiera and the node
configuration file alike (typhapki/inventory/hiera.py, typhapki/cli/nodeconfig.py).

Checked on the event stream, before anything is composed: libyaml's composer
recurses in C (deep nesting crashes it) and its parser slows down quadratically
with depth; aliases are counted here, and the values they expand to by the reader
that builds the document (MAX_NODES).
"""

from __future__ import annotations

from collections.abc import Iterator
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
    the data in that message: "hiera data").

    The limits are typhapki's own, whatever the PyYAML release: a libyaml that carries a
    nesting limit of its own (the one bundled with PyYAML 6.0.3 and later) may refuse a
    deep document while it scans ahead, before the event that crosses MAX_DEPTH reaches
    this scan. Only then, on its error, the pure-Python parser (no limit of its own, and
    its scanner looks ahead a bounded distance) walks the same events to reach this
    module's limit first; a document it accepts re-raises libyaml's error unchanged.
    """
    import yaml

    try:
        _scan(yaml.parse(text, Loader=yaml_loader()), file, what)
    except yaml.YAMLError:
        if yaml_loader() is not yaml.SafeLoader:
            _rescan_in_python(text, file, what)
        raise


def _rescan_in_python(text: str, file: Path, what: str) -> None:
    """Raise typhapki's ConfigError where the pure-Python parser reaches a limit before
    an error of its own; else return, and the caller's YAML error stands."""
    import yaml

    try:
        _scan(yaml.parse(text, Loader=yaml.SafeLoader), file, what)
    except yaml.YAMLError:
        return


def _scan(events: Iterator[Any], file: Path, what: str) -> None:
    import yaml

    aliases = 0
    documents = 0
    depth = 0
    for event in events:
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
