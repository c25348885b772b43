"""A session writer's append path: from a draft to a produced record, one object per path.

The writer picks its path once, when it starts (:func:`append_path`, from
``WriterConfig.append`` and what :mod:`sessionstream.native` offers), and every append
then goes through it without the writer choosing again:

- :class:`ReferencePath`: the Python reference. ``Session.append`` runs the rules and
  stamps the event; :class:`~sessionstream.producers.native_append.PythonAppend` seals
  and encodes it; the record is produced.
- :class:`NativePath`: the extension first (:mod:`producers.native_append`, docs/adr/0016).
  One call stamps a whole draft of a stateless type and writes its record; for the other
  types one walk freezes and renders ``data`` and the core runs the rules
  (``Session.append_checked``); what the extension declines takes the reference route
  before anything changed, so errors read the same. Deliveries go to one native log.

Both keep the writer's produce bookkeeping (each record until it is acknowledged, the
events produced in seq order, the ids whose acknowledgement is not yet taken in) and the
sender, so a record enters Kafka in one place per path: ``produce`` for one record,
``append_many`` for a batch (the batch produce).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from sessionstream.core.events import Draft, Event, SurfaceOp
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps
from sessionstream.core.session import Session
from sessionstream.producers.attachments import AttachmentStore, spill_tool_result
from sessionstream.producers.errors import MessageTooLarge
from sessionstream.producers.kafka import POLL_EVERY
from sessionstream.producers.limits import ENVELOPE_OVERHEAD, size_bound
from sessionstream.producers.native_append import (
    BatchProduce,
    NativeAppend,
    PythonAppend,
    select,
)

#: An item of ``append_many``: a Draft or a ``(type, data)`` pair.
Item = Draft | tuple[str, JsonValue]


class AppendPath(Protocol):
    """What a writer asks of its append path (one implementation per path)."""

    native: ClassVar[bool]
    #: The writer's Kafka sender (replaceable: tests swap in a dead broker's).
    sender: Any
    records: dict[str, bytes]
    mine: list[Event]
    waiting: list[str]
    broken: str | None

    def append(self, type_or_draft: str | Draft, data: JsonValue = None,
               surface_op: SurfaceOp | str | None = None,
               source_event_seqs: Sequence[int] = (), turn_id: str | None = None,
               step_id: str | None = None) -> Event: ...

    def append_many(self, items: Sequence[Item]) -> list[Event]: ...

    def produce(self, event: Event, value: bytes | None = None) -> None: ...

    def resend(self) -> list[str]: ...


class ReferencePath:
    """The Python reference append path (``WriterConfig.append="python"``, or no
    extension), and the bookkeeping every path shares.

    ``session`` is the writer's session (the path appends to it); ``sender`` is its
    Kafka sender (replaceable, e.g. by tests simulating a dead broker); ``limit`` the
    topic's record limit in bytes; ``origins`` the seed origins a fork's records are
    sealed with; ``store`` the attachment store large tool results spill to.
    """

    #: Whether the extension serves this path.
    native: ClassVar[bool] = False

    def __init__(self, stamper: PythonAppend, session: Session, sender: Any, limit: int,
                 origins: Mapping[int, tuple[str, str]], store: AttachmentStore | None,
                 spill_threshold: int) -> None:
        self._stamper = stamper
        self.session = session
        self.sender = sender
        self.limit = limit
        self.key = session.session_id.encode()
        self._origins = origins
        self._store = store
        self._spill_threshold = spill_threshold
        #: event_id -> record, until acknowledged (resend_unconfirmed sends these again).
        self.records: dict[str, bytes] = {}
        #: Every event this path produced, in seq order.
        self.mine: list[Event] = []
        #: Produced, acknowledgement not yet taken in (SessionWriter._harvest), in order.
        self.waiting: list[str] = []
        #: Why this writer cannot go on (a record over the limit after the session took
        #: its event), or None.
        self.broken: str | None = None

    # -- appending ------------------------------------------------------------------------
    def append(self, type_or_draft: str | Draft, data: JsonValue = None,
               surface_op: SurfaceOp | str | None = None,
               source_event_seqs: Sequence[int] = (), turn_id: str | None = None,
               step_id: str | None = None) -> Event:
        """Check, stamp and produce one draft (given whole or by its parts)."""
        draft = Draft.of(type_or_draft, data, surface_op, source_event_seqs, turn_id, step_id)
        event = self._admit(self._spill(draft))
        self.produce(event)
        return event

    def append_many(self, items: Sequence[Item]) -> list[Event]:
        """Append ``items`` in order, as ``append`` of each (the batch produce); returns
        the events stamped. An item refused raises: those before it are produced."""
        mark = len(self.mine)
        for item in items:
            self._append_item(item)
        return self.mine[mark:]

    def _append_item(self, item: Item) -> None:
        if isinstance(item, Draft):
            self.append(item)
        else:
            etype, data = item
            self.append(etype, data)

    def _admit(self, draft: Draft) -> Event:
        """The session rules and the stamp (nothing produced, session unchanged on error)."""
        self._precheck_size(draft)
        return self.session.append(draft)

    def _spill(self, draft: Draft) -> Draft:
        store = self._store
        if draft.type != "tool/result" or store is None or not isinstance(draft.data, Mapping):
            return draft
        spilled = spill_tool_result(draft.data, store, self._spill_threshold)
        if spilled is None:
            return draft
        return Draft(draft.type, spilled, draft.surface_op, draft.source_event_seqs,
                     draft.turn_id, draft.step_id)

    def _precheck_size(self, draft: Draft) -> None:
        # A cheap upper bound first (~1 µs for a chunk): most events are far below the
        # limit, and the codec serializes data anyway. The check after encoding in
        # produce() stays the authority.
        if size_bound(draft.data) + ENVELOPE_OVERHEAD <= self.limit:
            return
        try:
            size = len(canonical_dumps(draft.data).encode())
        except Exception:
            return  # not lossless JSON: the session's own check names the path
        if size + ENVELOPE_OVERHEAD > self.limit:
            raise MessageTooLarge(
                f"{draft.type} data of session {self.session.session_id} is {size} bytes; "
                f"the topic accepts at most {self.limit} per record",
            )

    # -- producing ------------------------------------------------------------------------
    def produce(self, event: Event, value: bytes | None = None) -> None:
        """Produce the record of ``event`` (already in the session): ``value``, or the
        record the stamper writes for it; over the limit, the writer is broken."""
        if value is None:
            value = self._stamper.record(event, self._origins.get(event.seq)
                                         if self._origins else None)
        if len(value) + len(self.key) > self.limit:
            # The session already holds the event: this writer cannot continue safely.
            self.broken = f"event seq {event.seq} encoded to {len(value)} bytes (over the limit)"
            raise MessageTooLarge(
                f"{event.type} seq {event.seq} of session {self.session.session_id} encodes "
                f"to {len(value)} bytes; the topic accepts at most {self.limit}"
            )
        self.records[event.event_id] = value
        self.mine.append(event)
        self.sender.produce(self.key, value, event.event_id)
        self.waiting.append(event.event_id)

    def resend(self) -> list[str]:
        """Produce again, in seq order, every record not acknowledged (same event_id)."""
        todo = [e.event_id for e in self.mine if e.event_id in self.records]
        for eid in todo:
            self.sender.produce(self.key, self.records[eid], eid)
        return todo


class NativePath(ReferencePath):
    """The extension's append (docs/adr/0016), the reference for what it declines."""

    native: ClassVar[bool] = True

    def __init__(self, stamper: NativeAppend, session: Session, sender: Any, limit: int,
                 origins: Mapping[int, tuple[str, str]], store: AttachmentStore | None,
                 spill_threshold: int) -> None:
        super().__init__(stamper, session, sender, limit, origins, store, spill_threshold)
        self._native = stamper
        assert stamper.stamp is not None and stamper.append_many is not None
        self._stamp = stamper.stamp
        self._many = stamper.append_many
        #: What the stamp seals with (None: clear content).
        self._seal = stamper.seal_args
        # Deliveries kept natively, taken in once per flush (producers.kafka.use_log).
        sender.use_log(stamper.delivery_log())

    def delivery_log(self) -> Any:
        """A native delivery log for this path's records (a sender's ``use_log``)."""
        return self._native.delivery_log()

    def append(self, type_or_draft: str | Draft, data: JsonValue = None,
               surface_op: SurfaceOp | str | None = None,
               source_event_seqs: Sequence[int] = (), turn_id: str | None = None,
               step_id: str | None = None) -> Event:
        # The session rules, the event and its record in one call, for the types the
        # extension holds the rules of (else None, nothing changed).
        if type(type_or_draft) is str:
            done = self._stamp(self.session, type_or_draft, {} if data is None else data,
                               surface_op, source_event_seqs, turn_id, step_id, True,
                               self._seal)
        elif isinstance(type_or_draft, Draft):
            d = type_or_draft
            done = self._stamp(self.session, d.type, d.data, d.surface_op,
                               d.source_event_seqs, d.turn_id, d.step_id, True, self._seal)
        else:
            done = None
        if done is not None:
            self.produce(done[0], done[1])
            return done[0]
        return super().append(type_or_draft, data, surface_op, source_event_seqs, turn_id,
                              step_id)

    def _admit(self, draft: Draft) -> Event:
        prepared = self._native.freeze(draft.data)
        if prepared is None:  # data the extension declines: the reference
            return super()._admit(draft)
        frozen, text, size = prepared  # checked, frozen and rendered in one walk
        if size + ENVELOPE_OVERHEAD > self.limit:
            raise MessageTooLarge(
                f"{draft.type} data of session {self.session.session_id} is {size} bytes; "
                f"the topic accepts at most {self.limit} per record",
            )
        return self.session.append_checked(draft, frozen, text)

    def append_many(self, items: Sequence[Item]) -> list[Event]:
        """One call of the extension validates, stamps, encodes (seals) and produces
        every item whose type's rules it holds; an item it declines goes through
        ``append`` and the batch goes on natively after it."""
        produce_native = getattr(self.sender, "produce_native", None)
        if produce_native is None:  # a sender without a native log: one at a time
            return super().append_many(items)
        mark = len(self.mine)
        i, n = 0, len(items)
        while i < n:
            ran, result = produce_native(self._batch_run(items, i))
            if ran:
                i, left = result
                if left is not None:  # stamped, not produced: the one-append way
                    self.produce(left[0], left[1])
                    i += 1
                if i >= n:
                    break
            self._append_item(items[i])
            i += 1
        return self.mine[mark:]

    def _batch_run(self, items: Sequence[Item], start: int
                   ) -> Callable[..., tuple[Any, int]]:
        """The native batch from ``items[start]`` on, as KafkaSender.produce_native runs
        it: the record limit and this path's bookkeeping handed to the extension."""
        many, session, seal, key, limit = self._many, self.session, self._seal, self.key, \
            self.limit

        def run(produce: Any, poll: Any, topic: str, log: Any, sent: list[str],
                since: int) -> tuple[Any, int]:
            out = many(session, items, start, BatchProduce(
                draft=Draft, seal=seal, produce=produce, poll=poll, topic=topic, log=log,
                sent=sent, since_poll=since, poll_every=POLL_EVERY, key=key, limit=limit,
                records=self.records, mine=self.mine, waiting=self.waiting))
            return (out.next, out.left), out.since_poll

        return run


def append_path(setting: str, encode: Callable[[Event], bytes], cipher: Any,
                session: Session, sender: Any, limit: int,
                origins: Mapping[int, tuple[str, str]], store: AttachmentStore | None,
                spill_threshold: int) -> AppendPath:
    """The append path ``setting`` (``auto | native | python``) selects for a writer;
    NativeAppendUnavailable when it says native and the extension cannot serve."""
    stamper = select(setting, encode, cipher, session.session_id)
    stamper.bind(limit)
    if isinstance(stamper, NativeAppend):
        return NativePath(stamper, session, sender, limit, origins, store, spill_threshold)
    return ReferencePath(stamper, session, sender, limit, origins, store, spill_threshold)


__all__ = ["AppendPath", "Item", "NativePath", "ReferencePath", "append_path"]
