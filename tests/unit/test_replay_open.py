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
from sessionstream.streams import fold_native, native_seal, replay_compare

if not fold_native.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI must build the native extension (make install)")
    pytest.skip("the native extension is not built", allow_module_level=True)


_equal = replay_compare._equal_by_digest


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> RowCipher:
    return RowCipher(ContentCipher(FileKeyStore(tmp_path_factory.mktemp("keys")), "t-1"))


def _seal(rows: RowCipher, sid: str, fields: dict[str, str]) -> dict[str, str]:
    out = {}
    for name, text in fields.items():
        unit = native_seal.unit_of(name)
        out[name] = text if unit is None else rows.seal(sid, unit, name, text)
    return out


def _python(rows: RowCipher, sid: str, fields: dict[str, str]) -> dict[str, str]:
    return open_fields(rows, sid, fields, SessionRow.VIEW, SessionRow.STATE)


_units = st.sampled_from([*UNIT_CLASSES, "plugin"])
_field = st.one_of(
    st.builds(lambda u: f"view:{u}", _units), st.builds(lambda u: f"state:{u}", _units),
    st.builds(lambda u, i: f"part:{u}:items:{i}", _units, st.integers(0, 40)),
    st.sampled_from(["as_of_seq", "parts:surface", "parts:turns"]))


# A stored value that starts with the sealed prefix is read as sealed by both openers (a
# field of a class that is kept clear, like view:tools, included); row values are JSON or
# integers, which never do. How such a value that does not open is handled is the next test.
_value = st.text(max_size=300).filter(lambda t: not t.startswith(PREFIX))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sid=st.text(min_size=1, max_size=12),
       fields=st.dictionaries(_field, _value, max_size=12))
def test_sealed_fields_open_natively_to_what_the_python_opener_gives(
        rows: RowCipher, sid: str, fields: dict[str, str]) -> None:
    sealed = _seal(rows, sid, fields)
    opened = replay_compare._open_natively(rows, sid, sealed)
    assert opened == fields == _python(rows, sid, sealed)
    assert replay_compare._opened(sealed, sid, rows) == fields


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
        assert replay_compare._open_natively(rows, "s", bad) is None
        assert replay_compare._opened(bad, "s", rows) == _python(rows, "s", bad)
        assert replay_compare._opened(bad, "s", rows)["view:turns"] != "[]"  # a placeholder
    store.shred("t", "s", (DataClass.SURFACE,), principal="ops", reason="erasure")
    assert replay_compare._open_natively(rows, "s", sealed) is None
    assert replay_compare._opened(sealed, "s", rows) == _python(rows, "s", sealed)


def _verdict(fresh: dict[str, str], old: dict[str, str]) -> list[list[str]]:
    """A compare script's answer for one pair: the new row's sealed values as their
    SHA-1 reference (as COMPARE_ROWS_LUA gives them), the live row whole."""
    def flat(row: dict[str, str], hashed: bool) -> list[str]:
        return [x for k, v in row.items()
                for x in (k, native_seal.sealed_ref(v) if hashed and v.startswith(PREFIX)
                          else v)]
    return [flat(fresh, True), flat(old, False)]


def _kept(clear: dict[str, str], sealed: dict[str, str]) -> dict[str, tuple[str, bytes]]:
    return {k: (native_seal.sealed_ref(v), native_seal.field_digest(clear[k]))
            for k, v in sealed.items() if v.startswith(PREFIX)}


_ROW = {"as_of_seq": "7", "view:todo": '{"items":["secret"]}', "view:index": '{"n":1}',
        "part:surface:items:0": '{"role":"user","text":"hi"}', "parts:surface": "{}"}


def test_a_sealed_pair_is_equal_by_digest_with_only_the_live_row_opened(
        rows: RowCipher) -> None:
    fresh, old = _seal(rows, "s-1", _ROW), _seal(rows, "s-1", _ROW)
    assert fresh["view:todo"] != old["view:todo"]  # random nonces
    assert _equal(_verdict(fresh, old), "s-1", rows, _kept(_ROW, fresh))


def test_a_corrupted_live_row_is_not_equal_by_digest(rows: RowCipher) -> None:
    fresh = _seal(rows, "s-1", _ROW)
    for name, text in [("view:todo", '{"items":["other"]}'),
                       ("part:surface:items:0", '{"role":"user","text":"ho"}'),
                       ("view:index", '{"n":2}')]:
        old = _seal(rows, "s-1", {**_ROW, name: text})
        assert not _equal(_verdict(fresh, old), "s-1", rows,
                                           _kept(_ROW, fresh)), name
    old = _seal(rows, "s-1", {**_ROW, "view:goal": "{}"})  # a field more
    assert not _equal(_verdict(fresh, old), "s-1", rows, _kept(_ROW, fresh))


def test_a_digest_not_of_the_stored_value_decides_nothing(rows: RowCipher) -> None:
    fresh, old = _seal(rows, "s-1", _ROW), _seal(rows, "s-1", _ROW)
    # no digest kept, or one of another value sealed in that field (rewritten since)
    assert not _equal(_verdict(fresh, old), "s-1", rows, None)
    other = _seal(rows, "s-1", _ROW)
    assert not _equal(_verdict(fresh, old), "s-1", rows, _kept(_ROW, other))
    kept = _kept(_ROW, fresh)
    kept["view:todo"] = (kept["view:todo"][0], native_seal.field_digest('{"items":[]}'))
    assert not _equal(_verdict(fresh, old), "s-1", rows, kept)


def test_the_fold_and_the_compare_know_the_sealed_prefix_of_the_row_cipher() -> None:
    assert native_seal.SEALED_PREFIX == PREFIX
    assert native_seal.sealed_ref(PREFIX + "abc").startswith(native_seal.SEALED_REF)
