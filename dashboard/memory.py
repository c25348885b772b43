"""The dashboard's memory view: a user's long-term memories with their sources.

``GET /api/memory?user=ID[&label=L…]`` (or ``agent=`` / ``org=``): the namespace's
current memories — content (opened with the tenant's keys), kind, status, when — each
source a link to the session timeline (``/#s=<session>``) with the seqs it came from,
pending ones marked; plus the owner's other namespaces. ``/static/memory.html`` draws
it. Reads the namespace row in Redis (docs/adr/0030); never the memory topic.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from sessionstream import redisconn
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.memory.errors import InvalidMemory
from sessionstream.core.memory.model import Namespace, Scope
from sessionstream.governance.memory import MemorySealer
from sessionstream.producers.memory_log import MemoryRows


class MemoryView:
    """Reads namespace rows for the dashboard (a blocking client, in a thread)."""

    def __init__(self, redis_url: str, cluster: bool, keys: Any, rows: Any) -> None:
        self.keys = keys
        cipher = getattr(rows, "cipher", None)
        self.sealer = MemorySealer.of(cipher, keys.tenant)
        self._url, self._cluster = redis_url, cluster
        self._rows: MemoryRows | None = None

    def rows(self) -> MemoryRows:
        if self._rows is None:
            self._rows = MemoryRows(redisconn.sync_redis(self._url, cluster=self._cluster,
                                                         decode_responses=True),
                                    self.keys, self.sealer)
        return self._rows

    def read(self, ns: Namespace) -> dict[str, Any]:
        rows = self.rows()
        offset, state = rows.load(ns)
        memories = []
        for v in state.current(pending=True):
            memories.append({
                "id": v.ref.id, "ref": str(v.ref), "kind": v.kind, "status": v.status.value,
                "content": None if v.content is None else thaw(v.content),
                "readable": v.content is not None, "valid_from": v.valid_from,
                "expires_at": v.expires_at, "extractor": v.extractor.to_json(),
                "supersedes": [str(r) for r in v.supersedes],
                "sources": [{"session_id": s.session_id, "seqs": list(s.seqs),
                             "link": f"/#s={s.session_id}"} for s in v.sources]})
        others = [n.key for n in rows.namespaces()
                  if n.scope is ns.scope and n.owner == ns.owner]
        return {"namespace": ns.key, "offset": offset, "memories": memories,
                "namespaces": others, "rejected": dict(state.rejected)}


VIEW = web.AppKey("memory_view", MemoryView)


async def _handler(request: web.Request) -> web.Response:
    view = request.app[VIEW]
    q = request.query
    given = [(s, q.get(s.value)) for s in Scope if q.get(s.value)]
    if len(given) != 1:
        raise web.HTTPBadRequest(reason="name one owner: ?user=ID, ?agent=ID or ?org=ID "
                                        "(and &label=L for each label)")
    scope, owner = given[0]
    try:
        ns = Namespace(view.keys.tenant, scope, str(owner), tuple(q.getall("label", [])))
    except InvalidMemory as exc:
        raise web.HTTPBadRequest(reason=f"{exc.path}: {exc.reason}") from None
    return web.json_response(await asyncio.to_thread(view.read, ns))


def setup(app: web.Application, view: MemoryView) -> None:
    app[VIEW] = view
    app.router.add_get("/api/memory", _handler)
