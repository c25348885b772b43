"""Recovery: the repair events for a log that ends mid-turn (seed §4.9).

Recovery closes only what it can prove: an unmatched ``compaction/start`` becomes
``compaction/end`` outcome ``abandoned``; an open turn (after ``turn/start``,
inside a step, after a ``tool/call``) becomes ``turn/end`` reason ``interrupted``,
which closes the open step and takes unanswered tool calls off the surface. It
never writes a ``tool/result``: whether the tool ran is a question for the external
system (by idempotency key), not something the session may invent.
"""

from __future__ import annotations

from collections.abc import Iterable

from sessionstream.core.catalog import Catalog
from sessionstream.core.events import Clock, Draft, Event, IdSource, Writer, system_clock, uuid4_ids
from sessionstream.core.session import Session

#: ``compaction/end.reason`` written for a compaction the crash left open.
ABANDONED_COMPACTION_REASON = "interrupted: no compaction/end before crash"
#: ``turn/end.detail`` written for a turn the crash left open.
INTERRUPTED_TURN_DETAIL = "interrupted: no turn/end before crash"


def recover(session_or_events: Session | Iterable[Event]) -> list[Draft]:
    """The repair drafts, in order, that close what a crash left open (maybe none)."""
    session = (
        session_or_events
        if isinstance(session_or_events, Session)
        else Session.from_events(session_or_events)
    )
    drafts: list[Draft] = []
    compaction = session.open_compaction
    if compaction is not None:
        drafts.append(
            Draft(
                "compaction/end",
                {
                    "compaction_id": compaction.compaction_id,
                    "outcome": "abandoned",
                    "reason": ABANDONED_COMPACTION_REASON,
                },
            )
        )
    if session.open_turn is not None:
        drafts.append(
            Draft("turn/end", {"reason": "interrupted", "detail": INTERRUPTED_TURN_DETAIL})
        )
    return drafts


def seed_boundary(reason: str, seed_length: int) -> Draft:
    """The ``session/end-seed`` draft: events before seq ``seed_length`` are seed history.

    ``reason`` is ``resume``, ``fork`` or ``replay``. Written as the first event
    of a new lifecycle, it lets plugins tell a leftover start event of the old
    lifecycle from work in progress now (seed §4.9.1).
    """
    return Draft("session/end-seed", {"reason": reason, "seed_length": seed_length})


def resume(
    events: Iterable[Event],
    writer: Writer,
    *,
    catalog: Catalog | None = None,
    clock: Clock = system_clock,
    ids: IdSource = uuid4_ids,
) -> Session:
    """Rebuild a persisted session, take it over as ``writer``, repair it, mark the seed.

    The boundary's ``seed_length`` is its own seq: the repairs belong to the
    previous lifecycle's history, they describe how it ended.
    """
    session = Session.from_events(events, catalog=catalog, clock=clock, ids=ids)
    session.set_writer(writer)
    for draft in recover(session):
        session.append(draft)
    session.append(seed_boundary("resume", session.next_seq))
    return session
