"""How one event is checked, stamped and recorded: the Python reference and the extension.

The writer's append path (:mod:`producers.append_path`) is built on these stampers.

Per append the writer checks and freezes ``data``, renders its canonical JSON, runs the
session rules, seals the content (when the tenant encrypts) and writes the Avro
envelope. :class:`PythonAppend` is the reference: ``Session.append``,
``ContentCipher.seal_event`` and the codec. :class:`NativeAppend` does the same with
the extension (``sessionstream._native.Appender``, native/src/append.rs). For the types
whose admission changes no session state but the log (``assistant/chunk``, audit and
plugin types: :func:`rules_for`) one call (``stamp``) runs the session rules, builds
the event and its id and writes the clear record (native/src/append/rules.rs); for the
others one walk of ``data`` checks, freezes and renders it and the core runs the rules
(``Session.append_checked``); sealing is one more call. Whatever the extension
declines (a rule that would fail, data that is not lossless JSON, an unusual field, a
fork's inherited seed) takes the reference path before anything changed, so a
rejection reads exactly as before: tests/unit/test_native_append.py holds the two append
paths (producers.append_path) to the same events, bytes and errors.

Selected by ``WriterConfig.append`` (``Settings.append``, from the environment):
``auto`` (native when the extension is installed and the writer uses the default
single-object codec), ``native`` (required: an error says why it cannot serve),
``python``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sessionstream.core import events as _events
from sessionstream.core.catalog import F, Obj, Scope
from sessionstream.core.events import FORMAT_VERSION, Event, SurfaceOp
from sessionstream.core.jsonvalue import FrozenList, FrozenMap, JsonValue
from sessionstream.core.privacy import sealing_plan
from sessionstream.core.sealed import DataClass
from sessionstream.core.session import Session
from sessionstream.core.settings import Env
from sessionstream.governance import ContentCipher
from sessionstream.native import INSTALL_HINT, WHY_NOT
from sessionstream.native import ext as _native
from sessionstream.producers.errors import ProducerError
from sessionstream.producers.limits import ENVELOPE_OVERHEAD

if TYPE_CHECKING:
    from sessionstream.native import ManyAppended

APPEND_PATHS = ("auto", "native", "python")
#: Nonce bytes handed to one native seal: 12 per data class.
_NONCES = 12 * 3


#: Types whose admission changes session state beyond the log (the turn/step/tool and
#: compaction machine, the surface: Session._check's effects, surface.message_for):
#: their rules stay in the core. Every other catalog type's rules are the generic ones
#: the extension holds (schema, surface op, scope, turn/step ids, epoch).
STATEFUL_TYPES = frozenset({
    "session/start", "turn/start", "turn/end", "step/start", "step/end",
    "request/header", "assistant/message", "tool/call", "tool/result", "user/message",
    "context/snapshot",
})
_SCOPES = {Scope.ANYWHERE: 0, Scope.TURN: 1, Scope.STEP: 2}
_OPS = {SurfaceOp.NONE: 0, SurfaceOp.APPEND: 1, SurfaceOp.REPLACE: 2}


def _field_spec(f: F) -> tuple[Any, ...]:
    return (f.kinds(), f.required, tuple(f.enum) if f.enum is not None else None,
            _obj_spec(f.obj) if f.obj is not None else None,
            _field_spec(f.items) if f.items is not None else None)


def _obj_spec(o: Obj) -> list[tuple[str, tuple[Any, ...]]]:
    return [(name, _field_spec(f)) for name, f in o.fields.items()]


#: Types whose content is sealed under a key the event names, not the session's (a
#: ``memory/recall`` copies a memory under that memory's key): the reference seals them.
OWN_KEY_TYPES = frozenset({"memory/recall"})


def rules_for(session: Session, etype: str) -> tuple[Any, ...] | None:
    """The rules of ``etype`` in ``session``'s catalog as the extension holds them
    (scope, allowed surface ops, ignorable, schema), or None: the core applies them (a
    type with state effects, an unknown type, a Session subclass)."""
    t = session.catalog.get(etype)
    if (t is None or type(session) is not Session or etype in STATEFUL_TYPES
            or etype.startswith("compaction/") or etype in OWN_KEY_TYPES):
        return None
    return (_SCOPES[t.scope], [_OPS[op] for op in t.surface_ops], t.ignorable,
            _obj_spec(t.schema))


@dataclass(slots=True)
class BatchProduce:
    """What ``Appender.append_many`` takes from the writer's append path and its sender,
    by name: the extension produces each record of a batch and does the path's
    bookkeeping in these very lists (``records``, ``mine``, ``waiting``) and the
    sender's (``sent``), as ``AppendPath.produce`` does for one record."""

    #: the Draft class (an item of this type is a draft; else a ``(type, data)`` pair)
    draft: type
    #: what a record is sealed with (``NativeAppend.seal_args``; None: clear)
    seal: tuple[Any, ...] | None
    #: the sender's ``Producer.produce`` and ``poll``, its topic and delivery log
    produce: Callable[..., Any]
    poll: Callable[[float], Any]
    topic: str
    log: Any
    #: the sender's ids produced (one per record)
    sent: list[str]
    #: records produced since the last poll; a poll every ``poll_every``
    since_poll: int
    poll_every: int
    #: the record key (the session id) and the largest record, key included (bytes)
    key: bytes
    limit: int
    #: the path's bookkeeping: event_id -> record, the events produced, the ids whose
    #: acknowledgement is not taken in yet
    records: dict[str, bytes]
    mine: list[Event]
    waiting: list[str]


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

    def bind(self, limit: int) -> None:
        """The writer's record limit (bytes): larger data is left to the writer's check."""

    #: ``stamp(session, type, data, surface_op, source_event_seqs, turn_id, step_id,
    #: record, seal) -> (event, record | None) | None``: the whole append of a draft
    #: given by its parts (None: use the other path). The reference has none.
    stamp: Callable[..., tuple[Event, bytes | None] | None] | None = None
    #: What ``stamp`` seals with (None: clear content).
    seal_args: tuple[Any, ...] | None = None
    #: ``Appender.append_many`` (native/src/append.rs): ``stamp`` of a list of drafts
    #: with each record handed straight to the producer (SessionWriter.append_many),
    #: what it needs named by a :class:`BatchProduce`. The reference has none: its
    #: batch is a loop of single appends.
    append_many: Callable[[Session, Sequence[Any], int, BatchProduce], ManyAppended] | None \
        = None

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
        #: data class -> (key, good until on the store's clock, store generation).
        self._keys: dict[str, tuple[bytes, float, int]] = {}
        if self._seals:
            assert cipher is not None
            catalog = cipher.catalog
            self.seal_args = (cipher.tenant, self._key,
                              None if nonces is os.urandom else nonces,
                              lambda etype: sealing_plan(catalog, etype).native_args())
        self.bind(1 << 62)
        # The extension's methods themselves: no Python frame per append in between.
        self.freeze = self._app.freeze  # type: ignore[method-assign]
        self.stamp = self._app.append
        self.append_many = self._app.append_many

    def bind(self, limit: int) -> None:
        self._app.bind(_events.decoded_event, [SurfaceOp.NONE, SurfaceOp.APPEND,
                                               SurfaceOp.REPLACE],
                       _events.uuid4_ids, _events.system_clock, rules_for, FORMAT_VERSION,
                       limit - ENVELOPE_OVERHEAD, Event)

    def delivery_log(self) -> Any:
        """A native delivery log for this writer's records (producers.kafka)."""
        return self._app.delivery_log()

    def _key(self, data_class: str) -> bytes:
        """The session's data key of a class: kept while the store would answer the
        same (KeyStore.data_key_until), so a shred reaches the writer exactly when it
        reaches the store, without a store lookup per event."""
        cipher = self._cipher
        assert cipher is not None
        store = cipher.store
        hit = self._keys.get(data_class)
        if hit is not None and hit[2] == store.generation and store.monotonic() < hit[1]:
            return hit[0]
        until = getattr(store, "data_key_until", None)
        if until is None:  # a key store without the freshness answer: ask every time
            key: bytes = store.data_key(cipher.tenant, self._session_id,
                                        self._classes[data_class])
            return key
        generation = store.generation
        key, good = until(cipher.tenant, self._session_id, self._classes[data_class])
        self._keys[data_class] = (key, good, generation)
        return key

    def record(self, event: Event, origin: tuple[str, str] | None = None) -> bytes:
        app = self._app
        value: bytes | None
        if not self._seals or event.sealed:
            value = app.encode(event, event.data_json())
        elif origin is None and event.type not in OWN_KEY_TYPES:
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

    if _native is None:
        return WHY_NOT or "the native extension is not available"
    if encode is not codec.encode:
        return "the writer uses another codec (e.g. the confluent wire)"
    files = codec.schema_files()
    if not files or files[-1].name != "session_event.v2.avsc":
        return "the writer schema is not the envelope v2 the extension writes"
    return None


def writer_header() -> bytes:
    from sessionstream.core import codec

    return codec.MAGIC + codec.default_codec().writer.fingerprint


def select(setting: str, encode: Callable[[Event], bytes], cipher: ContentCipher | None,
           session_id: str) -> PythonAppend:
    """The stamper of the append path ``setting`` selects for one session's writer."""
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
            f"native append path unavailable: {reason}; {INSTALL_HINT}, or set "
            f"{Env.APPEND}=python")
    return PythonAppend(encode, cipher)


__all__ = ["APPEND_PATHS", "STATEFUL_TYPES", "BatchProduce", "NativeAppend",
           "NativeAppendUnavailable", "PythonAppend", "rules_for", "select", "why_not"]
