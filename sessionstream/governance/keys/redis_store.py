"""The Redis store: wrapped data keys in Redis, for a fleet of nodes.

Each node gets the tenant key ring from a file or the environment, never from Redis, so
a Redis dump alone opens nothing (:mod:`~sessionstream.governance.keys.ring`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sessionstream.core.privacy import DataClass
from sessionstream.core.rows import KeySpace
from sessionstream.governance.keys.port import KeyStore
from sessionstream.governance.keys.ring import TenantKeys

#: Replace a wrapped key only while it is there and not shredded (one atomic step).
_REPLACE_LIVE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 and
   redis.call('HEXISTS', KEYS[1], ARGV[1] .. ':shredded') == 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
"""


class RedisKeyStore(KeyStore):
    """Wrapped data keys in Redis for a fleet; tenant keys from each node's file/env.

    ``<prefix>:{<tenant>/<session>}:dkeys`` (hash: ``<class>`` → wrapped key,
    ``<class>:shredded`` → tombstone), the tenant's key list ``<prefix>:{<tenant>}:dkeys``
    (a set of session ids, for rotation and retention), its shred feed
    ``<prefix>:{<tenant>}:dkeys:shreds`` (a list) and ``<prefix>:{<tenant>}:holds``.
    Purging a session's Redis rows keeps its ``dkeys`` hash: the tombstones are the proof.
    """

    def __init__(self, client: Any, tenant_keys: TenantKeys, *, prefix: str = "ss",
                 **kw: Any) -> None:
        self._r = client
        self._prefix = prefix
        super().__init__(tenant_keys, **kw)

    def _key(self, tenant: str, session_id: str) -> str:
        return KeySpace(tenant, self._prefix).data_keys(session_id)

    def _hget(self, tenant: str, session_id: str, field: str) -> dict[str, Any] | None:
        raw = self._r.hget(self._key(tenant, session_id), field)
        if raw is None:
            return None
        value: dict[str, Any] = json.loads(raw)
        return value

    def _get(self, tenant: str, session_id: str, cls: DataClass) -> dict[str, Any] | None:
        return self._hget(tenant, session_id, cls.value)

    def _put_if_absent(self, tenant: str, session_id: str, cls: DataClass,
                       record: dict[str, Any]) -> dict[str, Any]:
        self._r.hsetnx(self._key(tenant, session_id), cls.value, json.dumps(record))
        self._r.sadd(KeySpace(tenant, self._prefix).data_key_sessions(), session_id)
        return self._get(tenant, session_id, cls) or record

    def _get_many(self, tenant: str, pairs: list[tuple[str, DataClass]]
                  ) -> dict[tuple[str, DataClass], tuple[dict[str, Any] | None,
                                                        dict[str, Any] | None]]:
        """Every pair's key and tombstone in one round trip (a pipeline of HMGETs)."""
        pipe = self._r.pipeline(transaction=False)
        for sid, cls in pairs:
            pipe.hmget(self._key(tenant, sid), [f"{cls.value}:shredded", cls.value])
        out: dict[tuple[str, DataClass], tuple[dict[str, Any] | None,
                                               dict[str, Any] | None]] = {}
        for pair, (tomb, raw) in zip(pairs, pipe.execute(), strict=True):
            out[pair] = (None if tomb is None else json.loads(tomb),
                         None if raw is None or tomb is not None else json.loads(raw))
        return out

    def _put_many_if_absent(self, tenant: str,
                            items: list[tuple[str, DataClass, dict[str, Any]]]
                            ) -> list[dict[str, Any]]:
        """One round trip: HSETNX each, the tenant's key list, then each stored value
        (the winner's when another creator was first)."""
        pipe = self._r.pipeline(transaction=False)
        for sid, cls, record in items:
            pipe.hsetnx(self._key(tenant, sid), cls.value, json.dumps(record))
        pipe.sadd(KeySpace(tenant, self._prefix).data_key_sessions(),
                  *sorted({sid for sid, _, _ in items}))
        for sid, cls, _ in items:
            pipe.hget(self._key(tenant, sid), cls.value)
        stored = pipe.execute()[len(items) + 1:]
        return [record if raw is None else json.loads(raw)
                for (_, _, record), raw in zip(items, stored, strict=True)]

    def _tombstoned(self, tenant: str, pairs: list[tuple[str, DataClass]]
                    ) -> set[tuple[str, DataClass]]:
        pipe = self._r.pipeline(transaction=False)
        for sid, cls in pairs:
            pipe.hexists(self._key(tenant, sid), f"{cls.value}:shredded")
        return {pair for pair, there in zip(pairs, pipe.execute(), strict=True) if there}

    def _replace(self, tenant: str, session_id: str, cls: DataClass,
                 record: dict[str, Any]) -> None:
        self._r.hset(self._key(tenant, session_id), cls.value, json.dumps(record))

    def _replace_live(self, tenant: str, session_id: str, cls: DataClass,
                      record: dict[str, Any]) -> bool:
        return bool(self._r.eval(_REPLACE_LIVE, 1, self._key(tenant, session_id), cls.value,
                                 json.dumps(record)))

    def _mark_shredded(self, tenant: str, kek_version: int) -> None:
        self._r.zadd(KeySpace(tenant, self._prefix).data_key_mark(), {"kek": kek_version},
                     gt=True)

    def _shred_mark(self, tenant: str) -> int:
        score = self._r.zscore(KeySpace(tenant, self._prefix).data_key_mark(), "kek")
        return 0 if score is None else int(score)

    def _tombstone(self, tenant: str, session_id: str, cls: DataClass) -> dict[str, Any] | None:
        return self._hget(tenant, session_id, f"{cls.value}:shredded")

    def _destroy(self, tenant: str, session_id: str, cls: DataClass,
                 tombstone: dict[str, Any]) -> bool:
        key = self._key(tenant, session_id)
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(key, f"{cls.value}:shredded", json.dumps(tombstone))
        pipe.hdel(key, cls.value)
        pipe.rpush(KeySpace(tenant, self._prefix).data_key_shreds(),
                   json.dumps([session_id, cls.value]))
        return bool(pipe.execute()[1])

    def _announce(self, tenant: str, session_id: str, cls: DataClass) -> None:
        self._r.rpush(KeySpace(tenant, self._prefix).data_key_shreds(),
                      json.dumps([session_id, cls.value]))

    def _shreds_since(self, tenant: str, position: Any) -> tuple[Any, list[tuple[str, str]]]:
        feed = KeySpace(tenant, self._prefix).data_key_shreds()
        size = int(self._r.llen(feed))
        if position is None or size == position:
            return size, []
        if size < position:
            return None, []
        out = []
        for raw in self._r.lrange(feed, position, size - 1):
            try:
                sid, cls = json.loads(raw)
                out.append((str(sid), str(cls)))
            except (ValueError, TypeError):
                return None, []
        return size, out

    def _records(self, tenant: str) -> Iterator[tuple[str, DataClass, dict[str, Any]]]:
        for raw in sorted(self._r.smembers(KeySpace(tenant, self._prefix).data_key_sessions())):
            session_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            for cls in DataClass:
                record = self._get(tenant, session_id, cls)
                if record is not None:
                    yield session_id, cls, record

    def _hold_records(self, tenant: str) -> dict[str, dict[str, Any]]:
        raw = self._r.hgetall(KeySpace(tenant, self._prefix).holds())
        return {(k.decode() if isinstance(k, bytes) else k): json.loads(v)
                for k, v in raw.items()}

    def _set_hold(self, tenant: str, scope: str, record: dict[str, Any] | None) -> None:
        key = KeySpace(tenant, self._prefix).holds()
        if record is None:
            self._r.hdel(key, scope)
        else:
            self._r.hset(key, scope, json.dumps(record))
