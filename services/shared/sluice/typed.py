"""Typed, checked dataclasses from loose values: JSON records and settings read from strings.

Why not pydantic: the shared records and settings were all the gateway took from it, and it cost the
running gateway ~12 MiB of its 60 MiB memory budget (pydantic-core's library, its schema machinery
and the core schema it builds for every model class). What Sluice needs is small: scalars, enums,
literals, paths, optional values, tuples/lists of those, nested dataclasses, and bounds. Conversion
is lenient the way configuration is (``"8"`` is an int, ``"yes"`` is true), never lossy (``2.5`` is
not an int).

Use: annotate dataclass fields (``Annotated[int, Bounds(ge=1)]`` for a bound), then either derive
from :class:`Checked` (its ``__post_init__`` converts and checks every field, so the dataclass's own
``__init__`` and :func:`dataclasses.replace` validate) or call :func:`field_values` yourself.
"""

import dataclasses
import enum
import json
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self, TypeVar, Union

T = TypeVar("T")
N = TypeVar("N", int, float)

# Resolved field annotations per class (resolving them costs more than converting a record).
_HINTS: dict[type, dict[str, Any]] = {}

_TRUE = {"true", "1", "yes", "on", "t", "y"}
_FALSE = {"false", "0", "no", "off", "f", "n"}


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Limits of a number (``ge``, ``gt``, ``le``) or a pattern a string must match in full."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    pattern: str | None = None

    def check(self, value: Any, where: str) -> None:
        if self.ge is not None and value < self.ge:
            raise InvalidValue(where, f"must be >= {_number(self.ge)} (got {value!r})")
        if self.gt is not None and value <= self.gt:
            raise InvalidValue(where, f"must be > {_number(self.gt)} (got {value!r})")
        if self.le is not None and value > self.le:
            raise InvalidValue(where, f"must be <= {_number(self.le)} (got {value!r})")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise InvalidValue(where, f"must match {self.pattern} (got {value!r})")


PositiveInt = Annotated[int, Bounds(gt=0)]
NonNegativeInt = Annotated[int, Bounds(ge=0)]
PositiveFloat = Annotated[float, Bounds(gt=0)]
NonNegativeFloat = Annotated[float, Bounds(ge=0)]
# A port to listen on; 0 asks the system for a free one.
Port = Annotated[int, Bounds(ge=0, le=65535)]


class InvalidValue(ValueError):
    """A value that does not fit its field; ``where`` is the field's path (``tensors.inputs.0.name``),
    empty for a check across fields."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


class Checked:
    """Dataclass base: every field is converted to its annotation and checked after ``__init__``;
    :meth:`check` is the hook for rules across fields."""

    def __post_init__(self) -> None:
        for name, hint in field_hints(type(self)).items():
            object.__setattr__(self, name, convert(getattr(self, name), hint, name))
        self.check()

    def check(self) -> None:
        """Raise :class:`InvalidValue` when the fields do not fit together."""

    def to_json(self) -> str:
        return json.dumps(plain(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> Self:
        """The record in ``raw``; unknown keys are ignored (written by a newer version), a malformed
        or incomplete record raises :class:`InvalidValue`."""
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise InvalidValue("", f"not JSON: {exc}") from None
        return build(cls, data, "")


def field_hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of ``cls``'s dataclass fields, in declaration order."""
    found = _HINTS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        found = _HINTS[cls] = {field.name: hints[field.name] for field in dataclasses.fields(cls)}
    return found


def field_values(cls: type, raw: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``cls``'s fields from ``raw`` (unknown keys ignored), missing ones from their defaults, each
    converted and checked."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        path = f"{where}.{field.name}" if where else field.name
        if field.name in raw:
            value = raw[field.name]
        elif field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            raise InvalidValue(path, "is required")
        values[field.name] = convert(value, field_hints(cls)[field.name], path)
    return values


def build(cls: type[T], raw: Any, where: str) -> T:
    """A ``cls`` dataclass from a mapping (nested records, JSON objects)."""
    if isinstance(raw, cls):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidValue(where, f"must be an object (got {_shown(raw)})")
    return cls(**field_values(cls, raw, where))


def convert(value: Any, hint: Any, where: str) -> Any:
    """``value`` as ``hint`` says, or :class:`InvalidValue`."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *extras = typing.get_args(hint)
        converted = convert(value, base, where)
        for extra in extras:
            if isinstance(extra, Bounds):
                extra.check(converted, where)
        return converted
    if origin in (Union, types.UnionType):
        return _union(value, typing.get_args(hint), where)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise InvalidValue(where, f"must be one of {', '.join(map(str, choices))} (got {_shown(value)})")
        return value
    if origin in (tuple, list):
        return _sequence(value, origin, typing.get_args(hint), where)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise InvalidValue(where, f"must be an object (got {_shown(value)})")
        return dict(value)
    if hint is Any:
        return value
    if isinstance(hint, type):
        return _scalar(value, hint, where)
    raise TypeError(f"{where}: unsupported annotation {hint!r}")


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data (records as objects, tuples as lists, enums and paths as strings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def _union(value: Any, options: tuple[Any, ...], where: str) -> Any:
    if value is None and type(None) in options:
        return None
    others = [option for option in options if option is not type(None)]
    if len(others) != 1:
        raise TypeError(f"{where}: only X | None unions are supported")
    return convert(value, others[0], where)


def _sequence(value: Any, origin: type, args: tuple[Any, ...], where: str) -> Any:
    if not isinstance(value, list | tuple):
        raise InvalidValue(where, f"must be a list (got {_shown(value)})")
    item = args[0] if args else Any
    items = [convert(element, item, f"{where}.{index}") for index, element in enumerate(value)]
    return tuple(items) if origin is tuple else items


def _scalar(value: Any, hint: type, where: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)
    if issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            choices = ", ".join(str(member.value) for member in hint)
            raise InvalidValue(where, f"must be one of {choices} (got {_shown(value)})") from None
    converter = _SCALARS.get(hint)
    if converter is None:
        raise TypeError(f"{where}: unsupported type {hint.__name__}")
    return converter(value, where)


def _to_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InvalidValue(where, f"must be true or false (got {_shown(value)})")


def _to_int(value: Any, where: str) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return _parsed(value, int, "an integer", where)


def _to_float(value: Any, where: str) -> float:
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return _parsed(value, float, "a number", where)


def _parsed(value: Any, kind: type[N], noun: str, where: str) -> N:
    """``value`` if it already is a ``kind`` (a bool never is), else the ``kind`` a string spells."""
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            pass
    raise InvalidValue(where, f"must be {noun} (got {_shown(value)})")


def _to_str(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    raise InvalidValue(where, f"must be a string (got {_shown(value)})")


def _to_path(value: Any, where: str) -> Path:
    if isinstance(value, Path):
        return value
    if isinstance(value, str):
        return Path(value)
    raise InvalidValue(where, f"must be a path (got {_shown(value)})")


_SCALARS: dict[type, Any] = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str, Path: _to_path}


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
