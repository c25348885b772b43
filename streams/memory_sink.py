"""The batch cycle's sink over the long-term memory rows (ADR 0030, ADR 0026).

The rows, their Lua and the tenant's indexes are :class:`producers.memory_log.MemoryRows`'
(one owner of the layout, shared with the writers that fold their own operations, ADR 0030
A2); this module only speaks the cycle's :class:`~sessionstream.streams.ports.Sink`
protocol over them:

- a "session" is a namespace (its key), its write a :class:`NamespaceWrite`: the state
  the fold reached, the state it started from, and the offsets;
- :meth:`MemoryRowSink.write_sessions` shreds the keys of the versions the write forgot,
  then stores the row (``NamespaceFolder.write_row``: only forward, by offset). A row at
  or past the write's last offset is ``stale``: whoever wrote it (a writer installing
  its own operation, another worker) folded these records already, indexes included;
- :meth:`MemoryRowSink.write_tenant` updates the tenant's indexes and change feed for
  the applied writes (``MemoryRows.index``), then the progress (``memory:folded:g<N>``,
  partition -> offset, only forward: the writers advance it too);
- the generation is the memory pointer (``memory:generation``), or the one a rebuild
  pins.

The rows are written with the synchronous client the writers use: memory writes are rare
beside events, and the worker's loop has nothing else to serve meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sessionstream.core.memory.fold import MemoryState
from sessionstream.core.memory.model import Namespace
from sessionstream.producers.memory_log import MemoryRows, NamespaceFolder
from sessionstream.streams.ports import SessionWrite, WriteOutcome


@dataclass(frozen=True, slots=True)
class NamespaceWrite(SessionWrite):
    """A namespace's row write: ``session_id`` is the namespace key, ``base_offset`` the
    offset ``before`` was folded to (-1: no row), ``last_offset`` the last record
    folded into ``state``. ``fields`` stays empty: the row's fields are the difference
    of the two states, sealed as the row stores them (``MemoryRows.store``)."""

    namespace: Namespace | None = None
    before: MemoryState | None = None
    state: MemoryState | None = None


def namespace_write(namespace: Namespace, partition: int, base: int,
                    before: MemoryState | None, state: MemoryState, last: int,
                    activity_ms: int) -> NamespaceWrite:
    return NamespaceWrite(namespace.key, partition, base, last, 0, {}, (), activity_ms,
                          namespace=namespace, before=before, state=state)


def _of(write: SessionWrite) -> NamespaceWrite:
    if not isinstance(write, NamespaceWrite) or write.namespace is None or write.state is None:
        raise TypeError(f"the memory sink writes namespace rows, not {type(write).__name__}")
    return write


class MemoryRowSink:
    """:class:`~sessionstream.streams.ports.Sink` over one tenant's memory rows."""

    def __init__(self, rows: MemoryRows, writer: NamespaceFolder, *,
                 generation: int | None = None) -> None:
        self.rows = rows
        self.writer = writer
        self._pinned = generation  # a rebuild's: written whatever the pointer says

    def _gen(self) -> int:
        return self._pinned if self._pinned is not None else self.rows.generation()

    async def generation(self) -> int:
        return self._pinned if self._pinned is not None else self.rows.refresh_generation()

    async def load(self, gen: int, session_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        raise NotImplementedError("the memory folder loads its rows as states "
                                  "(MemoryRows.load), not as fields")

    async def write_sessions(self, gen: int, writes: Sequence[SessionWrite]
                             ) -> list[WriteOutcome]:
        out = []
        for w in map(_of, writes):
            assert w.namespace is not None and w.state is not None
            if self.writer.write_row(w.namespace, w.before, w.state, w.last_offset, gen):
                out.append(WriteOutcome("applied", w.base_offset))
            else:
                out.append(WriteOutcome("stale", self.rows.offset(w.namespace, gen)))
        return out

    async def write_tenant(self, gen: int, writes: Sequence[SessionWrite], group: str,
                           progress: Mapping[str, int]) -> None:
        for w in map(_of, writes):
            assert w.namespace is not None and w.state is not None
            self.rows.index(w.namespace, w.before, w.state, w.last_offset, gen)
        self.rows.advance_folded({int(tp.rpartition(":")[2]): off
                                  for tp, off in progress.items()}, gen)

    async def load_progress(self, group: str, keys: Sequence[str]) -> dict[str, int]:
        """The folded offset of each ``topic:partition`` (the group is the worker's; the
        progress is the tenant's, shared with the writers)."""
        gen = self._gen()
        out = {}
        for key in keys:
            off = self.rows.folded(int(key.rpartition(":")[2]), gen)
            if off >= 0:
                out[key] = off
        return out

    async def session_ids(self, gen: int, start: int, count: int) -> list[str]:
        keys = [ns.key for ns in self.rows.namespaces(gen)]
        return keys[start:start + count]

    async def load_fields(self, gen: int, session_ids: Sequence[str],
                          fields: Sequence[str]) -> dict[str, dict[str, str]]:
        raise NotImplementedError("the memory rows have no per-field reads")

    async def writer_first_offset(self, session_id: str) -> int | None:
        return None
