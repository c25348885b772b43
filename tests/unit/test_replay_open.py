"""Replay's compare opens sealed row fields in the extension (``open_row``) exactly as
the Python opener does, and leaves every field it cannot open to the Python opener."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.privacy import UNIT_CLASSES, DataClass
from sessionstream.core.rows import SessionRow
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.rows import PREFIX, RowCipher, open_fields
from streams import native_fold, replay

if not native_fold.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI must build the native extension (make install)")
    pytest.skip("the sessionstream_native extension is not built", allow_module_level=True)


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> RowCipher:
    return RowCipher(ContentCipher(FileKeyStore(tmp_path_factory.mktemp("keys")), "t-1"))


def _seal(rows: RowCipher, sid: str, fields: dict[str, str]) -> dict[str, str]:
    out = {}
    for name, text in fields.items():
        unit = native_fold._unit_of(name)
        out[name] = text if unit is None else rows.seal(sid, unit, name, text)
    return out


def _python(rows: RowCipher, sid: str, fields: dict[str, str]) -> dict[str, str]:
    return open_fields(rows, sid, fields, SessionRow.VIEW, SessionRow.STATE)


_units = st.sampled_from([*UNIT_CLASSES, "plugin"])
_field = st.one_of(
    st.builds(lambda u: f"view:{u}", _units), st.builds(lambda u: f"state:{u}", _units),
    st.builds(lambda u, i: f"part:{u}:items:{i}", _units, st.integers(0, 40)),
    st.sampled_from(["as_of_seq", "parts:surface", "parts:turns"]))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sid=st.text(min_size=1, max_size=12),
       fields=st.dictionaries(_field, st.text(max_size=300), max_size=12))
def test_sealed_fields_open_natively_to_what_the_python_opener_gives(
        rows: RowCipher, sid: str, fields: dict[str, str]) -> None:
    sealed = _seal(rows, sid, fields)
    opened = replay._open_natively(rows, sid, sealed)
    assert opened == fields == _python(rows, sid, sealed)
    assert replay._opened(sealed, sid, rows) == fields


def test_a_field_that_does_not_open_natively_is_left_to_the_python_opener(
        tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    rows = RowCipher(ContentCipher(store, "t"))
    fields = {"view:surface": '{"a":1}', "view:turns": "[]", "as_of_seq": "3"}
    sealed = _seal(rows, "s", fields)
    blob = sealed["view:turns"]
    tampered = {**sealed, "view:turns": blob[:-6] + ("A" if blob[-6] != "A" else "B")
                + blob[-5:]}
    moved = {**sealed, "view:turns": sealed["view:surface"]}
    not_base64 = {**sealed, "view:turns": PREFIX + "***"}
    for bad in (tampered, moved, not_base64):
        assert replay._open_natively(rows, "s", bad) is None
        assert replay._opened(bad, "s", rows) == _python(rows, "s", bad)
        assert replay._opened(bad, "s", rows)["view:turns"] != "[]"  # a placeholder
    store.shred("t", "s", (DataClass.SURFACE,), principal="ops", reason="erasure")
    assert replay._open_natively(rows, "s", sealed) is None
    assert replay._opened(sealed, "s", rows) == _python(rows, "s", sealed)
