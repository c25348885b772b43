"""Row fields sealed by the extension (``sessionstream._native.seal_row``) are the Python
row cipher's format, byte for byte: the Python codec opens them, and the extension's
choice of what to seal (per unit class, shredded or disabled keys) is the Python one's."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.privacy import UNIT_CLASSES, DataClass, unit_class
from sessionstream.governance import ContentCipher
from sessionstream.governance.crypto import NONCE_BYTES, TAG_BYTES
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.rows import PREFIX, RowCipher, is_sealed
from sessionstream.streams import fold_native, native_seal

if not fold_native.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI must build the native extension (make install)")
    pytest.skip("the native extension is not built", allow_module_level=True)

from sessionstream import _native as native

CLASSES = {u: None if (c := unit_class(u)) is None else c.value for u in UNIT_CLASSES}


def _native_seal(rows: RowCipher, sid: str, fields: dict[str, str]) -> dict[str, str]:
    out = dict(fields)
    native.seal_row(rows.tenant, sid, out, CLASSES,
                    lambda cls: rows.row_key(sid, DataClass(cls)))
    return out


def _python_seal(rows: RowCipher, sid: str, fields: dict[str, str]) -> dict[str, str]:
    out = {}
    for name, text in fields.items():
        unit = native_seal.unit_of(name)
        out[name] = text if unit is None else rows.seal(sid, unit, name, text)
    return out


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> RowCipher:
    return RowCipher(ContentCipher(FileKeyStore(tmp_path_factory.mktemp("keys")), "t-1"))


_units = st.sampled_from([*UNIT_CLASSES, "plugin"])
_field = st.one_of(
    st.builds(lambda u: f"view:{u}", _units), st.builds(lambda u: f"state:{u}", _units),
    st.builds(lambda u, c, i: f"part:{u}:{c}:{i}", _units, st.sampled_from(["items", "é"]),
              st.integers(0, 40)),
    st.sampled_from(["meta", "admission", "sv:surface", "parts:surface", "parts:turns"]))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sid=st.text(min_size=1, max_size=12),
       fields=st.dictionaries(_field, st.text(max_size=300), max_size=12))
def test_native_sealed_fields_open_in_python_and_seal_the_same_fields(
        rows: RowCipher, sid: str, fields: dict[str, str]) -> None:
    sealed = _native_seal(rows, sid, fields)
    reference = _python_seal(rows, sid, fields)
    assert sealed.keys() == fields.keys()
    for name, value in sealed.items():
        assert is_sealed(value) == is_sealed(reference[name]), name
        unit = native_seal.unit_of(name)
        if is_sealed(value):
            assert unit is not None
            blob = base64.b64decode(value[len(PREFIX):], validate=True)
            assert len(blob) == NONCE_BYTES + len(fields[name].encode()) + TAG_BYTES
            assert rows.open(sid, unit, name, value) == fields[name]
            # bound to the session and the field, as the Python format is
            assert rows.open(sid + "x", unit, name, value) is None
        else:
            assert value == fields[name]


def test_a_shredded_or_disabled_class_is_stored_clear_as_in_python(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    rows = RowCipher(ContentCipher(store, "t"))
    fields = {"view:surface": '{"a":1}', "view:business": "[]", "view:usage": "{}"}
    store.data_key("t", "s", DataClass.SURFACE)
    store.shred("t", "s", (DataClass.SURFACE,), principal="ops", reason="erasure")
    sealed = _native_seal(rows, "s", fields)
    assert sealed["view:surface"] == '{"a":1}' and sealed["view:usage"] == "{}"
    assert is_sealed(sealed["view:business"])
    assert rows.open("s", "business", "view:business", sealed["view:business"]) == "[]"
    off = RowCipher(ContentCipher(store, "t", enabled=False))
    assert _native_seal(off, "s", fields) == fields == _python_seal(off, "s", fields)


def test_each_seal_draws_a_fresh_nonce(rows: RowCipher) -> None:
    a = _native_seal(rows, "s", {"view:surface": "x", "state:surface": "x"})
    b = _native_seal(rows, "s", {"view:surface": "x", "state:surface": "x"})
    nonces = {base64.b64decode(v[len(PREFIX):])[:NONCE_BYTES] for v in [*a.values(), *b.values()]}
    assert len(nonces) == 4


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sid=st.text(min_size=1, max_size=12),
       fields=st.dictionaries(_field, st.text(max_size=3000), max_size=12))
def test_the_digested_seal_seals_as_seal_row_and_digests_as_replay_does(
        rows: RowCipher, sid: str, fields: dict[str, str]) -> None:
    # replay keeps, per sealed field, the SHA-1 of the value stored and the BLAKE2b of
    # its clear text (ADR 0015); the extension computes them while it seals
    out = dict(fields)
    got = native.seal_row_digested(rows.tenant, sid, out, CLASSES,
                                   lambda cls: rows.row_key(sid, DataClass(cls)))
    plain = _native_seal(rows, sid, fields)
    assert out.keys() == fields.keys()
    assert {n for n, v in out.items() if is_sealed(v)} == \
        {n for n, v in plain.items() if is_sealed(v)} == {n for n, _, _ in got}
    for name, sha, digest in got:
        unit = native_seal.unit_of(name)
        assert unit is not None and rows.open(sid, unit, name, out[name]) == fields[name]
        assert native_seal.SEALED_REF + sha == native_seal.sealed_ref(out[name])
        assert digest == native_seal.field_digest(fields[name])
