"""An immutable, append-only sequence with O(1) amortized append.

Projection states must be immutable (the registry detects change with ``is``), but
copying a tuple on every append makes a long session quadratic. A :class:`Vec` is a
length ``n`` over a backing list shared by all versions: appending to the newest
version extends the list in place, which older versions never see (they only read
their first ``n`` items); appending to an older version copies first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Vec(Generic[T]):
    """Read-only view of the first ``n`` items of a shared, append-only buffer."""

    __slots__ = ("_buf", "_n")

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._buf: list[T] = list(items)
        self._n = len(self._buf)

    @classmethod
    def _of(cls, buf: list[T], n: int) -> Vec[T]:
        v: Vec[T] = cls.__new__(cls)
        v._buf = buf
        v._n = n
        return v

    def append(self, item: T) -> Vec[T]:
        """A new Vec with ``item`` at the end; this one is unchanged."""
        buf = self._buf
        if len(buf) != self._n:  # someone already appended to this version: branch off
            buf = buf[: self._n]
        buf.append(item)
        return Vec._of(buf, self._n + 1)

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[T]:
        buf = self._buf
        for i in range(self._n):
            yield buf[i]

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return self._buf[: self._n][index]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("Vec index out of range")
        return self._buf[index]

    def slice(self, start: int, stop: int) -> list[T]:
        """Items ``start..stop-1`` (clipped to this version): O(stop - start)."""
        return self._buf[max(0, start):min(stop, self._n)]

    def extends(self, older: Vec[T]) -> bool:
        """Whether this version was appended on from ``older`` (the same buffer and at
        least as long): then its first ``len(older)`` items are ``older``'s."""
        return self._buf is older._buf and self._n >= older._n

    def to_list(self) -> list[T]:
        return self._buf[: self._n]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vec):
            return NotImplemented
        return self._n == other._n and (
            self._buf is other._buf or self._buf[: self._n] == other._buf[: other._n]
        )

    def __hash__(self) -> int:
        return hash(tuple(self._buf[: self._n]))

    def __repr__(self) -> str:
        return f"Vec({self.to_list()!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Vec, (self.to_list(),))
