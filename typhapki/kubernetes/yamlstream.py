"""Multi-document YAML streams as Kubernetes reads them: the rendered chart a Helm
post-renderer gets on stdin, and the files of a kustomize base.

The stream is split as Kubernetes' YAMLReader (apimachinery's util/yaml) splits it:
lines end at LF; a line that starts with ``---`` ends a document when all that follows
is whitespace (the CR of a CRLF line end among it) or a comment (Helm's ``# Source:``
lines sit on their own lines below it). Any other line that starts with ``---``
(``--- !!map``, ``--- {kind: ...}``, ``---x``) is refused: YAMLReader refuses it while
other readers (Helm's splitter, a YAML parser) open a document there, so what was
patched and what gets installed could differ.

Each document is then parsed on its own and held to typhapki's YAML limits
(typhapki/yamllimits.py: depth, aliases, no tags, one document; and here the values
after alias expansion), so a document YAMLReader would not see, hidden behind a lone CR
or a Unicode line break, is refused too. A stream holds at most MAX_STREAM bytes.
Every document keeps its text: what typhapki does not patch is passed on as it came.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import IO, Any

from typhapki.errors import ConfigError
from typhapki.record import record

MAX_STREAM = 64 * 1024 * 1024  # bytes per stream: Calico's chart is about 30 KiB

SEPARATOR = "---"
# What Go's strings.TrimSpace trims (unicode.IsSpace), which YAMLReader applies to
# the rest of a separator line. Python's str.strip would also trim \x1c-\x1f.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # noqa: E501


@record(frozen=True)
class Document:
    """One document of a stream, as it came and as it parses."""

    separator: str  # the separator line that opened it, line end included; "" for the first
    text: str  # its text, byte for byte
    line: int  # the stream's line its text starts on (1-based)
    obj: Any  # what it holds: None for a document of comments only


def read_stream(stream: IO[bytes], where: str) -> str:
    """At most MAX_STREAM bytes of UTF-8 text from `stream` (stdin)."""
    data = stream.read(MAX_STREAM + 1)
    if len(data) > MAX_STREAM:
        raise ConfigError(f"{where}: more than {MAX_STREAM // 1024 // 1024} MiB of manifests")
    return decode(data, where)


def decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 (byte {exc.start}): not manifests") from None


def split(text: str, where: str) -> list[tuple[str, str, int]]:
    """(separator line, document text, first line) for each document, in order."""
    parts: list[tuple[str, str, int]] = []
    separator, start, first = "", 0, 1
    position, number = 0, 1
    while position < len(text):
        end = text.find("\n", position)
        end = len(text) if end < 0 else end + 1
        if text.startswith(SEPARATOR, position):
            rest = text[position + len(SEPARATOR) : end].strip(_GO_SPACE)
            if rest and not rest.startswith("#"):
                raise ConfigError(
                    f"{where}:{number}: a document separator with content after it "
                    f"({_excerpt(rest)}); put '---' on a line of its own (Kubernetes' "
                    "readers disagree on such a line)"
                )
            parts.append((separator, text[start:position], first))
            separator, start, first = text[position:end], end, number + 1
        position, number = end, number + 1
    parts.append((separator, text[start:], first))
    return parts


def _excerpt(text: str, limit: int = 40) -> str:
    shown = repr(text[:limit])
    return shown + ("..." if len(text) > limit else "")


def load(text: str, where: str, what: str) -> list[Document]:
    """Every document of the stream, split and parsed within the limits."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_STREAM:
        raise ConfigError(f"{where}: more than {MAX_STREAM // 1024 // 1024} MiB of YAML")
    return [
        Document(separator, part, line, load_document(part, where, line, what))
        for separator, part, line in split(text, where)
    ]


def _loader() -> Any:
    """libyaml's safe loader, with timestamps kept as the text they are: Kubernetes
    reads them as strings, and a date that is no date must not fail the stream."""

    from typhapki.yamllimits import yaml_loader

    base = yaml_loader()

    class _Loader(base):  # type: ignore[misc,valid-type]
        pass

    _Loader.add_constructor("tag:yaml.org,2002:timestamp", base.construct_yaml_str)
    return _Loader


def load_document(text: str, where: str, line: int, what: str) -> Any:
    """One document's value, or None; ConfigError naming `where` and the stream line."""
    import yaml

    from typhapki.yamllimits import scan_events

    try:
        scan_events(text, Path(where), what)
        value = yaml.load(text, Loader=_loader())
    except ConfigError as exc:
        raise ConfigError(_relined(str(exc), where, line)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = line + mark.line if mark is not None else line
        raise ConfigError(f"{where}:{at}: not valid YAML") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # 5,000-digit integers, ...
        raise ConfigError(f"{where}:{line}: not valid YAML ({type(exc).__name__})") from None
    _bounded(value, where, line)
    return value


def _relined(message: str, where: str, line: int) -> str:
    """scan_events numbers lines from the document's start: number them in the stream."""
    match = re.match(re.escape(where) + r":(\d+):", message)
    if match is None:
        return message
    return f"{where}:{line + int(match.group(1)) - 1}:{message[match.end() :]}"


def _bounded(value: Any, where: str, line: int) -> None:
    """The values a document expands to (aliases copied out, as Kubernetes' reader
    does), at most MAX_NODES, nested at most MAX_DEPTH deep."""
    from typhapki.yamllimits import MAX_DEPTH, MAX_NODES

    seen = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise ConfigError(f"{where}:{line}: more than {MAX_NODES} values (alias bomb?)")
        if isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                raise ConfigError(f"{where}:{line}: nested more than {MAX_DEPTH} levels deep")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
