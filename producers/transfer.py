"""Files ⇄ fleet: publish a JSONL session to Kafka, fetch one back as a file.

``publish`` writes a file's events through a fenced :class:`SessionWriter` (its own
lease, epoch and ids; the file's types, data, surface ops, turn and step ids and
seqs are kept) and returns only after a flush confirmed every record. ``fetch``
reads a session back through the admission rule, as every reader derives it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.events import Draft, Event
from sessionstream.core.jsonvalue import thaw
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log

#: session/start fields the writer stamps itself (the rest of a file's are kept).
_STAMPED = ("format_version", "tenant", "lineage")


@dataclass
class Published:
    session_id: str
    events: int
    epoch: int
    partition: int | None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "events": self.events, "epoch": self.epoch,
                "partition": self.partition, "notes": self.notes}


def publish(cfg: WriterConfig, events: Sequence[Event], *, session_id: str | None = None,
            flush_timeout: float = 30.0,
            progress: Callable[[int, int], None] | None = None) -> Published:
    """Write ``events`` (a whole session, seq 0 first) as a new session in the fleet."""
    start = events[0]
    notes: list[str] = []
    if start.data.get("tenant") != cfg.tenant:
        notes.append(f"tenant {start.data.get('tenant')!r} of the file is written as "
                     f"{cfg.tenant!r} (the writer's tenant)")
    extra = {k: thaw(v) for k, v in start.data.items() if k not in _STAMPED}
    lineage = start.data.get("lineage")
    sid = session_id or str(uuid.uuid4())
    w = SessionWriter.create(cfg, sid, lineage=thaw(lineage) if lineage else None,
                             start_extra=extra)
    try:
        for i, e in enumerate(events[1:], start=1):
            w.append(Draft(e.type, thaw(e.data), e.surface_op, tuple(e.source_event_seqs),
                           e.turn_id, e.step_id))
            if progress is not None and (i % 500 == 0 or i == len(events) - 1):
                progress(i + 1, len(events))
        w.flush(flush_timeout)
    except BaseException:
        try:  # release the lease; what was appended stays a valid (shorter) session
            w.close(flush_timeout)
        except Exception:
            w.abandon()
        raise
    spilled = sum(1 for e in w.session.events if e.type == "tool/result"
                  and "attachment" in e.data and "attachment" not in
                  events[e.seq].data)
    if spilled:
        notes.append(f"{spilled} large tool result(s) spilled to the attachment store")
    result = Published(sid, len(w.session.events), w.epoch, w.partition, notes)
    w.close(flush_timeout)
    return result


def fetch(cfg: WriterConfig, session_id: str, *, timeout: float = 30.0) -> tuple[
        list[Event], int]:
    """(the admitted events, how many records the admission rule rejected)."""
    from sessionstream.producers.errors import SessionNotFound

    rb = read_log(cfg, session_id, timeout=timeout)
    if not rb.admitted:
        raise SessionNotFound(session_id)
    rejected = sum(1 for r in rb.rejections if r.verdict.value != "duplicate")
    return list(rb.admitted), rejected
