"""Event data must round-trip exactly through JSON (seed §4.2.2)."""

from __future__ import annotations

import datetime
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionstream.core.errors import InvalidData
from sessionstream.core.jsonvalue import (
    INT_MAX,
    INT_MIN,
    FrozenList,
    FrozenMap,
    canonical_dumps,
    check_lossless,
    freeze,
    loads,
    thaw,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(INT_MIN, INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_every_accepted_value_round_trips_exactly_through_canonical_json(value: object) -> None:
    check_lossless(value)
    assert json.loads(canonical_dumps(freeze(value))) == value


@given(json_values)
def test_freeze_then_thaw_gives_an_equal_plain_value(value: object) -> None:
    assert thaw(freeze(value)) == value


class Opaque:
    pass


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"a": math.nan}, "$.a", "nan"),
        ({"a": [1, math.inf]}, "$.a[1]", "inf"),
        ({1: "x"}, "$", "JSON keys are strings"),
        ({"b": b"raw"}, "$.b", "bytes"),
        ({"s": {1, 2}}, "$.s", "set"),
        ({"t": (1, 2)}, "$.t", "tuple"),
        ({"d": datetime.datetime(2026, 1, 1)}, "$.d", "datetime"),
        ({"o": Opaque()}, "$.o", "Opaque"),
        ({"n": 2**63}, "$.n", "outside"),
        ({"n": -(2**63) - 1}, "$.n", "outside"),
        ({"u": "\udc80"}, "$.u", "lone surrogate"),
        ({"with space": [None, {"x": math.nan}]}, '$["with space"][1].x', "nan"),
    ],
)
def test_non_lossless_data_is_rejected_naming_the_json_path(
    value: object, path: str, reason: str
) -> None:
    with pytest.raises(InvalidData) as info:
        check_lossless(value)
    assert info.value.path == path
    assert reason in str(info.value)


def test_a_cycle_is_rejected_instead_of_recursing_forever() -> None:
    data: dict[str, object] = {}
    data["self"] = data
    with pytest.raises(InvalidData, match="cycle"):
        check_lossless(data)


def test_the_same_list_twice_is_not_a_cycle() -> None:
    shared = [1, 2]
    check_lossless({"a": shared, "b": shared})


def test_integer_bounds_are_inclusive() -> None:
    check_lossless([INT_MIN, INT_MAX])


def test_frozen_data_cannot_be_mutated() -> None:
    frozen = freeze({"a": [1, {"b": 2}]})
    assert isinstance(frozen, FrozenMap)
    assert isinstance(frozen["a"], FrozenList)
    with pytest.raises(TypeError):
        frozen["a"] = 1
    with pytest.raises(TypeError):
        frozen["a"][1]["b"] = 3
    with pytest.raises(TypeError):
        frozen.update({"c": 1})


def test_loads_rejects_nan_literals_in_json_text() -> None:
    with pytest.raises(InvalidData, match="NaN"):
        loads('{"a": NaN}')


def test_canonical_dumps_sorts_keys_and_keeps_unicode() -> None:
    assert canonical_dumps({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
