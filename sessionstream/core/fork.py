"""Fork: a new session seeded from a stable prefix of another (seed §4.11).

A fork point never falls inside an open turn (the child would inherit half a tool
transaction) nor inside an open compaction. ``at`` is the seed length: the number
of parent events taken (the fork follows parent seq ``at - 1``); by default the
parent's current stable tail.

Child layout: seq 0 is the child's own ``session/start`` (lineage =
``parent_session``, ``seed_length``, ``delegation_depth``) in place of the
parent's; seqs ``1..at-1`` are the parent's events re-stamped for the child (new
session id, event ids, time and writer; type, data, surface op, source seqs and
turn/step ids kept); seq ``at`` is ``session/end-seed`` reason ``fork``. So a
seeded event keeps its parent seq: ``source_event_seqs`` of a compaction replace
stay valid without rewriting, and the parent event of child seq ``s < at`` is
parent seq ``s`` — no extra field needed to trace it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sessionstream.core.catalog import Catalog
from sessionstream.core.errors import ForkError
from sessionstream.core.events import Clock, Event, IdSource, Writer, system_clock, uuid4_ids
from sessionstream.core.privacy import ALL_CLASSES, NOT_INHERITED_TEXT, split
from sessionstream.core.recovery import seed_boundary
from sessionstream.core.sealed import DataClass
from sessionstream.core.session import LOCAL_WRITER, Session


def stable_tail(parent: Session | Iterable[Event]) -> int:
    """The longest stable seed length: the prefix ending outside any open turn/compaction."""
    events = parent.events if isinstance(parent, Session) else tuple(parent)
    return _stable_lengths(events)[-1]


def _stable_lengths(events: tuple[Event, ...]) -> list[int]:
    # Walk the log once; a prefix of length n is stable when, after event n-1, no
    # turn and no compaction is open.
    stable = []
    turn = compaction = False
    for n, event in enumerate(events, start=1):
        t = event.type
        if t == "turn/start":
            turn = True
        elif t == "turn/end":
            turn = False
        elif t == "compaction/start":
            compaction = True
        elif t == "compaction/end":
            compaction = False
        if not turn and not compaction:
            stable.append(n)
    return stable or [0]


def fork(
    parent: Session | Iterable[Event],
    child_id: str,
    *,
    at: int | None = None,
    delegation_depth: int | None = None,
    catalog: Catalog | None = None,
    clock: Clock = system_clock,
    ids: IdSource = uuid4_ids,
    writer: Writer = LOCAL_WRITER,
    tenant: str | None = None,
    inherit: Iterable[DataClass] | None = None,
) -> Session:
    """A child session seeded with the parent's first ``at`` events.

    Raises :class:`ForkError` if ``at`` is out of range or falls inside an open
    turn or compaction (naming it). ``delegation_depth`` defaults to the
    parent's plus one.

    ``inherit``: the data classes of the parent's content the child receives (seed
    §4.13: a fork or subagent does not copy sensitive history by default); the others
    read :data:`~sessionstream.core.privacy.NOT_INHERITED_TEXT` in the child. ``None``
    copies everything and records nothing (a plain fork); otherwise the lineage records
    ``inherited_classes``.
    """
    if isinstance(parent, Session):
        psession = parent
    else:
        psession = Session.from_events(parent, catalog=catalog)
    events = psession.events
    if at is None:
        at = stable_tail(events)
    if not 1 <= at <= len(events):
        raise ForkError(
            f"fork of {psession.session_id} at seed length {at} is out of range "
            f"(1..{len(events)}: the seed must hold at least session/start)"
        )
    prefix = Session.from_events(events[:at], catalog=catalog)
    if prefix.open_turn is not None:
        raise ForkError(
            f"fork of {psession.session_id} at seed length {at} cuts inside open turn "
            f"{prefix.open_turn} (turn/start at seq {prefix.open_turn_seq}); "
            "fork before it or after its turn/end"
        )
    if prefix.open_compaction is not None:
        c = prefix.open_compaction
        raise ForkError(
            f"fork of {psession.session_id} at seed length {at} cuts inside open compaction "
            f"{c.compaction_id} (compaction/start at seq {c.start_seq})"
        )
    plineage = psession.lineage or {}
    depth = (
        delegation_depth
        if delegation_depth is not None
        else int(plineage.get("delegation_depth", 0)) + 1
    )
    lineage: dict[str, Any] = {
        "parent_session": psession.session_id,
        "seed_length": at,
        "delegation_depth": depth,
    }
    dropped: tuple[DataClass, ...] = ()
    if inherit is not None:
        kept = frozenset(inherit)
        lineage["inherited_classes"] = [c.value for c in ALL_CLASSES if c in kept]
        dropped = tuple(c for c in ALL_CLASSES if c not in kept)
    child = Session.create(
        child_id,
        tenant=tenant if tenant is not None else (psession.tenant or "default"),
        lineage=lineage,
        catalog=catalog,
        clock=clock,
        ids=ids,
        writer=writer,
    )
    for event in events[1:at]:
        child.admit(
            Event(
                session_id=child_id,
                seq=event.seq,
                event_id=ids(),
                time=clock(),
                type=event.type,
                data=(split(event.type, event.data, psession.catalog, dropped,
                            text=NOT_INHERITED_TEXT).clear if dropped else event.data),
                surface_op=event.surface_op,
                source_event_seqs=event.source_event_seqs,
                writer=writer,
                format_version=event.format_version,
                ignorable=event.ignorable,
                turn_id=event.turn_id,
                step_id=event.step_id,
                prev_event_id=child.events[-1].event_id,
            )
        )
    child.append(seed_boundary("fork", at))
    return child
