"""The writer's size pre-check bound never under-estimates the canonical JSON size."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sessionstream.core.jsonvalue import canonical_dumps
from sessionstream.producers.limits import size_bound as _size_bound

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                           allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(json_values)
def test_size_bound_is_an_upper_bound_of_the_canonical_json(value: object) -> None:
    assert _size_bound(value) >= len(canonical_dumps(value).encode())  # type: ignore[arg-type]
