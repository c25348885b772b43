"""Consistent reads of the projections in Redis (the Python API behind ``sessionstream views``).

Every view of a session lives in one row of the current generation, written by one
script call, so one HGETALL returns all views at one ``as_of_seq``. Keys and fields
are those of the row layout (``sessionstream.core.rows``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from sessionstream.core.rows import SEALED_PREFIX, KeySpace, SessionRow, generation_of
from sessionstream.core.rows import MetaFields as M


@dataclass(frozen=True)
class LiveSnapshot:
    """All views of one session at one ``as_of_seq`` (-1: nothing admitted yet)."""

    session_id: str
    generation: int
    as_of_seq: int
    as_of_offset: int
    views: dict[str, Any]
    meta: dict[str, Any]

    @property
    def quarantine(self) -> dict[str, Any] | None:
        q = self.meta.get(M.QUARANTINE)
        return q if isinstance(q, dict) else None

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "generation": self.generation,
                "as_of_seq": self.as_of_seq, "as_of_offset": self.as_of_offset,
                "quarantine": self.quarantine, "views": self.views}



async def current_generation(redis: Redis, keys: KeySpace) -> int:
    """The generation readers use now (the tenant's pointer; absent: the first)."""
    return generation_of(await redis.get(keys.generation()))


async def read_views(redis: Redis, keys: KeySpace, session_id: str, *,
                     generation: int | None = None, rows: Any = None) -> LiveSnapshot | None:
    """Every view of ``session_id`` at one ``as_of_seq``; None if the session is unknown.

    ``rows`` (a ``sessionstream.governance.rows.RowCipher``) opens the views sealed with
    the session's keys; without it, or without the key, such a view reads
    ``{"unavailable": …}``, never ciphertext.
    """
    gen = generation if generation is not None else await current_generation(redis, keys)
    row = await redis.hgetall(keys.session_row(session_id, gen))
    if not row:
        return None
    fields: dict[str, str] = {_s(k): _s(v) for k, v in row.items()}
    if any(v.startswith(SEALED_PREFIX) for v in fields.values()):
        from sessionstream.governance.rows import open_fields

        fields = open_fields(rows, session_id, fields, SessionRow.VIEW, SessionRow.STATE)
    return LiveSnapshot(
        session_id=session_id, generation=gen,
        as_of_seq=SessionRow.as_of_seq(fields),
        as_of_offset=SessionRow.as_of_offset(fields),
        views=SessionRow.views(fields),
        meta=SessionRow.meta(fields),
    )


#: The row fields the session list reads (not the states or the other views).
_LIST_FIELDS = (SessionRow.META, SessionRow.view("index"), SessionRow.AS_OF_SEQ,
                SessionRow.view("rejections"))


async def list_sessions(redis: Redis, keys: KeySpace, *, limit: int = 100,
                        generation: int | None = None) -> list[dict[str, Any]]:
    """Sessions by last activity, newest first, from the index (never reads a log)."""
    gen = generation if generation is not None else await current_generation(redis, keys)
    ids = [_s(s) for s in await redis.zrevrange(keys.sessions_index(gen), 0, limit - 1)]
    async with redis.pipeline(transaction=False) as pipe:
        for sid in ids:
            pipe.hmget(keys.session_row(sid, gen), list(_LIST_FIELDS))
        rows = await pipe.execute()
    out = []
    for sid, (meta, index, as_of, rejections) in zip(ids, rows, strict=True):
        m = json.loads(_s(meta)) if meta else {}
        idx = json.loads(_s(index)) if index else {}
        rej = json.loads(_s(rejections)) if rejections else {}
        out.append({
            "session_id": sid, "tenant": keys.tenant, "as_of_seq": int(as_of) if as_of else -1,
            "status": idx.get("status"), "turns": idx.get("turns"),
            "events": idx.get("event_count"), "last_time": m.get(M.LAST_TIME),
            "partition": m.get(M.PARTITION), "first_offset": m.get(M.FIRST_OFFSET),
            "last_offset": m.get(M.AS_OF_OFFSET), "quarantine": m.get(M.QUARANTINE),
            "counts": m.get(M.COUNTS), "open_turn": idx.get("open_turn"),
            "status_reason": idx.get("status_reason"),
            "rejections": rej.get("total", 0),
        })
    return out


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class ViewReader:
    """What a service reads: every view of a session at one ``as_of_seq``, and the session list.

    ``ViewReader.from_settings(settings)`` connects to the settings' Redis (no I/O until the
    first read) and opens sealed views with the tenant's keys. Use ``async with`` or
    :meth:`aclose`.
    """

    def __init__(self, redis: Redis, keys: KeySpace, rows: Any = None) -> None:
        self.redis = redis
        self.keys = keys
        self.rows = rows

    @classmethod
    def from_settings(cls, settings: Any) -> ViewReader:
        from sessionstream import redisconn
        from sessionstream.governance.wiring import row_cipher

        return cls(redisconn.from_settings(settings, asyncio=True, decode_responses=True),
                   settings.keys, row_cipher(settings))

    async def views(self, session_id: str) -> LiveSnapshot | None:
        """Every view of ``session_id`` at one ``as_of_seq``; None if the session is unknown."""
        return await read_views(self.redis, self.keys, session_id, rows=self.rows)

    async def sessions(self, limit: int = 100) -> list[dict[str, Any]]:
        """Sessions by last activity, newest first (from the index)."""
        return await list_sessions(self.redis, self.keys, limit=limit)

    async def aclose(self) -> None:
        await self.redis.aclose()

    async def __aenter__(self) -> ViewReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
