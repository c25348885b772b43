"""In-memory adapters of the processor's ports: a sink, a log reader, a dead-letter box.

Used by unit tests, benchmarks and offline runs. :class:`MemorySink` keeps the same
observable behaviour as :class:`streams.sink.RedisSink` and its Lua script, and the sink
contract suite (``tests/contract/sink_contract.py``) runs over both, so the two cannot
drift: compare-and-set by offset, the session change record and the tenant feed, the
session index that never moves back, progress that only moves forward.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sessionstream.core.pipeline import Record
from sessionstream.core.rows import FIRST_GENERATION, SessionRow, change_entry
from sessionstream.streams.ports import BatchOutcome, DeadLetter, SessionWrite, WriteOutcome


class MemorySink:
    """Dict-backed sink with the compare-and-set semantics of the Redis script.

    ``hashes[(gen, session_id)]`` are the session rows, ``changes`` the capped per-session
    change records, ``feed[gen]`` the tenant change feed (capped), ``index`` the session
    index scores, ``progress[(group, "topic:partition")]`` the partition progress.
    """

    def __init__(self, *, change_maxlen: int = 100, feed_maxlen: int = 100_000) -> None:
        self.gen = FIRST_GENERATION
        self.change_maxlen = change_maxlen
        self.feed_maxlen = feed_maxlen
        self.hashes: dict[tuple[int, str], dict[str, str]] = {}
        self.changes: dict[tuple[int, str], list[str]] = {}
        self.index: dict[tuple[int, str], float] = {}
        self.feed: dict[int, list[str]] = {}
        self.progress: dict[tuple[str, str], int] = {}
        self.writer_offsets: dict[str, int] = {}  # the writer-side index's first_offset
        self.applied = 0

    async def generation(self) -> int:
        return self.gen

    async def load(self, gen: int, session_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        return {s: dict(self.hashes.get((gen, s), {})) for s in session_ids}

    async def write_sessions(self, gen: int, writes: Sequence[SessionWrite]
                             ) -> list[WriteOutcome]:
        return [self._write(gen, w) for w in writes]

    def _write(self, gen: int, write: SessionWrite) -> WriteOutcome:
        key = (gen, write.session_id)
        h = self.hashes.get(key, {})
        stored = SessionRow.as_of_offset(h)
        if stored > write.last_offset or (stored == write.last_offset and not write.force):
            return WriteOutcome("stale", stored)
        if stored != write.base_offset:
            return WriteOutcome("conflict", stored)
        h = self.hashes.setdefault(key, {})
        h.update(write.fields)
        for name in write.deletes:
            h.pop(name, None)
        h[SessionRow.AS_OF_OFFSET] = str(write.last_offset)
        h[SessionRow.AS_OF_SEQ] = str(write.as_of_seq)
        _append(self.changes.setdefault(key, []), _entry(write), self.change_maxlen)
        self.applied += 1
        return WriteOutcome("applied", stored)

    async def write_tenant(self, gen: int, writes: Sequence[SessionWrite], group: str,
                           progress: Mapping[str, int]) -> None:
        for w in writes:
            key = (gen, w.session_id)
            self.index[key] = max(self.index.get(key, w.activity_ms), w.activity_ms)
            _append(self.feed.setdefault(gen, []), _entry(w), self.feed_maxlen)
        for tp, off in progress.items():
            k = (group, tp)
            self.progress[k] = max(self.progress.get(k, -1), off)

    async def write_batch(self, gen: int, writes: Sequence[SessionWrite], group: str,
                          progress: Mapping[str, int]) -> BatchOutcome | None:
        """As the Redis sink's one-call batch (``WRITE_BATCH_LUA``)."""
        if gen != self.gen:
            return BatchOutcome(moved=True)
        outcomes = tuple(self._write(gen, w) for w in writes)
        applied = [w for w, o in zip(writes, outcomes, strict=True) if o.status == "applied"]
        clean = all(o.status != "conflict" for o in outcomes)
        await self.write_tenant(gen, applied, group, progress if clean else {})
        return BatchOutcome(moved=False, outcomes=outcomes, progress_written=clean)

    async def load_progress(self, group: str, keys: Sequence[str]) -> dict[str, int]:
        return {k: self.progress[(group, k)] for k in keys if (group, k) in self.progress}

    async def writer_first_offset(self, session_id: str) -> int | None:
        return self.writer_offsets.get(session_id)

    async def session_ids(self, gen: int, start: int, count: int) -> list[str]:
        ids = sorted((score, sid) for (g, sid), score in self.index.items() if g == gen)
        return [sid for _, sid in ids[start:start + count]]

    async def load_fields(self, gen: int, session_ids: Sequence[str], fields: Sequence[str]
                          ) -> dict[str, dict[str, str]]:
        return {s: {f: v for f, v in self.hashes.get((gen, s), {}).items() if f in fields}
                for s in session_ids}


class MemoryLog:
    """The events topic as a list of records (for state_version rebuilds)."""

    def __init__(self, records: list[Record]) -> None:
        self.records = records
        self.reads = 0

    async def read_session(self, topic: str, partition: int, from_offset: int,
                           upto_offset: int, session_id: str) -> list[Record]:
        self.reads += 1
        return [r for r in self.records
                if r.partition == partition and from_offset <= r.offset <= upto_offset
                and r.key == session_id.encode()]


class MemoryDeadLetters:
    """Keeps the dead letters it is sent, in order."""

    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    async def send(self, letters: Sequence[DeadLetter]) -> list[DeadLetter]:
        self.letters.extend(letters)
        return []


def _entry(w: SessionWrite) -> str:
    return change_entry(w.session_id, w.as_of_seq, w.last_offset, w.changed)


def _append(stream: list[str], entry: str, maxlen: int) -> None:
    stream.append(entry)
    if len(stream) > maxlen:
        del stream[: len(stream) - maxlen]
