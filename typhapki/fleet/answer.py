"""PuppetDB's JSON answers decoded whatever one row holds.

An answer is a list of rows, and a row's `value` is whatever a node uploaded as its
fact. Python's JSON reader recurses, and gives up near 1,000 levels (fewer in a
thread): one node's deeply nested fact would make the whole answer unreadable. So an
answer the reader gives up on is split, without recursion, into its rows and each row
into its members; a member that is still too deep becomes TOO_DEEP, which breaks only
its own node (typhapki/fleet/nodes.py). Pure: no I/O.
"""

from __future__ import annotations

import json
import re

TYPE_CHECKING = False  # typing is not imported at run time (typhapki/record.py)
if TYPE_CHECKING:
    from typing import Any


class NestedTooDeep:
    """A value nested deeper than Python's JSON reader goes."""

    def __repr__(self) -> str:
        return "TOO_DEEP"


TOO_DEEP = NestedTooDeep()

# Strings (whose brackets do not count) and the structural characters, in order.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')


class MalformedJson(ValueError):
    """Not JSON at all (the message says where)."""


def decode(text: str) -> Any:
    """The JSON document in `text`; a member of a row too deep to read is TOO_DEEP.
    MalformedJson when it is not JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        pass
    except ValueError as exc:
        raise MalformedJson(str(exc)) from None
    start, end = _strip(text, 0, len(text))
    if text[start : start + 1] != "[":
        raise MalformedJson("nested too deeply")
    return [_row(text, a, b) for a, b in _members(text, start, end, "[", "]")]


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start] in " \t\r\n":
        start += 1
    while end > start and text[end - 1] in " \t\r\n":
        end -= 1
    return start, end


def _members(text: str, start: int, end: int, opening: str, closing: str) -> list[tuple[int, int]]:
    """The spans of the members of the list or object at text[start:end], found by
    counting brackets outside strings (no recursion)."""
    if text[start] != opening or text[end - 1] != closing:
        raise MalformedJson(f"expected {opening}...{closing} at offset {start}")
    spans: list[tuple[int, int]] = []
    depth = 0
    begin = start + 1
    for match in _TOKEN.finditer(text, start, end):
        token = match.group()
        if token in "[{":
            depth += 1
        elif token in "]}":
            depth -= 1
            if depth == 0 and match.end() != end:
                raise MalformedJson(f"unbalanced {token} at offset {match.start()}")
        elif token == "," and depth == 1:
            spans.append((begin, match.start()))
            begin = match.end()
    if depth != 0:
        raise MalformedJson("unbalanced brackets")
    last = _strip(text, begin, end - 1)
    if last[0] < last[1] or spans:
        spans.append((begin, end - 1))
    return spans


def _value(text: str, start: int, end: int) -> Any:
    try:
        return json.loads(text[start:end])
    except RecursionError:
        return TOO_DEEP
    except ValueError as exc:
        raise MalformedJson(str(exc)) from None


def _row(text: str, start: int, end: int) -> Any:
    """One row: read whole, or member by member when it is too deep."""
    start, end = _strip(text, start, end)
    try:
        return json.loads(text[start:end])
    except RecursionError:
        pass
    except ValueError as exc:
        raise MalformedJson(str(exc)) from None
    if text[start : start + 1] != "{":
        return TOO_DEEP  # a row that is not an object: refused by its reader
    row: dict[str, Any] = {}
    for a, b in _members(text, start, end, "{", "}"):
        key_match = _TOKEN.match(text, _strip(text, a, b)[0])
        if key_match is None or not key_match.group().startswith('"'):
            raise MalformedJson(f"expected a member name at offset {a}")
        colon = _strip(text, key_match.end(), b)[0]
        if text[colon : colon + 1] != ":":
            raise MalformedJson(f"expected ':' at offset {colon}")
        key = json.loads(key_match.group())
        row[key] = _value(text, *_strip(text, colon + 1, b))
    return row
