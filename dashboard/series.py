"""The numbers behind a session's plots: its log range folded by ``core.series``.

``GET /api/sessions/{id}/series`` reads the session's range of its partition — from the
row's ``first_offset`` to its ``as_of_offset``, what readers see, as the event timeline
does (ADR 0008) — applies the admission rule, opens sealed content with the tenant's
keys (the token estimate counts content) and folds the admitted events with
:class:`~sessionstream.core.series.SessionSeries` (ADR 0029). A session's fold is kept
(the last :data:`KEEP` sessions): a later request reads only the records past it, so a
live page costs one short read per change, not a re-read of the session.

Query: ``points`` (context points, default 600), ``bars`` (turn bars, default 500),
``turn`` (the waterfall's turn; default the last). Session content never leaves here:
the reply has seqs, times, counts and ids.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sessionstream.core.admission import AdmissionState
from sessionstream.core.errors import SchemaUnavailable, SessionStreamError
from sessionstream.core.rows import KeySpace, MetaFields, SessionRow
from sessionstream.core.series import (
    DEFAULT_BARS,
    DEFAULT_POINTS,
    MAX_BARS,
    MAX_POINTS,
    Prices,
    SessionSeries,
)
from sessionstream.dashboard.timeline import TimelineSource
from sessionstream.streams.read import LiveSnapshot, current_generation

log = logging.getLogger("sessionstream.dashboard")

#: Sessions whose fold a dashboard keeps (least recently asked for dropped first).
KEEP = 16


@dataclass
class _Fold:
    """A session's fold so far, in one generation of its projections."""

    generation: int
    series: SessionSeries
    next_offset: int | None = None  # the first offset not read yet (None: nothing read)
    partition: int | None = None
    admission: AdmissionState | None = None
    opener: Any = None
    error: str | None = None  # content that could not be opened stops the fold there
    records_scanned: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class SeriesConfig:
    """What a dashboard's series are read with."""

    source: TimelineSource
    rows: Any = None  # governance.rows.RowCipher: its cipher opens sealed event content
    prices: Prices = field(default_factory=Prices)
    budget: int | None = None  # the context budget drawn as a line (tokens)


class SeriesReader:
    """Reads and keeps sessions' folds (one per session, generation by generation)."""

    def __init__(self, config: SeriesConfig, keep: int = KEEP) -> None:
        self.config = config
        self.keep = keep
        self._folds: OrderedDict[str, _Fold] = OrderedDict()

    def _fold_of(self, session_id: str, generation: int) -> _Fold:
        fold = self._folds.get(session_id)
        if fold is None or fold.generation != generation:
            fold = _Fold(generation, SessionSeries(self.config.prices))
            if self.config.rows is not None:
                from sessionstream.governance.opener import SealedContentOpener

                fold.opener = SealedContentOpener(self.config.rows.cipher)
            self._folds[session_id] = fold
        self._folds.move_to_end(session_id)
        while len(self._folds) > self.keep:
            self._folds.popitem(last=False)
        return fold

    async def read(self, snap: Any) -> tuple[_Fold, float]:
        """The session of ``snap`` (a ``streams.read.LiveSnapshot``) folded up to its
        ``as_of_offset``; returns the fold and the seconds this call read and folded."""
        fold = self._fold_of(snap.session_id, snap.generation)
        began = time.monotonic()
        async with fold.lock:
            end = snap.as_of_offset + 1 if snap.as_of_offset >= 0 else None
            if end is not None and fold.error is None and (
                    fold.next_offset is None or fold.next_offset < end):
                await asyncio.to_thread(self._advance, fold, snap, end)
        return fold, time.monotonic() - began

    def _advance(self, fold: _Fold, snap: Any, end: int) -> None:
        from sessionstream.core import codec
        from sessionstream.producers.readback import NativeDecoder, read_session

        source = self.config.source
        decode = source.decode or codec.decode
        meta = snap.meta
        partition, first = meta.get(MetaFields.PARTITION), meta.get(MetaFields.FIRST_OFFSET)
        start = fold.next_offset if fold.next_offset is not None else (
            first if isinstance(first, int) else None)
        rb = read_session(
            source.bootstrap, source.topic, snap.session_id, decode=decode,
            partition=partition if isinstance(partition, int) else fold.partition,
            start=start, end=end, timeout=15.0, consumer_config=dict(source.security),
            state=fold.admission,
            decode_many=NativeDecoder(decode) if decode is codec.decode
            and NativeDecoder.available() else None)
        fold.partition, fold.admission = rb.partition, rb.state
        fold.next_offset = rb.end
        fold.records_scanned += rb.records_scanned
        for event in rb.admitted:
            if fold.opener is not None:
                try:
                    event = fold.opener.open(event)
                except SessionStreamError as exc:  # moved or tampered: never folded
                    fold.error = (f"the content of seq {event.seq} could not be opened "
                                  f"({type(exc).__name__}); the series stop before it")
                    return
            fold.series.add(event)


async def read_position(redis: Any, keys: KeySpace, session_id: str) -> LiveSnapshot | None:
    """Where a session's projections are (seq, offset, meta) without their views: a
    series read needs no more, and a long session's row is large. None: no row."""
    gen = await current_generation(redis, keys)
    fields = (SessionRow.AS_OF_SEQ, SessionRow.AS_OF_OFFSET, SessionRow.META)
    values = await redis.hmget(keys.session_row(session_id, gen), list(fields))
    if all(v is None for v in values):
        return None
    row = {f: v.decode() if isinstance(v, bytes) else v
           for f, v in zip(fields, values, strict=True) if v is not None}
    return LiveSnapshot(session_id=session_id, generation=gen,
                        as_of_seq=SessionRow.as_of_seq(row),
                        as_of_offset=SessionRow.as_of_offset(row), views={},
                        meta=SessionRow.meta(row))


def _int_arg(request: web.Request, name: str, default: int, top: int) -> int:
    raw = request.query.get(name, str(default))
    if not raw.isdigit() or not 1 <= int(raw) <= top:
        raise web.HTTPBadRequest(reason=f"{name}={raw!r} is not a number from 1 to {top}")
    return int(raw)


def series_json(fold: _Fold, snap: Any, budget: int | None, *, points: int, bars: int,
                turn: int | None, seconds: float | None = None) -> dict[str, Any]:
    """The reply of the series route (and of ``sessionstream series --json``)."""
    body = fold.series.to_json(points=points, bars=bars, turn=turn, budget=budget)
    return {"session_id": snap.session_id, "generation": snap.generation,
            "as_of_seq": snap.as_of_seq, "partition": fold.partition, **body,
            "error": fold.error,
            "read": {"records_scanned": fold.records_scanned,
                     "seconds": None if seconds is None else round(seconds, 4)}}


#: A session's live snapshot (``streams.read.LiveSnapshot``) or None, given by the app.
Snapshots = Callable[[web.Request, str], Awaitable[Any]]

READER = web.AppKey("series_reader", SeriesReader)
SNAPSHOTS: web.AppKey[Snapshots] = web.AppKey("series_snapshots")


async def _handler(request: web.Request) -> web.Response:
    sid = request.match_info["session_id"]
    points = _int_arg(request, "points", DEFAULT_POINTS, MAX_POINTS)
    bars = _int_arg(request, "bars", DEFAULT_BARS, MAX_BARS)
    raw_turn = request.query.get("turn")
    if raw_turn is not None and not raw_turn.isdigit():
        raise web.HTTPBadRequest(reason=f"turn={raw_turn!r} is not a turn number (0, 1, …)")
    snap = await request.app[SNAPSHOTS](request, sid)
    if snap is None:
        return web.json_response({
            "error": f"no projections for session {sid!r}: the series read the range its "
                     "projection row names", "session_id": sid}, status=404)
    reader = request.app[READER]
    try:
        fold, seconds = await reader.read(snap)
    except SchemaUnavailable as exc:  # temporary: the records are not corrupt
        log.warning("series: %s", exc)
        return web.json_response({"error": f"{exc}; the series read again when it answers",
                                  "session_id": sid}, status=503)
    return web.json_response(series_json(
        fold, snap, reader.config.budget, points=points, bars=bars,
        turn=int(raw_turn) if raw_turn is not None else None, seconds=seconds))


def setup(app: web.Application, config: SeriesConfig, snapshots: Snapshots) -> None:
    """Add ``GET /api/sessions/{id}/series``."""
    app[READER] = SeriesReader(config)
    app[SNAPSHOTS] = snapshots
    app.router.add_get("/api/sessions/{session_id}/series", _handler)
