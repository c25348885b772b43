"""The event timeline of one session: every record of its range, admitted or rejected.

``GET /api/sessions/{id}/timeline`` reads only that session's range of its partition —
``meta.first_offset`` .. ``as_of_offset`` from its projection row in Redis — from the
events topic, applies the admission rule every reader applies (so it shows whatever
verdicts the core defines), and returns one row per record: offset, seq, type, turn and
step, writer and epoch, verdict and reason. Metadata only: never the event data.
``?limit=N`` (default 2000, at most 20000) keeps the last N rows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sessionstream.core.errors import SchemaUnavailable
from sessionstream.core.events import Event
from sessionstream.core.rows import MetaFields

log = logging.getLogger("sessionstream.dashboard")

#: Rows returned when the page does not ask for a number.
DEFAULT_LIMIT = 2000
MAX_LIMIT = 20_000


@dataclass(frozen=True)
class TimelineSource:
    """Where the timeline reads records: the Kafka bootstrap servers and the events topic."""

    bootstrap: str
    topic: str
    #: The dashboard's Kafka principal (``Settings.kafka_security()``; its tenant's
    #: ``auditor`` under access scopes: the timeline reads the raw log's metadata).
    security: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Bytes to an event (``sessionstream.registry.reader_decode``: either framing when a
    #: schema registry is configured); None: single-object records only.
    decode: Callable[[bytes], Event] | None = field(default=None, repr=False, compare=False)


#: A session's live snapshot (``streams.read.LiveSnapshot``) or None; given by the app
#: that mounts the timeline (it owns the Redis client and the key space).
Snapshots = Callable[[web.Request, str], Awaitable[Any]]

SOURCE = web.AppKey("timeline_source", TimelineSource)
SNAPSHOTS: web.AppKey[Snapshots] = web.AppKey("timeline_snapshots")


def rows_of(readback: Any) -> list[dict[str, Any]]:
    """Timeline rows, in partition order, from a ``producers.readback.ReadBack``."""
    rows: list[dict[str, Any]] = []
    for event in readback.admitted:
        rows.append({
            "offset": readback.offsets.get(event.event_id), "seq": event.seq,
            "type": event.type, "turn_id": event.turn_id, "step_id": event.step_id,
            "writer": event.writer.id, "epoch": event.writer.epoch,
            "verdict": "admitted", "reason": None,
        })
    for r in readback.rejections:
        rows.append({"offset": r.offset, "seq": r.seq, "type": getattr(r, "type", None),
                     "turn_id": None, "step_id": None, "writer": r.writer_id,
                     "epoch": r.epoch, "verdict": str(r.verdict.value), "reason": r.reason})
    for offset, why in readback.corrupt:
        rows.append({"offset": offset, "seq": None, "type": None, "turn_id": None,
                     "step_id": None, "writer": None, "epoch": None, "verdict": "corrupt",
                     "reason": why})
    rows.sort(key=lambda r: (r["offset"] is None, r["offset"] or 0))
    return rows


def _read(source: TimelineSource, session_id: str, partition: int | None, start: int | None,
          end: int | None) -> Any:
    from sessionstream.core import codec
    from sessionstream.producers.readback import read_session

    return read_session(source.bootstrap, source.topic, session_id,
                        decode=source.decode or codec.decode,
                        partition=partition, start=start, end=end, timeout=15.0,
                        consumer_config=dict(source.security))


async def timeline(request: web.Request, snap: Any) -> web.Response:
    """The rows of ``snap``'s session (a ``streams.read.LiveSnapshot``), newest last."""
    source = request.app[SOURCE]
    raw = request.query.get("limit", str(DEFAULT_LIMIT))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        return web.json_response(
            {"error": f"limit={raw!r} is not a number of rows from 1 to {MAX_LIMIT}"},
            status=400)
    meta = snap.meta
    partition, first = meta.get(MetaFields.PARTITION), meta.get(MetaFields.FIRST_OFFSET)
    end = snap.as_of_offset + 1 if snap.as_of_offset >= 0 else None
    try:
        rb = await asyncio.to_thread(_read, source, snap.session_id,
                                     partition if isinstance(partition, int) else None,
                                     first if isinstance(first, int) else None, end)
    except SchemaUnavailable as exc:  # temporary: the records are not corrupt
        log.warning("timeline: %s", exc)
        return web.json_response({"error": f"{exc}; the timeline reads again when it "
                                           "answers", "session_id": snap.session_id},
                                 status=503)
    rows = rows_of(rb)
    limit = int(raw)
    return web.json_response({
        "session_id": snap.session_id, "partition": rb.partition,
        "range": {"start": rb.start, "end": rb.end}, "records_scanned": rb.records_scanned,
        "total": len(rows), "truncated": max(len(rows) - limit, 0), "rows": rows[-limit:],
    })


async def _handler(request: web.Request) -> web.Response:
    sid = request.match_info["session_id"]
    snap = await request.app[SNAPSHOTS](request, sid)
    if snap is None:
        return web.json_response({
            "error": f"no projections for session {sid!r}: the timeline reads the range "
                     "its projection row names", "session_id": sid}, status=404)
    return await timeline(request, snap)


def setup(app: web.Application, source: TimelineSource, snapshots: Snapshots) -> None:
    """Add ``GET /api/sessions/{id}/timeline`` reading records from ``source`` in the
    range of the session's projection row, which ``snapshots`` reads."""
    app[SOURCE] = source
    app[SNAPSHOTS] = snapshots
    app.router.add_get("/api/sessions/{session_id}/timeline", _handler)
