"""Lossless JSON: the only values event data may hold, and their frozen form.

``data`` must come back from JSON exactly as it went in (seed §4.2.2). We accept
``None``, ``bool``, ``int`` within ±(2**63 - 1), finite ``float``, ``str`` of valid
Unicode (no lone surrogates), ``list`` and ``dict`` with ``str`` keys. Tuples are
refused rather than silently turned into lists; so are NaN/Infinity, bytes, sets,
datetimes, arbitrary objects and cycles. Integers are bounded so every reader
(Avro long, Java, Lua-in-Redis for counters) agrees on them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

from sessionstream.core.errors import InvalidData

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
MAX_DEPTH = 64

JsonValue = Any  # None | bool | int | float | str | list | dict[str, JsonValue]


def check_lossless(value: object, path: str = "$") -> None:
    """Raise :class:`InvalidData` naming the first value that is not lossless JSON."""
    _check(value, path, set(), 0)


def _check(value: object, path: str, active: set[int], depth: int) -> None:
    if value is None or value is True or value is False:
        return
    kind = type(value)
    if kind is str:
        _check_str(value, path)  # type: ignore[arg-type]
        return
    if kind is int:
        if not INT_MIN <= value <= INT_MAX:  # type: ignore[operator]
            _fail(path, f"integer {value} is outside [-2**63, 2**63-1]")
        return
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            _fail(path, f"{value!r} has no JSON form")
        return
    if depth >= MAX_DEPTH:
        _fail(path, f"nesting deeper than {MAX_DEPTH}")
    if kind is list or kind is FrozenList:
        ident = id(value)
        if ident in active:
            _fail(path, "cycle: the list contains itself")
        active.add(ident)
        items: list[object] | tuple[object, ...] = value  # type: ignore[assignment]
        for i, item in enumerate(items):
            _check(item, f"{path}[{i}]", active, depth + 1)
        active.discard(ident)
        return
    if kind is dict or kind is FrozenMap:
        ident = id(value)
        if ident in active:
            _fail(path, "cycle: the object contains itself")
        active.add(ident)
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                _fail(path, f"key {key!r} is a {type(key).__name__}, JSON keys are strings")
            _check_str(key, f"{path} key")
            _check(item, _child(path, key), active, depth + 1)
        active.discard(ident)
        return
    if kind is tuple:
        _fail(path, "tuple: use a list (a tuple comes back from JSON as a list)")
    if isinstance(value, bytes | bytearray | memoryview):
        _fail(path, "bytes: encode as base64 text or store as an attachment")
    if isinstance(value, set | frozenset):
        _fail(path, "set: use a sorted list")
    if isinstance(value, bool | int | float | str | list | dict):
        _fail(path, f"{kind.__name__} is a subclass of a JSON type; pass the plain type")
    _fail(path, f"{kind.__name__} is not a JSON type")


def _check_str(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        _fail(path, f"invalid Unicode (lone surrogate at index {exc.start})")


def _child(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _fail(path: str, reason: str) -> NoReturn:
    raise InvalidData(path, reason)


class FrozenMap(dict[str, Any]):
    """A read-only ``dict``: what event data objects become once validated.

    A ``dict`` subclass so that ``json.dumps`` encodes it natively (fast, exact).
    """

    __slots__ = ()

    def _readonly(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("event data is immutable; copy it with thaw() to change it")

    __setitem__ = __delitem__ = _readonly
    clear = pop = popitem = setdefault = update = _readonly
    __ior__ = _readonly

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda kv: kv[0])))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (dict(self),))


class FrozenList(tuple[Any, ...]):
    """A read-only list: what event data arrays become once validated."""

    __slots__ = ()


def freeze(value: JsonValue) -> JsonValue:
    """Deep-copy validated JSON into read-only containers (FrozenMap / FrozenList)."""
    kind = type(value)
    if kind is dict or kind is FrozenMap:
        return FrozenMap({k: freeze(v) for k, v in value.items()})
    if kind is list or kind is FrozenList:
        return FrozenList(freeze(v) for v in value)
    return value


def check_and_freeze(value: JsonValue) -> JsonValue:
    """``check_lossless(value)`` then ``freeze(value)`` in one walk (the append hot path).

    Scalars and already-frozen containers are checked like any value; on the first
    value that is not lossless JSON it raises :class:`InvalidData` with the same
    path and reason as :func:`check_lossless`.
    """
    try:
        return _freeze_checked(value, 0)
    except _NotPlain:
        check_lossless(value)  # names the offending path, exactly as before
        raise AssertionError("unreachable: check_lossless accepted a refused value") from None


class _NotPlain(Exception):
    """Internal: the fast walk met something it does not accept; re-walk for the message."""


def _freeze_checked(value: JsonValue, depth: int) -> JsonValue:
    # A cycle can only come back through a container, and every container adds one
    # level, so the depth bound also ends any cycle walk.
    kind = type(value)
    if kind is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _NotPlain from None
        return value
    if kind is dict or kind is FrozenMap:
        if depth >= MAX_DEPTH:
            raise _NotPlain
        out = {}
        for k, v in value.items():
            if type(k) is not str or (not k.isascii() and not _encodable(k)):
                raise _NotPlain
            out[k] = _freeze_checked(v, depth + 1)
        return FrozenMap(out)
    if kind is list or kind is FrozenList:
        if depth >= MAX_DEPTH:
            raise _NotPlain
        return FrozenList([_freeze_checked(v, depth + 1) for v in value])
    if kind is int:
        if not INT_MIN <= value <= INT_MAX:
            raise _NotPlain
        return value
    if value is None or value is True or value is False:
        return value
    if kind is float:
        if value != value or value in (_INF, -_INF):
            raise _NotPlain
        return value
    raise _NotPlain


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def thaw(value: JsonValue) -> JsonValue:
    """Deep-copy frozen JSON back into plain, mutable ``dict`` / ``list``."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, FrozenList | list):
        return [thaw(v) for v in value]
    return value


# One encoder built once: ``json.dumps`` with options builds a new one on every call.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_dumps(value: JsonValue) -> str:
    """Canonical JSON text: sorted keys, no spaces, UTF-8 kept as is.

    A mapping whose keys mix strings with numbers, booleans or null (a unit keying by a
    value from event data that a writer's checks would have refused) cannot be sorted as
    it is; its keys are then sorted by the JSON text each becomes, so such a record is
    folded like any other instead of failing the batch's write.
    """
    try:
        return _CANONICAL.encode(value)
    except TypeError:
        return _CANONICAL.encode(_text_keys(value))


def json_key(key: object) -> str:
    """The object key text JSON gives a str, int, float, bool or None key."""
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, float):
        return float.__repr__(key)
    return str(key)


def sorted_map(mapping: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy in key order; keys of mixed kinds are ordered by their JSON text."""
    try:
        return dict(sorted(mapping.items()))
    except TypeError:
        return dict(sorted(mapping.items(), key=lambda kv: json_key(kv[0])))


def _text_keys(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {json_key(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, FrozenList | list | tuple):
        return [_text_keys(v) for v in value]
    return value


def loads(text: str) -> JsonValue:
    """Parse JSON text and check it is lossless (rejects NaN and friends)."""
    value = json.loads(text, parse_constant=_reject_constant)
    check_lossless(value)
    return value


def _reject_constant(name: str) -> NoReturn:
    raise InvalidData("$", f"{name} has no JSON form")


def iter_paths(value: JsonValue, path: str = "$") -> Iterator[tuple[str, JsonValue]]:
    """Yield (path, leaf) pairs; used by redaction and schema checks."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from iter_paths(v, _child(path, k))
    elif isinstance(value, list | FrozenList):
        for i, v in enumerate(value):
            yield from iter_paths(v, f"{path}[{i}]")
    else:
        yield path, value



def _parse_int(text: str) -> int:
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        _fail("$", f"integer {text} is outside [-2**63, 2**63-1]")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (_INF, -_INF):
        _fail("$", f"number {text} overflows a float")
    return value


_INF = float("inf")
_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_int=_parse_int, parse_float=_parse_float
)
_FROZEN_OBJECTS = json.JSONDecoder(
    object_hook=FrozenMap, parse_constant=_reject_constant, parse_int=_parse_int,
    parse_float=_parse_float,
)


def loads_frozen(text: str) -> JsonValue:
    """``freeze(loads(text))``, checking numbers while parsing (the codec's hot path).

    Only a ``\\u`` escape (a possible lone surrogate) or more brackets than
    MAX_DEPTH need the full lossless walk. Raises InvalidData for a value that is
    not lossless and ValueError for bad syntax.
    """
    if "\\u" in text or text.count("[") + text.count("{") > MAX_DEPTH:
        value = _DECODER.decode(text)
        check_lossless(value)
        return freeze(value)
    value, frozen = loads_checked(text)
    return value if frozen else freeze(value)


def loads_checked(text: str) -> tuple[JsonValue, bool]:
    """Parse lossless JSON text once; returns ``(value, frozen)`` (the codec's decode).

    The full check of :func:`loads_frozen` without its freezing walk: ``frozen`` is
    True when the value is already in read-only containers (text without arrays:
    objects are frozen by the C parser's object hook); otherwise the value is plain,
    checked, and the caller freezes it when it is first needed (``freeze``).
    """
    if "\\u" in text or text.count("[") + text.count("{") > MAX_DEPTH:
        value = _DECODER.decode(text)
        check_lossless(value)
        return value, False
    if "[" not in text:
        return _FROZEN_OBJECTS.decode(text), True
    return _DECODER.decode(text), False
