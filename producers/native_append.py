"""The append path of a session writer: the Python reference and the native one.

Per append the writer checks and freezes ``data``, renders its canonical JSON, runs the
session rules, seals the content (when the tenant encrypts) and writes the Avro
envelope. :class:`PythonAppend` is the reference: ``Session.append``,
``ContentCipher.seal_event`` and the codec. :class:`NativeAppend` does the same with
the extension (``sessionstream_native.Appender``, native/src/append.rs): one walk of
``data`` that checks, freezes and renders it, then one call that seals and writes the
record; the session rules stay in the core (``Session.append_checked``). Whatever the
extension declines (data that is not lossless JSON, an unusual field, a fork's
inherited seed) takes the reference path, so a rejection reads exactly as before:
tests/unit/test_native_append.py holds both to the same bytes and the same errors.

Selected by ``WriterConfig.append`` (``Settings.append``, from the environment):
``auto`` (native when the extension is installed and the writer uses the default
single-object codec), ``native`` (required: an error says why it cannot serve),
``python``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from producers.errors import ProducerError
from sessionstream.core.events import Draft, Event
from sessionstream.core.jsonvalue import FrozenList, FrozenMap, JsonValue
from sessionstream.core.privacy import sealing_plan
from sessionstream.core.sealed import DataClass
from sessionstream.core.session import Session
from sessionstream.core.settings import Env
from sessionstream.governance import ContentCipher

try:
    import sessionstream_native as _native
except ImportError:  # pragma: no cover - depends on the install
    _native = None

APPEND_PATHS = ("auto", "native", "python")
#: Nonce bytes handed to one native seal: 12 per data class.
_NONCES = 12 * 3


class NativeAppendUnavailable(ProducerError):
    """The append setting says native but the extension cannot serve this writer."""


class PythonAppend:
    """The reference append path."""

    native = False

    def __init__(self, encode: Callable[[Event], bytes], cipher: ContentCipher | None) -> None:
        self._encode = encode
        self._cipher = cipher

    def freeze(self, data: JsonValue) -> tuple[JsonValue, str, int] | None:
        """(frozen data, canonical text, its UTF-8 size), or None: use Session.append."""
        return None

    def record(self, event: Event, origin: tuple[str, str] | None = None) -> bytes:
        """The record of a stamped event: sealed as the cipher seals, encoded."""
        cipher = self._cipher
        return self._encode(event if cipher is None else cipher.seal_event(event, origin=origin))


class NativeAppend(PythonAppend):
    """The native append path (the extension), the reference for what it declines."""

    native = True

    def __init__(self, encode: Callable[[Event], bytes], cipher: ContentCipher | None,
                 header: bytes, session_id: str,
                 nonces: Callable[[int], bytes] = os.urandom) -> None:
        super().__init__(encode, cipher)
        assert _native is not None
        self._app = _native.Appender(header, FrozenMap, FrozenList)
        self._session_id = session_id
        self._nonces = nonces
        self._seals = cipher is not None and cipher.enabled
        self._classes = {c.value: c for c in DataClass}
        # The extension's method itself: no Python frame per append in between.
        self.freeze = self._app.freeze  # type: ignore[method-assign]

    def _key(self, data_class: str) -> bytes:
        cipher = self._cipher
        assert cipher is not None
        key: bytes = cipher.store.data_key(cipher.tenant, self._session_id,
                                           self._classes[data_class])
        return key

    def record(self, event: Event, origin: tuple[str, str] | None = None) -> bytes:
        app = self._app
        value: bytes | None
        if not self._seals or event.sealed:
            value = app.encode(event, event.data_json())
        elif origin is None:
            etype = event.type
            if not app.has_plan(etype):
                assert self._cipher is not None
                app.set_plan(etype, *sealing_plan(self._cipher.catalog, etype).native_args())
            value = app.seal(event, event.data_json(), self._cipher.tenant, self._key,  # type: ignore[union-attr]
                             self._nonces(_NONCES))
        else:
            value = None  # a fork's inherited seed: the ancestor's keys (Python)
        return value if value is not None else super().record(event, origin)


def why_not(encode: Callable[[Event], bytes]) -> str | None:
    """Why the native append path cannot serve a writer encoding with ``encode``."""
    from sessionstream.core import codec

    if _native is None or not hasattr(_native, "Appender"):
        return "the sessionstream_native extension (with its Appender) is not installed"
    if encode is not codec.encode:
        return "the writer uses another codec (e.g. the confluent wire)"
    files = codec.schema_files()
    if not files or files[-1].name != "session_event.v2.avsc":
        return "the writer schema is not the envelope v2 the extension writes"
    return None


def writer_header() -> bytes:
    from sessionstream.core import codec

    return codec.MAGIC + codec.default_codec().writer.fingerprint


def append_path(setting: str, encode: Callable[[Event], bytes], cipher: ContentCipher | None,
                session_id: str) -> PythonAppend:
    """The append path ``setting`` selects for one session's writer."""
    if setting not in APPEND_PATHS:
        raise NativeAppendUnavailable(
            f"{Env.APPEND}={setting!r} is not an append path: use " + ", ".join(APPEND_PATHS))
    if setting == "python":
        return PythonAppend(encode, cipher)
    reason = why_not(encode)
    if reason is None:
        return NativeAppend(encode, cipher, writer_header(), session_id)
    if setting == "native":
        raise NativeAppendUnavailable(
            f"native append path unavailable: {reason}; build it with `make install` (or "
            f"`pip install ./native`), or set {Env.APPEND}=python")
    return PythonAppend(encode, cipher)


def append(path: PythonAppend, session: Session, draft: Draft) -> Event:
    """Check, stamp and add ``draft`` to ``session`` through ``path`` (no size check:
    the writer checks the size in between, see SessionWriter.append)."""
    prepared = path.freeze(draft.data)
    if prepared is None:
        return session.append(draft)
    return session.append_checked(draft, prepared[0], prepared[1])


__all__ = ["APPEND_PATHS", "NativeAppend", "NativeAppendUnavailable", "PythonAppend",
           "append", "append_path", "why_not"]
