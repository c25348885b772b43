"""Which partition a session id lands in: Kafka's murmur2 key hash.

Writers use librdkafka's ``partitioner=murmur2_random`` (murmur2 for keyed records), the
Java client's default, so Python and JVM writers agree on a session's partition. Resume
needs the same answer without producing when the per-session index is missing.
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``), as signed int32."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    tail = 4 * n4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str | bytes, partitions: int) -> int:
    """The partition the default (murmur2) partitioner picks for ``key``."""
    raw = key.encode() if isinstance(key, str) else key
    return (murmur2(raw) & 0x7FFFFFFF) % partitions
