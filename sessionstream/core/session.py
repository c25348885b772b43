"""Session: one append-only event log with its write-time invariants (seed §4.2–4.4).

:meth:`Session.append` turns a :class:`~sessionstream.core.events.Draft` into a stamped
:class:`~sessionstream.core.events.Event` only if every rule of the architecture's
"Session rules" holds; :meth:`Session.admit` puts an already-stamped event (read
from Kafka or a JSONL file) through the same rules. A refused event raises
:class:`~sessionstream.core.errors.InvariantViolation` with a stable rule name and
leaves the session exactly as it was: each event is first checked against the
current state (building a small list of effects), and only then applied.

Rule names (``InvariantViolation.rule``):

=============================  ===================================================
seq-contiguous                 admitted seq is not the next one
session-mismatch               admitted event belongs to another session
history-mismatch               admitted event's prev_event_id is not the previous event
first-is-session-start         the first event is not session/start (or a second one)
stale-epoch                    writer epoch below the highest already in the log
surface-op-not-allowed         the type does not enter the surface that way
source-seqs-without-replace    source_event_seqs on an event that replaces nothing
turn-already-open              turn/start while a turn is open
turn-id-reused                 turn/start with the id of an earlier turn
closed-turn                    the event names a turn that has ended (or its call)
turn-mismatch                  the event names a turn that is not the open one
outside-turn                   a turn-scoped event with no open turn
step-outside-turn              step/start with no open turn
step-already-open              step/start while a step is open
step-id-reused                 step/start with the id of an earlier step
outside-step                   a step-scoped event with no open step
step-mismatch                  the event names a step that is not the open one
duplicate-call-id              an assistant message declares a call id already used
undeclared-tool-call           tool/call matches no declared, unexecuted call
tool-name-mismatch             tool/call names another tool than the declaration
orphan-tool-result             tool/result answers no executed, unanswered call
request-with-pending-tool-call request/header while a tool call is unanswered
turn-end-open-step             turn/end completed|refused with a step open
turn-end-pending-calls         turn/end completed|refused with a call unanswered
compaction-already-open        compaction/start while one is open
compaction-not-open            compaction/summary|end with none open (or another id)
summary-twice                  a second compaction/summary in one compaction
summary-range                  shadowed_seqs/positions are not a valid surface run
replace-outside-compaction     surface_op=replace with no open compaction
replace-without-summary        replace before the compaction's summary
replace-mismatch               source_event_seqs differ from the summary's shadowed seqs
replace-twice                  a second replace in one compaction
replace-range                  the run is no longer a valid surface run
compaction-incomplete          compaction/end completed without a replace
unknown-ignorable-type         (never raised: unknown ignorable types skip the rules)
=============================  ===================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sessionstream.core.catalog import Catalog, EventType, Scope, default_catalog
from sessionstream.core.errors import InvariantViolation, UnknownEventType, UnsupportedFormat
from sessionstream.core.events import (
    FORMAT_VERSION,
    Clock,
    Draft,
    Event,
    IdSource,
    SurfaceOp,
    Writer,
    cache_text,
    mark_lossless,
    system_clock,
    uuid4_ids,
)
from sessionstream.core.jsonvalue import JsonValue, check_and_freeze, check_lossless, freeze
from sessionstream.core.surface import (
    ABANDONING_REASONS,
    Messages,
    Surface,
    SurfaceMark,
    message_for,
)

_CLOSING_CLEANLY = ("completed", "refused")

#: The writer of a session nobody leased (tests, offline tools): epoch 0.
LOCAL_WRITER = Writer("local", 0)


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A tool call the assistant declared that has no result yet."""

    call_id: str
    name: str
    turn_id: str
    declared_seq: int  # the assistant/message that declared it
    executed_seq: int | None = None  # the tool/call, once the harness started it


@dataclass(frozen=True, slots=True)
class OpenCompaction:
    """The compaction attempt in progress (it holds the compaction lock)."""

    compaction_id: str
    start_seq: int
    shadowed_seqs: tuple[int, ...] | None = None  # from compaction/summary
    summary_seq: int | None = None
    replace_seq: int | None = None


@dataclass(frozen=True, slots=True)
class Savepoint:
    """What :meth:`Session.rollback` restores (see :meth:`Session.savepoint`)."""

    length: int
    writer: Writer
    max_epoch: int
    tenant: str | None
    lineage: JsonValue
    open_turn: str | None
    open_turn_seq: int | None
    open_step: str | None
    calls: dict[str, PendingCall]
    abandoned: int
    compaction: OpenCompaction | None
    surface: SurfaceMark


class Session:
    """An append-only session log that refuses any event breaking its rules.

    Clock, id source and catalog are injected so the core stays deterministic.
    """

    def __init__(
        self,
        session_id: str,
        *,
        catalog: Catalog | None = None,
        clock: Clock = system_clock,
        ids: IdSource = uuid4_ids,
        writer: Writer = LOCAL_WRITER,
    ) -> None:
        self.session_id = session_id
        self.catalog = catalog if catalog is not None else default_catalog()
        self.clock = clock
        self.ids = ids
        self._writer = writer
        self._events: list[Event] = []
        self._events_view: tuple[Event, ...] | None = ()
        self._max_epoch = writer.epoch
        self._tenant: str | None = None
        self._lineage: JsonValue = None
        self._open_turn: str | None = None
        self._open_turn_seq: int | None = None
        self._open_step: str | None = None
        self._turn_ids: set[str] = set()
        self._step_ids: set[str] = set()
        self._calls: dict[str, PendingCall] = {}  # unanswered calls of the open turn
        self._used_call_ids: set[str] = set()
        self._abandoned: dict[str, str] = {}  # call_id -> turn that abandoned it
        self._compaction: OpenCompaction | None = None
        self._surface = Surface()
        self._forgotten = 0  # events before this seq had their data forgotten (if any)

    # -- construction --------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        session_id: str,
        *,
        tenant: str = "default",
        lineage: Mapping[str, Any] | None = None,
        catalog: Catalog | None = None,
        clock: Clock = system_clock,
        ids: IdSource = uuid4_ids,
        writer: Writer = LOCAL_WRITER,
        start_extra: Mapping[str, Any] | None = None,
    ) -> Session:
        """A new session whose log holds its ``session/start``.

        ``start_extra``: further ``session/start`` fields (an imported session's
        provenance); the envelope fields above always win.
        """
        session = cls(session_id, catalog=catalog, clock=clock, ids=ids, writer=writer)
        session.append(
            "session/start",
            {
                **(dict(start_extra) if start_extra else {}),
                "format_version": FORMAT_VERSION,
                "tenant": tenant,
                "lineage": dict(lineage) if lineage is not None else None,
            },
        )
        return session

    @classmethod
    def from_events(
        cls,
        events: Iterable[Event],
        *,
        catalog: Catalog | None = None,
        clock: Clock = system_clock,
        ids: IdSource = uuid4_ids,
        writer: Writer | None = None,
    ) -> Session:
        """Rebuild a session from its stamped events, checking every rule.

        ``writer`` defaults to the writer of the last event (so a rebuilt session
        appends with the epoch it was written with; call :meth:`set_writer` after
        taking a new lease).
        """
        events = list(events)
        if not events:
            raise ValueError("from_events needs at least the session/start event")
        session = cls(
            events[0].session_id,
            catalog=catalog,
            clock=clock,
            ids=ids,
            writer=Writer("local", 0),
        )
        for event in events:
            session.admit(event)
        session._writer = writer if writer is not None else events[-1].writer
        session._max_epoch = max(session._max_epoch, session._writer.epoch)
        return session

    # -- reading -------------------------------------------------------------------------
    @property
    def events(self) -> tuple[Event, ...]:
        """The log so far (an immutable tuple, cached between appends)."""
        if self._events_view is None or len(self._events_view) != len(self._events):
            self._events_view = tuple(self._events)
        return self._events_view

    def __len__(self) -> int:
        return len(self._events)

    @property
    def last_event(self) -> Event | None:
        """The last event of the log (O(1), unlike ``events[-1]`` after an append)."""
        return self._events[-1] if self._events else None

    def events_since(self, seq: int) -> tuple[Event, ...]:
        """The events from ``seq`` on (O(their count), not the log's)."""
        return tuple(self._events[seq:])

    @property
    def next_seq(self) -> int:
        return len(self._events)

    @property
    def writer(self) -> Writer:
        return self._writer

    @property
    def max_epoch(self) -> int:
        """The highest writer epoch seen (a lower one is a zombie writer)."""
        return self._max_epoch

    @property
    def tenant(self) -> str | None:
        return self._tenant

    @property
    def lineage(self) -> JsonValue:
        """``{parent_session, seed_length, delegation_depth}`` of a fork, else None."""
        return self._lineage

    @property
    def open_turn(self) -> str | None:
        """The id of the open turn, if any."""
        return self._open_turn

    @property
    def open_turn_seq(self) -> int | None:
        """The seq of the open turn's ``turn/start``."""
        return self._open_turn_seq

    @property
    def open_step(self) -> str | None:
        return self._open_step

    @property
    def pending_calls(self) -> tuple[PendingCall, ...]:
        """Tool calls declared or executed and not yet answered (declaration order)."""
        return tuple(self._calls.values())

    def call_id_used(self, call_id: str) -> bool:
        """Whether an assistant message of this log already declared ``call_id``."""
        return call_id in self._used_call_ids

    @property
    def open_compaction(self) -> OpenCompaction | None:
        return self._compaction

    @property
    def surface(self) -> Surface:
        """The incremental surface (positions, ranges); read it, never drive it."""
        return self._surface

    @property
    def is_stable(self) -> bool:
        """No open turn and no open compaction: a safe fork point and a clean tail."""
        return self._open_turn is None and self._compaction is None

    def derive_messages(self) -> Messages:
        """The model-visible messages now: an immutable view, O(1) per call."""
        return self._surface.messages()

    # -- savepoints ----------------------------------------------------------------------
    def savepoint(self) -> Savepoint:
        """Open a savepoint: :meth:`rollback` undoes every append and admission since, so
        a batch refused at its n-th event leaves the session as it was before the batch
        (``SessionWriter.append_many``). O(pending calls) to open; an append costs
        nothing more; undoing costs what the batch did (a compaction replace or an
        abandonment inside it copies the surface once). One savepoint at a time: close
        it with :meth:`release` or :meth:`rollback`."""
        return Savepoint(len(self._events), self._writer, self._max_epoch, self._tenant,
                         self._lineage, self._open_turn, self._open_turn_seq,
                         self._open_step, dict(self._calls), len(self._abandoned),
                         self._compaction, self._surface.mark())

    def release(self, savepoint: Savepoint) -> None:
        """Keep what was appended since ``savepoint`` and close it."""
        self._surface.release(savepoint.surface)

    def rollback(self, savepoint: Savepoint) -> None:
        """Put the session back as it was at ``savepoint`` (and close it)."""
        undone = self._events[savepoint.length:]
        for event in undone:  # ids are only ever added, and only by these types
            if event.type == "turn/start":
                self._turn_ids.discard(event.turn_id)
            elif event.type == "step/start":
                self._step_ids.discard(event.step_id)
            elif event.type == "assistant/message" and isinstance(event.data, Mapping):
                for call in event.data.get("tool_calls", ()):
                    self._used_call_ids.discard(call["call_id"])
        del self._events[savepoint.length:]
        self._events_view = None
        while len(self._abandoned) > savepoint.abandoned:  # insertion order: newest last
            self._abandoned.popitem()
        self._writer = savepoint.writer
        self._max_epoch = savepoint.max_epoch
        self._tenant = savepoint.tenant
        self._lineage = savepoint.lineage
        self._open_turn = savepoint.open_turn
        self._open_turn_seq = savepoint.open_turn_seq
        self._open_step = savepoint.open_step
        self._calls = savepoint.calls
        self._compaction = savepoint.compaction
        self._surface.rollback(savepoint.surface)

    def forget_data(self, upto: int) -> None:
        """Keep only the envelope of the ignorable events off the surface before seq
        ``upto``: their data becomes ``{}``. For a writer that appends after a long log of
        plugin records it never reads back (a LangGraph thread's checkpoints): the rules
        never read such an event's data once it is admitted (it opens no turn, step, call
        or compaction, and is not on the surface), so the session appends exactly as
        before, and holds O(envelope) per event instead of every value; only
        :attr:`events` no longer carries those values (the log does). O(events since the
        last call)."""
        upto = min(upto, len(self._events))
        empty = freeze({})
        for i in range(min(self._forgotten, upto), upto):
            e = self._events[i]
            if e.ignorable and e.surface_op is SurfaceOp.NONE and e.data != empty:
                self._events[i] = e.replace(data=empty)
        self._forgotten = max(self._forgotten, upto)
        self._events_view = None

    # -- writing -------------------------------------------------------------------------
    def set_writer(self, writer: Writer) -> None:
        """Stamp later appends with ``writer`` (a writer took the lease: new epoch)."""
        if writer.epoch < self._max_epoch:
            raise InvariantViolation(
                "stale-epoch",
                "(writer)",
                self.next_seq,
                f"writer {writer.id!r} epoch {writer.epoch} is below epoch {self._max_epoch}",
            )
        self._writer = writer
        self._max_epoch = writer.epoch

    def append(
        self,
        draft_or_type: Draft | str,
        data: JsonValue = None,
        *,
        surface_op: SurfaceOp | str | None = None,
        source_event_seqs: Sequence[int] = (),
        turn_id: str | None = None,
        step_id: str | None = None,
    ) -> Event:
        """Validate, stamp and add one event; raises and changes nothing if refused.

        Accepts a :class:`Draft` or a type plus keyword parts. ``turn_id`` /
        ``step_id`` default to the open turn/step (a new id for turn/start and
        step/start).
        """
        draft = Draft.of(draft_or_type, data, surface_op, source_event_seqs, turn_id, step_id)
        etype = self.catalog.require(draft.type)
        return self._append(draft, etype, check_and_freeze(draft.data), None)

    def append_checked(self, draft: Draft, data: JsonValue, text: str) -> Event:
        """:meth:`append` of a draft whose data was already checked and frozen elsewhere.

        ``data`` must be what ``check_and_freeze(draft.data)`` returns and ``text`` its
        ``canonical_dumps`` (the native append path computes both in one walk; a
        differential test holds it to that): the event caches ``text``, so encoding
        it does not render the data again. Every other rule runs as in :meth:`append`.
        """
        return self._append(draft, self.catalog.require(draft.type), data, text)

    def _append(self, draft: Draft, etype: EventType, data: JsonValue,
                text: str | None) -> Event:
        etype.schema.check(draft.type, data)
        op = draft.surface_op if draft.surface_op is not None else etype.surface_ops[0]
        seq = self.next_seq
        turn, step = self._stamp_ids(draft.type, draft.turn_id, draft.step_id, seq)
        event = Event(
            session_id=self.session_id,
            seq=seq,
            event_id=self.ids(),
            time=self.clock(),
            type=draft.type,
            data=data,
            surface_op=op if type(op) is SurfaceOp else SurfaceOp(op),
            source_event_seqs=(seqs if type(seqs := draft.source_event_seqs) is tuple
                               else tuple(seqs)),
            writer=self._writer,
            ignorable=etype.ignorable,
            turn_id=turn,
            step_id=step,
            prev_event_id=self._events[-1].event_id if self._events else None,
        )
        mark_lossless(event)
        if text is not None:
            cache_text(event, text)
        apply = self._check(event, etype)
        apply()
        self._events.append(event)
        return event

    def admit(self, event: Event) -> None:
        """Add an already-stamped event (from Kafka or a file) through the same rules.

        An unknown type marked ignorable is kept in the log and skipped by the
        rules; an unknown required type raises :class:`UnknownEventType`.
        """
        seq = self.next_seq
        if event.session_id != self.session_id:
            self._fail(
                "session-mismatch", event, f"event of session {event.session_id!r}", seq
            )
        if event.seq != seq:
            self._fail("seq-contiguous", event, f"expected seq {seq}, got {event.seq}", seq)
        prev = event.prev_event_id
        if prev is not None and (not self._events or prev != self._events[-1].event_id):
            # None makes no claim (seq 0, or a record written before schema v2)
            self._fail("history-mismatch", event, f"written after event {prev}, but the "
                       f"event at seq {seq - 1} is "
                       f"{self._events[-1].event_id if self._events else 'none'}", seq)
        if event.format_version > FORMAT_VERSION:
            raise UnsupportedFormat(
                self.session_id, event.seq, event.format_version, FORMAT_VERSION
            )
        etype = self.catalog.get(event.type)
        if etype is None:
            if not event.ignorable:
                raise UnknownEventType(event.type)
            if not self._events:
                self._fail("first-is-session-start", event, "the log must begin with it", seq)
            self._check_epoch(event)
            if not event.lossless_checked:
                check_lossless(event.data)
            self._admit_epoch(event)
            self._events.append(event)
            return
        # The trust boundary: an Event built by make_event, Session.append or the codec
        # had its data verified when it was built (and data is frozen); any other
        # Event (constructed directly, or Event.replace with new data) is checked here.
        if not event.lossless_checked:
            check_lossless(event.data)
        etype.schema.check(event.type, event.data)
        if event.surface_op not in etype.surface_ops:
            self._fail(
                "surface-op-not-allowed",
                event,
                f"surface_op {event.surface_op.value} (allowed: "
                f"{[o.value for o in etype.surface_ops]})",
            )
        turn, step = self._stamp_ids(event.type, event.turn_id, event.step_id, seq)
        if turn != event.turn_id:
            self._fail("turn-mismatch", event, f"turn_id should be {turn!r}")
        if step != event.step_id:
            self._fail("step-mismatch", event, f"step_id should be {step!r}")
        apply = self._check(event, etype)
        apply()
        self._events.append(event)

    # -- rules ---------------------------------------------------------------------------
    def _fail(self, rule: str, event: Event | str, detail: str, seq: int | None = None) -> None:
        etype = event if isinstance(event, str) else event.type
        at = seq if seq is not None else (self.next_seq if isinstance(event, str) else event.seq)
        raise InvariantViolation(rule, etype, at, f"session {self.session_id}: {detail}")

    def _check_epoch(self, event: Event) -> None:
        if event.writer.epoch < self._max_epoch:
            self._fail(
                "stale-epoch",
                event,
                f"writer {event.writer.id!r} epoch {event.writer.epoch} is below "
                f"epoch {self._max_epoch} already in the log",
            )

    def _admit_epoch(self, event: Event) -> None:
        if event.writer.epoch > self._max_epoch:
            self._max_epoch = event.writer.epoch

    def _stamp_ids(
        self, etype: str, turn_id: str | None, step_id: str | None, seq: int
    ) -> tuple[str | None, str | None]:
        """The turn/step ids an event gets; checks explicitly named ones."""
        if etype == "turn/start":
            if self._open_turn is not None:
                self._fail(
                    "turn-already-open",
                    etype,
                    f"turn {self._open_turn} (seq {self._open_turn_seq}) is still open",
                    seq,
                )
            new_turn = turn_id if turn_id is not None else self.ids()
            if new_turn in self._turn_ids:
                self._fail("turn-id-reused", etype, f"turn {new_turn} already existed", seq)
            if step_id is not None:
                self._fail("step-mismatch", etype, "turn/start opens no step", seq)
            return new_turn, None
        if turn_id is not None and turn_id != self._open_turn:
            if turn_id in self._turn_ids:
                self._fail("closed-turn", etype, f"turn {turn_id} has ended", seq)
            self._fail(
                "turn-mismatch",
                etype,
                f"turn {turn_id} is not the open turn ({self._open_turn})",
                seq,
            )
        if etype == "step/start":
            if self._open_turn is None:
                self._fail("step-outside-turn", etype, "no turn is open", seq)
            if self._open_step is not None:
                self._fail("step-already-open", etype, f"step {self._open_step} is open", seq)
            new_step = step_id if step_id is not None else self.ids()
            if new_step in self._step_ids:
                self._fail("step-id-reused", etype, f"step {new_step} already existed", seq)
            return self._open_turn, new_step
        if step_id is not None and step_id != self._open_step:
            self._fail(
                "step-mismatch",
                etype,
                f"step {step_id} is not the open step ({self._open_step})",
                seq,
            )
        return self._open_turn, self._open_step

    def _check(self, event: Event, etype: EventType) -> Callable[[], None]:
        """Check every rule for ``event``; return the state change to apply if all pass."""
        t = event.type
        seq = event.seq
        if not self._events:
            if t != "session/start":
                self._fail("first-is-session-start", event, "the log must begin with it")
        elif t == "session/start":
            self._fail("first-is-session-start", event, "a session starts only once")
        self._check_epoch(event)
        if event.surface_op is not SurfaceOp.REPLACE and event.source_event_seqs:
            self._fail("source-seqs-without-replace", event, "only a replace shadows seqs")
        if event.surface_op not in etype.surface_ops:
            self._fail(
                "surface-op-not-allowed",
                event,
                f"surface_op {event.surface_op.value} (allowed: "
                f"{[o.value for o in etype.surface_ops]})",
            )
        if etype.scope is Scope.TURN and self._open_turn is None:
            self._fail("outside-turn", event, f"{t} needs an open turn")
        if etype.scope is Scope.STEP and self._open_step is None:
            rule = "outside-turn" if self._open_turn is None else "outside-step"
            self._fail(rule, event, f"{t} needs an open step")
        data = event.data
        effects: list[Callable[[], None]] = []

        if t == "session/start":
            if data["format_version"] > FORMAT_VERSION:
                raise UnsupportedFormat(
                    self.session_id, seq, data["format_version"], FORMAT_VERSION
                )

            def start() -> None:
                self._tenant = data["tenant"]
                self._lineage = data.get("lineage")

            effects.append(start)
        elif t == "turn/start":

            def open_turn() -> None:
                assert event.turn_id is not None
                self._open_turn = event.turn_id
                self._open_turn_seq = seq
                self._turn_ids.add(event.turn_id)

            effects.append(open_turn)
        elif t == "turn/end":
            effects.append(self._check_turn_end(event))
        elif t == "step/start":

            def open_step() -> None:
                assert event.step_id is not None
                self._open_step = event.step_id
                self._step_ids.add(event.step_id)

            effects.append(open_step)
        elif t == "step/end":

            def close_step() -> None:
                self._open_step = None

            effects.append(close_step)
        elif t == "request/header":
            if self._calls:
                pending = ", ".join(sorted(self._calls))
                self._fail(
                    "request-with-pending-tool-call",
                    event,
                    f"tool call(s) {pending} have no result yet",
                )
        elif t == "assistant/message":
            effects.append(self._check_declarations(event))
        elif t == "tool/call":
            effects.append(self._check_tool_call(event))
        elif t == "tool/result":
            effects.append(self._check_tool_result(event))
        elif t.startswith("compaction/"):
            effects.append(self._check_compaction(event))

        if event.surface_op is SurfaceOp.REPLACE:
            effects.append(self._check_replace(event))
        elif event.surface_op is SurfaceOp.APPEND:
            message = message_for(event)
            if message is not None:
                effects.append(lambda: self._surface.append(message))

        def apply() -> None:
            self._admit_epoch(event)
            for effect in effects:
                effect()

        return apply

    def _check_turn_end(self, event: Event) -> Callable[[], None]:
        reason = event.data["reason"]
        if reason in _CLOSING_CLEANLY:
            if self._open_step is not None:
                self._fail(
                    "turn-end-open-step",
                    event,
                    f"step {self._open_step} is open; end it first (or end the turn as "
                    "failed/cancelled/interrupted)",
                )
            if self._calls:
                self._fail(
                    "turn-end-pending-calls",
                    event,
                    f"tool call(s) {', '.join(sorted(self._calls))} have no result",
                )
        abandoned = list(self._calls)
        turn = self._open_turn
        assert turn is not None

        def close() -> None:
            if reason in ABANDONING_REASONS and abandoned:
                self._surface.drop_calls(abandoned, event.seq)
                for call_id in abandoned:
                    self._abandoned[call_id] = turn
            self._calls.clear()
            self._open_turn = None
            self._open_turn_seq = None
            self._open_step = None

        return close

    def _check_declarations(self, event: Event) -> Callable[[], None]:
        calls = event.data.get("tool_calls", ())
        seen: set[str] = set()
        for c in calls:
            cid = c["call_id"]
            if cid in self._used_call_ids or cid in seen:
                self._fail("duplicate-call-id", event, f"call id {cid} is already used")
            seen.add(cid)
        turn = self._open_turn
        assert turn is not None

        def declare() -> None:
            for c in calls:
                self._used_call_ids.add(c["call_id"])
                self._calls[c["call_id"]] = PendingCall(c["call_id"], c["name"], turn, event.seq)

        return declare

    def _check_tool_call(self, event: Event) -> Callable[[], None]:
        cid = event.data["call_id"]
        if cid in self._abandoned:
            self._fail("closed-turn", event, f"call {cid} was abandoned when turn "
                       f"{self._abandoned[cid]} ended")
        pending = self._calls.get(cid)
        if pending is None or pending.executed_seq is not None:
            why = "was already executed" if pending is not None else "was never declared"
            self._fail(
                "undeclared-tool-call",
                event,
                f"call {cid} {why} by an assistant/message of turn {self._open_turn}",
            )
        assert pending is not None
        if pending.name != event.data["name"]:
            self._fail(
                "tool-name-mismatch",
                event,
                f"call {cid} was declared as {pending.name!r}, not {event.data['name']!r}",
            )

        def execute() -> None:
            self._calls[cid] = PendingCall(
                cid, pending.name, pending.turn_id, pending.declared_seq, event.seq
            )

        return execute

    def _check_tool_result(self, event: Event) -> Callable[[], None]:
        cid = event.data["call_id"]
        if cid in self._abandoned:
            self._fail("closed-turn", event, f"call {cid} was abandoned when turn "
                       f"{self._abandoned[cid]} ended; no result may follow")
        pending = self._calls.get(cid)
        if pending is None or pending.executed_seq is None:
            if pending is not None:
                why = "was declared but never executed (no tool/call)"
            elif cid in self._used_call_ids:
                why = "was already answered"
            else:
                why = "was never called"
            self._fail("orphan-tool-result", event, f"call {cid} {why}")

        def answer() -> None:
            del self._calls[cid]

        return answer

    def _check_compaction(self, event: Event) -> Callable[[], None]:
        t = event.type
        data = event.data
        cid = data["compaction_id"]
        current = self._compaction
        if t == "compaction/start":
            if current is not None:
                self._fail(
                    "compaction-already-open",
                    event,
                    f"compaction {current.compaction_id} (seq {current.start_seq}) is open",
                )

            def start() -> None:
                self._compaction = OpenCompaction(cid, event.seq)

            return start
        if current is None or current.compaction_id != cid:
            now = f"compaction {current.compaction_id} is open" if current else "none is open"
            self._fail("compaction-not-open", event, f"compaction {cid} is not open ({now})")
        assert current is not None
        if t == "compaction/summary":
            if current.shadowed_seqs is not None:
                self._fail("summary-twice", event, f"compaction {cid} already has a summary")
            shadowed = tuple(data["shadowed_seqs"])
            first, last = data["first_position"], data["last_position"]
            problem = self._surface.check_range(shadowed)
            if problem is None and (
                first < 0 or self._surface.seqs_at(first, last) != shadowed
            ):
                problem = (
                    f"positions {first}..{last} hold seqs "
                    f"{list(self._surface.seqs_at(max(first, 0), last))}, not {list(shadowed)}"
                )
            if problem is not None:
                self._fail("summary-range", event, problem)

            def summarize() -> None:
                self._compaction = OpenCompaction(
                    cid, current.start_seq, shadowed, event.seq, current.replace_seq
                )

            return summarize
        if t == "compaction/end":
            if data["outcome"] == "completed" and current.replace_seq is None:
                self._fail(
                    "compaction-incomplete",
                    event,
                    f"compaction {cid} committed no replace; end it failed or abandoned",
                )

            def end() -> None:
                self._compaction = None

            return end
        return lambda: None  # a compaction/* type registered later: audit only

    def _check_replace(self, event: Event) -> Callable[[], None]:
        current = self._compaction
        if current is None:
            self._fail("replace-outside-compaction", event, "no compaction is open")
        assert current is not None
        if current.shadowed_seqs is None:
            self._fail(
                "replace-without-summary",
                event,
                f"compaction {current.compaction_id} has no compaction/summary yet",
            )
        if current.replace_seq is not None:
            self._fail(
                "replace-twice",
                event,
                f"compaction {current.compaction_id} already replaced at seq "
                f"{current.replace_seq}",
            )
        seqs = event.source_event_seqs
        if seqs != current.shadowed_seqs:
            self._fail(
                "replace-mismatch",
                event,
                f"source_event_seqs {list(seqs)} differ from the summary's shadowed seqs "
                f"{list(current.shadowed_seqs or ())}",
            )
        problem = self._surface.check_range(seqs)
        if problem is not None:
            self._fail("replace-range", event, problem)
        message = message_for(event)
        assert message is not None

        def replace() -> None:
            self._surface.replace(seqs, message)
            self._compaction = OpenCompaction(
                current.compaction_id,
                current.start_seq,
                current.shadowed_seqs,
                current.summary_seq,
                event.seq,
            )

        return replace
