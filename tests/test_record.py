"""typhapki/record.py behaves as `dataclasses.dataclass` for everything typhapki uses.

The same generated class is built both ways, and every operation on it (construction
by position and by name, with missing, repeated or unknown arguments; repr; equality;
hashing; replace; assignment) must give the same result or the same kind of error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from typhapki import record as rec

NAMES = ["a", "b", "c", "d", "e"]


@st.composite
def specs(draw: st.DrawFn) -> tuple[bool, list[tuple[str, str, bool, bool]]]:
    """(frozen, fields): each field is (name, kind, compare, repr); kind is "required",
    "default" or "factory", and required fields come first, as both demand."""
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=5))
    required = draw(st.integers(min_value=0, max_value=len(names)))
    fields = [
        (
            name,
            "required" if i < required else draw(st.sampled_from(["default", "factory"])),
            draw(st.booleans()),
            draw(st.booleans()),
        )
        for i, name in enumerate(names)
    ]
    return draw(st.booleans()), fields


def build(frozen: bool, fields: list[tuple[str, str, bool, bool]], how: str) -> type:
    """The class both ways: `how` is "dataclasses" or "record"."""
    field = dataclasses.field if how == "dataclasses" else rec.field
    namespace: dict[str, Any] = {"__annotations__": {}}
    for name, kind, compare, shown in fields:
        namespace["__annotations__"][name] = "object"
        if kind == "default":
            namespace[name] = field(default=name.upper(), compare=compare, repr=shown)
        elif kind == "factory":
            namespace[name] = field(default_factory=list, compare=compare, repr=shown)
        elif not (compare and shown):
            namespace[name] = field(compare=compare, repr=shown)
    cls = type("Thing", (), namespace)
    if how == "dataclasses":
        return dataclasses.dataclass(frozen=frozen)(cls)
    made: type = rec.record(frozen=frozen)(cls)
    return made


def outcome(action: Any) -> object:
    try:
        return ("ok", action())
    except (TypeError, AttributeError) as exc:
        return ("error", type(exc).__name__)


values = st.one_of(st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2))


@given(
    spec=specs(),
    positional=st.lists(values, max_size=6),
    named=st.dictionaries(st.sampled_from([*NAMES, "zz"]), values, max_size=3),
    other=st.dictionaries(st.sampled_from(NAMES), values, max_size=3),
)
def test_a_record_behaves_as_a_dataclass(
    spec: tuple[bool, list[tuple[str, str, bool, bool]]],
    positional: list[Any],
    named: dict[str, Any],
    other: dict[str, Any],
) -> None:
    frozen, fields = spec
    classes = {how: build(frozen, fields, how) for how in ("dataclasses", "record")}
    results = {}
    for how, cls in classes.items():
        made = outcome(lambda cls=cls: cls(*positional, **named))
        seen: list[object] = [made[0] if isinstance(made, tuple) else made]
        if isinstance(made, tuple) and made[0] == "ok":
            obj = made[1]
            seen.append(repr(obj).replace("Thing(", "", 1))
            seen.append({name: getattr(obj, name) for name, *_ in fields})
            copy = outcome(lambda cls=cls: cls(*positional, **named))[1]  # type: ignore[index]
            seen.append(obj == copy)
            seen.append(outcome(lambda obj=obj, copy=copy: hash(obj) == hash(copy)))
            replace = dataclasses.replace if how == "dataclasses" else rec.replace
            changed = outcome(lambda obj=obj, replace=replace: replace(obj, **other))
            seen.append(
                ("ok", {n: getattr(changed[1], n) for n, *_ in fields})
                if isinstance(changed, tuple) and changed[0] == "ok"
                else changed
            )
            if fields:
                seen.append(outcome(lambda obj=obj: setattr(obj, fields[0][0], 1)))
        else:
            seen.append(made)
        results[how] = seen
    assert results["record"] == results["dataclasses"]


def test_frozen_assignment_is_refused_as_by_dataclasses() -> None:
    @rec.record(frozen=True)
    class Point:
        x: int
        y: int = 0

    point = Point(1)
    with pytest.raises(AttributeError, match="cannot assign to field 'x'"):
        point.x = 2  # type: ignore[misc]
    assert rec.replace(point, y=3) == Point(1, 3)
    assert [f.name for f in rec.fields(Point)] == ["x", "y"]
    assert Point.__match_args__ == ("x", "y")


def test_fields_are_inherited_first() -> None:
    @rec.record(frozen=True)
    class Base:
        a: int
        b: int = 2

    @rec.record(frozen=True)
    class Child(Base):
        c: int = 3

    assert Child(1) == Child(1, 2, 3)
    assert repr(Child(1, c=4)).endswith("Child(a=1, b=2, c=4)")
    with pytest.raises(TypeError):
        rec.fields(object())
