"""Converging ``state_version`` bumps without new traffic: the quiet sessions catch up too.

After an assignment the worker schedules its partitions (:meth:`Convergence.schedule`);
between batches it runs bounded steps (:meth:`Convergence.step`): read the next sessions
of the index, find those whose stored unit versions differ from the code's, rebuild the
stale units from the log and write them. Sessions with new events are rebuilt when
their cursor loads anyway. A step runs under the batch cycle's lock, on the reference
fold's cache (:class:`Rebuilder`; :meth:`streams.processor.Processor.converge_step`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from sessionstream.core.rows import MetaFields, SessionRow
from sessionstream.streams.ports import SessionWrite, Sink
from sessionstream.streams.session_row import CachedSession, SessionRowCodec

log = logging.getLogger("sessionstream.streams")


class Rebuilder(Protocol):
    """What a convergence step uses of the reference fold (:class:`streams.fold_python.
    PythonFolder`), whose cache it shares."""

    codec: SessionRowCodec

    async def rebuild(self, cur: CachedSession, topic: str) -> CachedSession: ...

    def fold_pending(self, cur: CachedSession) -> tuple[CachedSession, SessionWrite] | None: ...

    def keep(self, cur: CachedSession) -> None: ...

    def drop(self, session_id: str) -> None: ...


class Convergence:
    """The scan of the sessions index for units whose ``state_version`` was bumped."""

    def __init__(self) -> None:
        self.topic: str | None = None
        self.partitions: set[int] = set()
        self.next = 0  # rank in the sessions index where the scan goes on
        self.checked = 0  # sessions checked since the last schedule
        self.rebuilt = 0  # sessions rebuilt since the last schedule

    def schedule(self, topic: str, partitions: Iterable[int]) -> None:
        self.topic = topic
        self.partitions |= set(partitions)
        self.next = 0
        self.checked = self.rebuilt = 0

    @property
    def active(self) -> bool:
        return self.topic is not None and bool(self.partitions)

    async def step(self, sink: Sink, gen: int, group: str, host: Rebuilder,
                   held: Callable[[str], bool], limit: int, concurrency: int) -> int:
        """Check the next ``limit`` sessions of generation ``gen``; rebuild and write the
        stale ones that the fold does not hold (``held``), at most ``concurrency`` log
        read-backs at once. Returns the number rebuilt."""
        topic = self.topic
        assert topic is not None
        ids = await sink.session_ids(gen, self.next, limit)
        if not ids:
            log.info("state_version convergence done: %d sessions checked, %d rebuilt",
                     self.checked, self.rebuilt)
            self.topic, self.partitions = None, set()
            return 0
        self.next += len(ids)
        codec = host.codec
        fields = [SessionRow.META, *(SessionRow.state_version(u.key) for u in codec.units)]
        rows = await sink.load_fields(gen, [s for s in ids if not held(s)], fields)
        stale = [sid for sid, row in rows.items() if self._ours(row) and codec.is_stale(row)]
        self.checked += len(ids)
        if not stale:
            return 0
        loaded = await sink.load(gen, stale)
        sem = asyncio.Semaphore(concurrency)

        async def rebuild(sid: str) -> CachedSession | None:
            cur = codec.load(sid, -1, loaded.get(sid))
            if not cur.stale or cur.quarantine is not None:
                return None
            async with sem:
                return await host.rebuild(cur, topic)

        cursors = [c for c in await asyncio.gather(*(rebuild(s) for s in stale)) if c]
        folded = [r for c in cursors if (r := host.fold_pending(c)) is not None]
        outcomes = await sink.write_sessions(gen, [w for _, w in folded])
        writes = []
        for (new, write), outcome in zip(folded, outcomes, strict=True):
            if outcome.status == "applied":
                host.keep(new)
                writes.append(write)
            else:  # moved meanwhile: its next batch loads and rebuilds it
                host.drop(write.session_id)
        await sink.write_tenant(gen, writes, group, {})
        self.rebuilt += len(writes)
        log.info("state_version convergence: %d sessions checked, %d rebuilt so far",
                 self.checked, self.rebuilt)
        return len(writes)

    def _ours(self, row: Mapping[str, str]) -> bool:
        """A stored session of one of the scheduled partitions."""
        if not row.get(SessionRow.META):
            return False
        return int(SessionRow.meta(row).get(MetaFields.PARTITION, -1)) in self.partitions
