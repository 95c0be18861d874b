"""PuppetDB's JSON answers decoded whatever one row holds.

An answer is a list of rows, and a row's `value` is whatever a node uploaded as its
fact. One node's deeply nested fact must not make the whole answer unreadable, and
the verdict must not depend on the interpreter: Python's JSON reader recurses, and
where it gives up depends on the version (near 1,000 levels on 3.11 at the default
recursion limit; 3.13's C reader has its own, higher limit) and on the call stack. So
the depth is bounded here, before anything is read: the nesting of the answer is
counted first, without recursion (`depth`), and json.loads only ever reads what is
within MAX_DEPTH. An answer that nests deeper is split, without recursion, into its
rows and each row into its members; a member that nests more than MAX_DEPTH levels
becomes TOO_DEEP, which breaks only its own node (typhapki/fleet/nodes.py). The same
answer gives the same verdict on every Python. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

# How many levels of lists and objects one member of a row may nest (a typhapki fact
# nests 4). Half of Python's default recursion limit (1,000 on 3.11 and 3.13), so that
# json.loads reads the answer around it (2 levels more) from any call depth typhapki
# has, without ever reaching a RecursionError.
MAX_DEPTH = 500


class NestedTooDeep:
    """A value nested more than MAX_DEPTH levels deep."""

    def __repr__(self) -> str:
        return "TOO_DEEP"


TOO_DEEP = NestedTooDeep()

# Strings (whose brackets do not count) and the structural characters, in order.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')
# What `depth` keeps of the text: brackets and the quotes that delimit strings.
_NOT_STRUCTURE = bytes(set(range(256)) - set(b'[]{}"'))
_STRING = re.compile(rb'"[^"]*"')
_LEVEL = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class MalformedJson(ValueError):
    """Not JSON at all (the message says where)."""


def depth(text: str) -> int:
    """How many levels of lists and objects nest in the JSON `text` (0 for a scalar),
    counted without recursion and without reading it: brackets inside strings do not
    count. A prefix of `text` that json.loads reads without an error never nests deeper
    than this, so `text` is safe to hand to json.loads when this is small."""
    # Escapes first, so that only the quotes that delimit strings are left: a backslash
    # pair, then an escaped quote (JSON allows backslashes only inside strings).
    data = text.encode("utf-8", "surrogatepass").replace(b"\\\\", b"").replace(b'\\"', b"")
    # Most strings hold no bracket and become "" here; two strings with nothing but
    # commas and colons between them become one: neither changes what is outside.
    structure = data.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    brackets = _STRING.sub(b"", structure).replace(b'"', b"")
    return max(accumulate(map(_LEVEL.__getitem__, brackets)), default=0)


def decode(text: str) -> Any:
    """The JSON document in `text`; a member of a row that nests more than MAX_DEPTH
    levels is TOO_DEEP. MalformedJson when it is not JSON."""
    if depth(text) <= MAX_DEPTH + 2:  # the answer's list, a row's object, the member
        return _loads(text)
    start, end = _strip(text, 0, len(text))
    if text[start : start + 1] != "[":
        raise MalformedJson(f"nested more than {MAX_DEPTH + 2} levels deep")
    return [_row(text, a, b) for a, b in _members(text, start, end, "[", "]")]


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MalformedJson(str(exc)) from None


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
    level = 0
    begin = start + 1
    for match in _TOKEN.finditer(text, start, end):
        token = match.group()
        if token in "[{":
            level += 1
        elif token in "]}":
            level -= 1
            if level == 0 and match.end() != end:
                raise MalformedJson(f"unbalanced {token} at offset {match.start()}")
        elif token == "," and level == 1:
            spans.append((begin, match.start()))
            begin = match.end()
    if level != 0:
        raise MalformedJson("unbalanced brackets")
    last = _strip(text, begin, end - 1)
    if last[0] < last[1] or spans:
        spans.append((begin, end - 1))
    return spans


def _value(text: str, start: int, end: int) -> Any:
    member = text[start:end]
    return TOO_DEEP if depth(member) > MAX_DEPTH else _loads(member)


def _row(text: str, start: int, end: int) -> Any:
    """One row: read whole, or member by member when it is too deep."""
    start, end = _strip(text, start, end)
    if depth(text[start:end]) <= MAX_DEPTH + 1:
        return _loads(text[start:end])
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
