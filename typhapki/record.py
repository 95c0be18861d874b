"""Records: typhapki's value classes, without the start-up cost of `dataclasses`.

`check`, `facts` and `metrics` run as fresh processes on every Puppet run, and their
start-up is measured against `python3 -c "import cryptography.x509"`
(bench/bench_facts_check.py). `dataclasses` imports `inspect` (with `ast`, `dis` and
`tokenize`) and compiles six methods per class with `exec`: about 10 ms to import and
0.5 ms a class, more than everything else typhapki runs on that path. A record is
built here from the class's annotations in a few microseconds, with generic methods.

    @record(frozen=True)
    class Leaf:
        name: str
        sans: list[str] = field(default_factory=list)
        note: str = field(default="", compare=False, repr=False)

What a record does, as `dataclasses.dataclass` does it: an ``__init__`` taking the
fields in order, positionally or by name, with defaults and default factories;
``__repr__``; ``__eq__`` over the compared fields, only between instances of the same
class; with ``frozen=True``, no assignment and a ``__hash__`` over the compared fields
(without, ``__hash__`` is None); fields inherited from record bases come first.
`replace` and `fields` are the counterparts of `dataclasses.replace` and
`dataclasses.fields`. Not supported (and not used): ``__post_init__``, ordering,
keyword-only fields, ClassVar and InitVar annotations.

Type checkers see `record` and `field` as `dataclasses.dataclass` and
`dataclasses.field` (PEP 681, `typing.dataclass_transform`).

Whether this module still earns its place is measured, not assumed: bench/bench_facts_check.py
--measures runs `check` and `facts` with dataclasses in its place (docs/performance.md).
"""

from __future__ import annotations

from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record."""


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """A field's declaration: `field(...)` in the class body, or a plain default."""

    __slots__ = ("compare", "default", "default_factory", "name", "repr")

    def __init__(
        self,
        default: Any = MISSING,
        default_factory: Any = MISSING,
        compare: bool = True,
        repr: bool = True,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.compare = compare
        self.repr = repr


def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    compare: bool = True,
    repr: bool = True,
) -> Any:
    """A field with a default or a default factory, or left out of comparison or repr."""
    return Field(default, default_factory, compare, repr)


_FIELDS = "__record_fields__"


def fields(obj: Any) -> tuple[Field, ...]:
    """A record's (or record class's) fields, in ``__init__`` order."""
    try:
        found: tuple[Field, ...] = getattr(obj, _FIELDS)
    except AttributeError:
        raise TypeError(f"{obj!r} is not a record") from None
    return found


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of the record `obj` with `changes` (fields by name) applied."""
    for f in fields(obj):
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    new: T = type(obj)(**changes)
    return new


def _declared(cls: type) -> dict[str, Field]:
    """The fields of `cls`: its record bases' first, then its own annotations."""
    found: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in getattr(base, _FIELDS, ()):
            found[f.name] = f
    # The class's own annotations only (not inspect.get_annotations: inspect is what
    # this module avoids importing).
    for name in cls.__dict__.get("__annotations__", {}):  # noqa: RUF063
        value = cls.__dict__.get(name, MISSING)
        if isinstance(value, Field):
            f = value
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        else:
            f = Field(default=value)
        f.name = name
        found.pop(name, None)
        found[name] = f
    seen_default = False
    for f in found.values():
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if seen_default and not has_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
        seen_default = seen_default or has_default
    return found


def _build(cls: type, frozen: bool) -> type:
    all_fields = tuple(_declared(cls).values())
    names = tuple(f.name for f in all_fields)
    compared = tuple(f.name for f in all_fields if f.compare)
    shown = tuple(f.name for f in all_fields if f.repr)
    qualname = cls.__qualname__

    known = frozenset(names)
    plain = {f.name: f.default for f in all_fields if f.default is not MISSING}
    factories = [
        (f.name, f.default_factory) for f in all_fields if f.default_factory is not MISSING
    ]
    required = [f.name for f in all_fields if f.name not in plain and f.default_factory is MISSING]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # Written into the instance's dict at once, past a frozen record's __setattr__ (as
        # dataclasses do): the option table alone makes some 150 records on every start
        # (typhapki/options.py).
        if len(args) > len(names):
            raise TypeError(
                f"{qualname}() takes {len(names)} positional arguments but {len(args)} were given"
            )
        for name in kwargs:
            if name not in known:
                raise TypeError(f"{qualname}() got an unexpected keyword argument {name!r}")
            if name in names[: len(args)]:
                raise TypeError(f"{qualname}() got multiple values for argument {name!r}")
        values = self.__dict__
        values.update(plain)
        values.update(zip(names, args, strict=False))
        values.update(kwargs)
        for name, factory in factories:
            if name not in values:
                values[name] = factory()
        for name in required:
            if name not in values:
                raise TypeError(f"{qualname}() missing required argument: {name!r}")

    def __repr__(self: Any) -> str:
        shown_values = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{qualname}({shown_values})"

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in compared)

    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, n) for n in compared))

    def __setattr__(self: Any, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self: Any, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    own = cls.__dict__
    methods: dict[str, Any] = {"__init__": __init__}
    if "__repr__" not in own:
        methods["__repr__"] = __repr__
    if "__eq__" not in own:
        methods["__eq__"] = __eq__
    # As dataclasses: a __hash__ the class body defines stays; otherwise frozen records
    # hash their compared fields and mutable ones are unhashable (an __eq__ in the body
    # makes Python set __hash__ to None, which does not count as defined).
    if own.get("__hash__", MISSING) is MISSING or (own["__hash__"] is None and "__eq__" in own):
        methods["__hash__"] = __hash__ if frozen else None
    if frozen:
        methods["__setattr__"] = __setattr__
        methods["__delattr__"] = __delattr__
    methods[_FIELDS] = all_fields
    methods["__match_args__"] = names
    for name, value in methods.items():
        setattr(cls, name, value)
    return cls


@dataclass_transform(field_specifiers=(field, Field))
def record(cls: Any = None, /, *, frozen: bool = False) -> Any:
    """Make `cls` a record (see the module's docstring); ``frozen=True`` as dataclasses."""

    def wrap(cls: type) -> type:
        return _build(cls, frozen)

    return wrap if cls is None else wrap(cls)
