"""A consumed batch as the kafka engine hands it on: the messages themselves.

A :class:`MessageBatch` is a ``Sequence[Record]`` whose Records are built only when
Python reads one (a dead letter, a session handed to the Python processor, the Python
fold); the native fold reads the confluent-kafka ``Message`` objects directly
(:attr:`MessageBatch.messages`), so the live worker makes no Python object per event.
The extension's ``scan_messages`` read the batch once: the messages that carry an
error, the highest offset and the first message of each partition.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from sessionstream.core.pipeline import Record


class MessageBatch(Sequence[Record]):
    """The error-free messages of one ``consume()``, as Records on demand."""

    __slots__ = ("_built", "first", "high", "messages")

    def __init__(self, messages: list[Any], high: dict[int, int],
                 first: dict[int, int]) -> None:
        #: the messages (each has ``topic()``, ``partition()``, ``offset()``, ``key()``,
        #: ``value()``, ``timestamp()``), none with an error
        self.messages = messages
        #: partition -> the highest offset in the batch
        self.high = high
        #: partition -> the index of its first message
        self.first = first
        self._built: dict[int, Record] = {}

    def __len__(self) -> int:
        return len(self.messages)

    @overload
    def __getitem__(self, i: int) -> Record: ...

    @overload
    def __getitem__(self, i: slice) -> list[Record]: ...

    def __getitem__(self, i: int | slice) -> Record | list[Record]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self.messages)))]
        if i < 0:
            i += len(self.messages)
        rec = self._built.get(i)
        if rec is None:
            m = self.messages[i]  # IndexError past the end, as a list
            ts = m.timestamp()
            rec = self._built[i] = Record(m.topic() or "", m.partition() or 0,
                                          m.offset() or 0, m.key(), m.value(),
                                          ts[1] if ts[0] else None)
        return rec

    def __iter__(self) -> Iterator[Record]:
        for i in range(len(self.messages)):
            yield self[i]

    def heads(self) -> list[Record]:
        """One record per partition of the batch (its first)."""
        return [self[i] for i in self.first.values()]


def native_items(records: Sequence[Record]) -> list[Any]:
    """What the extension's ``Folder.fold`` reads for ``records``: the messages of a
    :class:`MessageBatch`, else the records as a list."""
    if isinstance(records, MessageBatch):
        return records.messages
    return records if isinstance(records, list) else list(records)


def partition_heads(records: Sequence[Record]) -> Sequence[Record]:
    """Records naming every (topic, partition) of ``records`` (a batch: one each)."""
    return records.heads() if isinstance(records, MessageBatch) else records


def select_keys(records: Sequence[Record], keys: set[bytes]) -> list[Record]:
    """The records whose key is one of ``keys`` or absent (a keyless record names its
    session only once decoded), in order; a :class:`MessageBatch` builds a Record only
    for those."""
    if isinstance(records, MessageBatch):
        return [records[i] for i, m in enumerate(records.messages)
                if (k := m.key()) is None or k in keys]
    return [r for r in records if r.key is None or r.key in keys]


def highest_offsets(records: Sequence[Record]) -> dict[int, int]:
    """Partition -> the highest offset of ``records`` (a :class:`MessageBatch` knows it)."""
    if isinstance(records, MessageBatch):
        return dict(records.high)
    high: dict[int, int] = {}
    for r in records:
        if r.offset > high.get(r.partition, -1):
            high[r.partition] = r.offset
    return high
