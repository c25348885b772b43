"""Consistent reads of the projections in Redis (the Python API behind ``sessionstream views``).

Every view of a session lives in one hash of the current generation, written by one
script call, so one HGETALL returns all views at one ``as_of_seq``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from sessionstream.core.keys import DEFAULT_PREFIX
from streams.sink import generation_key, session_hash, sessions_index


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
        q = self.meta.get("quarantine")
        return q if isinstance(q, dict) else None

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "generation": self.generation,
                "as_of_seq": self.as_of_seq, "as_of_offset": self.as_of_offset,
                "quarantine": self.quarantine, "views": self.views}


async def current_generation(redis: Redis, tenant: str, prefix: str = DEFAULT_PREFIX) -> int:
    raw = await redis.get(generation_key(prefix, tenant))
    return int(raw) if raw else 1


async def read_views(redis: Redis, tenant: str, session_id: str, *,
                     prefix: str = DEFAULT_PREFIX, generation: int | None = None
                     ) -> LiveSnapshot | None:
    """Every view of ``session_id`` at one ``as_of_seq``; None if the session is unknown."""
    gen = generation if generation is not None else await current_generation(redis, tenant, prefix)
    row = await redis.hgetall(session_hash(prefix, tenant, session_id, gen))
    if not row:
        return None
    fields: dict[str, str] = {_s(k): _s(v) for k, v in row.items()}
    return LiveSnapshot(
        session_id=session_id, generation=gen,
        as_of_seq=int(fields.get("as_of_seq", -1)),
        as_of_offset=int(fields.get("as_of_offset", -1)),
        views={k[5:]: json.loads(v) for k, v in sorted(fields.items()) if k.startswith("view:")},
        meta=json.loads(fields.get("meta", "{}")),
    )


async def list_sessions(redis: Redis, tenant: str, *, prefix: str = DEFAULT_PREFIX,
                        limit: int = 100, generation: int | None = None) -> list[dict[str, Any]]:
    """Sessions by last activity, newest first, from the index (never reads a log)."""
    gen = generation if generation is not None else await current_generation(redis, tenant, prefix)
    ids = [_s(s) for s in await redis.zrevrange(sessions_index(prefix, tenant, gen), 0, limit - 1)]
    async with redis.pipeline(transaction=False) as pipe:
        for sid in ids:
            pipe.hmget(session_hash(prefix, tenant, sid, gen),
                       ["meta", "view:index", "as_of_seq", "view:rejections"])
        rows = await pipe.execute()
    out = []
    for sid, (meta, index, as_of, rejections) in zip(ids, rows, strict=True):
        m = json.loads(_s(meta)) if meta else {}
        idx = json.loads(_s(index)) if index else {}
        rej = json.loads(_s(rejections)) if rejections else {}
        out.append({
            "session_id": sid, "tenant": tenant, "as_of_seq": int(as_of) if as_of else -1,
            "status": idx.get("status"), "turns": idx.get("turns"),
            "events": idx.get("event_count"), "last_time": m.get("last_time"),
            "partition": m.get("partition"), "first_offset": m.get("first_offset"),
            "last_offset": m.get("as_of_offset"), "quarantine": m.get("quarantine"),
            "counts": m.get("counts"), "open_turn": idx.get("open_turn"),
            "status_reason": idx.get("status_reason"),
            "rejections": rej.get("total", 0),
        })
    return out


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
