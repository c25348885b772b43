"""The memory backend contract on the real Kafka and Redis, and what only the fleet has:
sealed records and rows, a row that only moves forward, a writer's read-your-writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from sessionstream.core.settings import Settings
from sessionstream.governance.keys import FileKeyStore
from sessionstream.integrations.memory import FleetBackend
from tests.contract.memory_contract import MakeBackend, MemoryContract, client

pytestmark = pytest.mark.integration


@pytest.fixture
def mem_settings(settings: Settings, unique_topic: Callable[..., str], redis_prefix: str
                 ) -> Settings:
    return dataclasses.replace(settings, memory_topic_override=unique_topic(4),
                               key_prefix=redis_prefix)


@pytest.fixture
def key_store(tmp_path: Path) -> FileKeyStore:
    return FileKeyStore(tmp_path / "keys", cache_ttl_s=0)


@pytest.fixture
def make_fleet(mem_settings: Settings, key_store: FileKeyStore) -> Iterator[Any]:
    made: list[FleetBackend] = []

    def make() -> FleetBackend:
        b = FleetBackend(mem_settings, key_store, encryption=True)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


class TestFleetBackend(MemoryContract):
    @pytest.fixture
    def make_backend(self, make_fleet: Any) -> MakeBackend:
        return make_fleet  # type: ignore[no-any-return]


def _dump(r: redis.Redis, prefix: str) -> bytes:
    out = b""
    for key in r.scan_iter(match=f"{prefix}*", count=1000):
        kind = r.type(key)
        if kind == "hash":
            out += repr(r.hgetall(key)).encode()
        elif kind == "set":
            out += repr(r.smembers(key)).encode()
        elif kind == "zset":
            out += repr(r.zrange(key, 0, -1)).encode()
        elif kind == "stream":
            out += repr(r.xrange(key)).encode()
        else:
            out += repr(r.get(key)).encode()
    return out


def test_content_is_sealed_in_the_topic_and_in_redis(
        make_fleet: Any, mem_settings: Settings, redis_client: redis.Redis,
        redis_prefix: str) -> None:
    backend = make_fleet()
    mem = client(backend, "ada")
    v = mem.propose("Canary-7f3a prefers the aisle", kind="preference",
                    sources=[("s-1", [1])])
    assert "Canary-7f3a" not in _dump(redis_client, redis_prefix).decode()
    records = backend.log.read(backend.log.partition_of(mem.namespace()), 0, 10)
    assert records and all(b"Canary-7f3a" not in value for _, _, value in records)
    # ...and every process with the tenant's keys reads it
    assert client(make_fleet(), "ada").search("canary aisle")[0].version.ref == v.ref


def test_a_row_never_moves_back(make_fleet: Any) -> None:
    """The worker and writers fold the same records; a write of an older offset than
    the row holds is refused, so nobody takes the row back."""
    backend = make_fleet()
    mem = client(backend, "ada")
    mem.propose("one", kind="note")
    ns = mem.namespace()
    rows = backend.rows()
    offset, state = rows.load(ns)
    assert rows.store(ns, None, state, offset - 1) is False
    assert rows.offset(ns) == offset


def test_a_batch_reads_back_only_the_records_other_writers_left_unfolded(
        make_fleet: Any) -> None:
    from sessionstream.producers.memory_log import encode_op

    a, b = make_fleet(), make_fleet()
    mem_a, mem_b = client(a, "ada"), client(b, "ada")
    mem_a.propose("Prefers tea", kind="preference")  # the namespace exists, folded
    # another writer produced two records and died before folding them
    for text in ("Lives in Oslo", "Works nights"):
        op = mem_b.propose_op(text, kind="fact")
        b.log.append(op.namespace, encode_op(op, b.sealer))
    read: list[tuple[int, int, int]] = []
    plain = a.log.read

    def spy(partition: int, start: int, end: int) -> list[tuple[int, bytes, bytes]]:
        read.append((partition, start, end))
        return plain(partition, start, end)

    a.log.read = spy  # type: ignore[method-assign]
    mem_a.apply([mem_a.propose_op(f"Note {i}", kind="note") for i in range(3)])
    (_partition, start, end), = read  # one read: the two records, none of the batch's own
    assert end - start == 1
    assert sorted(v.content for v in client(make_fleet(), "ada").list()) == [
        "Lives in Oslo", "Note 0", "Note 1", "Note 2", "Prefers tea", "Works nights"]


def test_writers_of_one_process_that_produce_before_any_folds_each_read_their_write(
        make_fleet: Any) -> None:
    """Eight threads of one backend: every record is produced before any thread folds
    (a barrier after the produce forces it), so each installer meets the others'."""
    import threading

    backend = make_fleet()
    mem = client(backend, "ada")
    mem.propose("Prefers tea", kind="preference")
    threads = 8
    produced = threading.Barrier(threads, timeout=60)
    plain = backend.log.append_many

    def produce_then_wait(items: Any) -> Any:
        done = plain(items)
        produced.wait()
        return done

    backend.log.append_many = produce_then_wait  # type: ignore[method-assign]
    placed: dict[int, Any] = {}
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            v = mem.propose(f"Fact number {i}", kind="fact")
            placed[i] = v
            assert mem.show(v.ref.id)["id"] == v.ref.id  # read-your-write, same process
        except BaseException as exc:  # reported below, with the thread's number
            errors.append(exc)

    workers = [threading.Thread(target=write, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not errors, errors
    assert len(placed) == threads
    fresh = client(make_fleet(), "ada")  # another process: every write, no duplicate
    assert sorted(v.content for v in fresh.list()) == sorted(
        [f"Fact number {i}" for i in range(threads)] + ["Prefers tea"])
