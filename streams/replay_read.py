"""Replay's reading: a consumer thread ahead of the fold, and the row keys read ahead.

The native fold releases the GIL, so the consume (:class:`Reader`, on a thread of its
own) and the fold use both cores; :class:`KeysAhead` reads each folded session's row
keys on another thread, so the flush finds them in the key store's cache.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException

from sessionstream import native
from sessionstream.core.pipeline import Record
from sessionstream.streams.fold import MessageBatch

#: The extension reads a batch's messages in one pass (streams.fold); None without it.
_scan = native.ext.scan_messages if native.available() else None

#: Consumed batches the reader thread may hold ahead of the fold (bounds memory).
READ_AHEAD = 8


class KeysAhead:
    """Reads the row keys of the sessions folded (each data class its rows are sealed
    with) on a thread of its own while the fold runs, so the flush finds them in the
    key store's cache; the first lookup of a session's key (key files read and
    unwrapped, or the key created) cost the flush the most. Sessions are asked once
    between two flushes. No-op without a row sealer that has keys."""

    def __init__(self, rows: Any, units: Sequence[str]) -> None:
        from sessionstream.core.privacy import unit_class

        self._row_key: Callable[..., Any] | None = getattr(rows, "row_key", None)
        cipher = getattr(rows, "cipher", None)
        self._classes = sorted({c for u in units if (c := unit_class(u)) is not None},
                               key=lambda c: c.value)
        #: whose ContentCipher.prefetch_keys warms many sessions' keys in one batch (new
        #: keys made together: one sync, not one each; an error is left to the flush)
        self._cipher: Any = cipher if cipher is not None and cipher.enabled else None
        self._seen: set[str] = set()
        self._pool: Any = None
        self._pending: list[Any] = []
        #: sessions asked and not yet taken by the thread: it takes all there are at
        #: once, so batches folded while it worked share one key batch (one sync)
        self._queued: list[str] = []
        self._queue_lock = threading.Lock()

    def add(self, sids: list[str]) -> None:
        if self._row_key is None or not self._classes:
            return
        new = [sid for sid in sids if sid not in self._seen]
        if not new:
            return
        self._seen.update(new)
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="replay-keys")
        if self._cipher is not None:
            with self._queue_lock:
                self._queued.extend(new)
            self._pending.append(self._pool.submit(self._read_queued))
        else:
            self._pending.append(self._pool.submit(self._read, new))

    def _read_queued(self) -> None:
        with self._queue_lock:
            sids, self._queued = self._queued, []
        if sids:
            self._cipher.prefetch_keys(sids, self._classes)

    def _read(self, sids: list[str]) -> None:
        assert self._row_key is not None
        for sid in sids:
            for cls in self._classes:
                try:
                    self._row_key(sid, cls)
                except Exception:  # the flush asks again and reports it
                    return

    def rewind(self) -> None:
        """Ask again for the sessions folded from now on (their keys stay warm in the
        store's cache for the next flush), without waiting for the reads asked so far."""
        self._seen.clear()
        self._pending = [f for f in self._pending if not f.done()]

    async def drain(self) -> None:
        """Wait for the keys asked so far (the flush then seals from the cache)."""
        pending, self._pending = self._pending, []
        for f in pending:
            await asyncio.wrap_future(f)
        self._seen.clear()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class Reader:
    """Consumes on a thread of its own up to ``ends`` while the caller folds: the native
    fold releases the GIL, so the consume and the fold run on two cores. Batches come in
    order through a bounded queue (``READ_AHEAD``); ``position`` moves as batches are
    read (the caller reads it once :meth:`close` returned). A Kafka error is raised by
    :meth:`next`."""

    _END = object()

    def __init__(self, consumer: Consumer, topic: str, parts: list[int],
                 position: dict[int, int], ends: dict[int, int], batch: int) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(READ_AHEAD)
        self._stop = threading.Event()
        self._args = (consumer, topic, parts, position, ends, batch)
        self._thread = threading.Thread(target=self._run, name="replay-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer, topic, parts, position, ends, batch = self._args
        try:
            while not self._stop.is_set() and any(position[p] < ends[p] for p in parts):
                records = records_of(consumer.consume(batch, timeout=0.5), topic, position)
                if records:
                    self._put(records)
            self._put(self._END)
        except BaseException as exc:  # handed to the folding side
            self._put(exc)

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    async def next(self) -> Sequence[Record] | None:
        """The next batch, or None at the end offsets."""
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            item = await asyncio.to_thread(self._wait)
        if item is self._END:
            return None
        if isinstance(item, BaseException):
            raise item
        records: Sequence[Record] = item
        return records

    def _wait(self) -> Any:
        while True:  # in steps, so a thread left behind by a cancelled caller ends
            try:
                return self._queue.get(timeout=0.5)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return self._END

    def close(self) -> None:
        """Stop reading (batches not taken are dropped: the caller stops too)."""
        self._stop.set()
        self._thread.join()


def records_of(msgs: list[Any], topic: str, position: dict[int, int]) -> Sequence[Record]:
    """A consumed batch as records (with the extension, the messages themselves: a
    Record is built only for one Python reads, streams.fold); ``position`` moves to
    each partition's highest offset. A message carrying an error raises it."""
    if _scan is not None:
        good, errors, high, first = _scan(msgs)
        if errors:
            raise KafkaException(msgs[errors[0]].error())
        for p, hi in high.items():
            position[p] = max(position[p], hi)
        return MessageBatch(msgs if len(good) == len(msgs) else [msgs[i] for i in good],
                            high, first)
    records = []
    for m in msgs:
        if m.error() is not None:
            raise KafkaException(m.error())
        part: int = m.partition() or 0
        off: int = m.offset() or 0
        records.append(Record(topic, part, off, m.key(), m.value(), m.timestamp()[1]))
        position[part] = max(position[part], off)
    return records
