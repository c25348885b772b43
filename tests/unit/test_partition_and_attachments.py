"""murmur2 agrees with Kafka's Java client; attachments are content-addressed and atomic."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sessionstream.core.errors import AttachmentError
from sessionstream.producers.attachments import LocalAttachmentStore, spill_tool_result
from sessionstream.producers.partition import murmur2, partition_for

# From Kafka's UtilsTest.testMurmur2.
JAVA_VECTORS = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


@pytest.mark.parametrize("key, expected", JAVA_VECTORS.items())
def test_murmur2_matches_the_java_client(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == expected


def test_partition_is_stable_and_in_range() -> None:
    for n in (1, 4, 12):
        for k in ("a", "session-1", "ü"):
            assert 0 <= partition_for(k, n) < n
            assert partition_for(k, n) == partition_for(k.encode(), n)


def test_store_is_content_addressed_and_idempotent(tmp_path: Path) -> None:
    store = LocalAttachmentStore(tmp_path)
    digest = store.put(b"hello")
    assert digest == hashlib.sha256(b"hello").hexdigest()
    assert store.put(b"hello") == digest
    assert store.path(digest).parent.parent.name == digest[:2]
    assert store.get(digest) == b"hello"
    assert not list(tmp_path.rglob(".tmp-*"))


def test_corrupt_or_missing_blobs_are_named(tmp_path: Path) -> None:
    store = LocalAttachmentStore(tmp_path)
    digest = store.put(b"x")
    store.path(digest).write_bytes(b"y")
    with pytest.raises(AttachmentError, match="corrupt"):
        store.get(digest)
    with pytest.raises(AttachmentError, match="not in the store"):
        store.get("0" * 64)
    with pytest.raises(AttachmentError, match="sha256"):
        store.path("../etc")


def test_small_results_stay_inline_large_ones_spill(tmp_path: Path) -> None:
    store = LocalAttachmentStore(tmp_path)
    small = {"call_id": "c", "status": "ok", "content": "short"}
    assert spill_tool_result(small, store, threshold=100) is None
    big = {"call_id": "c", "status": "ok", "content": "ab" * 5000}
    out = spill_tool_result(big, store, threshold=100)
    assert out is not None and "content" not in out
    att = out["attachment"]
    assert att["size"] == 10_000 and att["media_type"].startswith("text/plain")
    assert store.get(att["sha256"]) == ("ab" * 5000).encode()
    structured = {"call_id": "c", "status": "ok", "content": {"rows": list(range(100))}}
    out = spill_tool_result(structured, store, threshold=50)
    assert out is not None and out["attachment"]["media_type"] == "application/json"
