"""The key stores' one contract, over the file store and the Redis store (real Redis)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from sessionstream.core.errors import ContentKeyShredded, LegalHold
from sessionstream.core.privacy import DataClass, KeyState
from sessionstream.governance.keys import FileKeyStore, KeyStore, RedisKeyStore, TenantKeys

pytestmark = pytest.mark.integration

Factory = Callable[[], KeyStore]


@pytest.fixture(params=["file", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    if request.param == "file":
        return lambda: FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("redis_prefix")
    kek_dir = tmp_path / "tenant-keys"
    return lambda: RedisKeyStore(client, TenantKeys(kek_dir), prefix=prefix, cache_ttl_s=0)


def test_two_nodes_asking_for_a_new_key_get_the_same_one(make_store: Factory) -> None:
    a, b = make_store(), make_store()
    assert a.data_key("t1", "s1", DataClass.SURFACE) == b.data_key("t1", "s1", DataClass.SURFACE)
    assert a.data_key("t1", "s2", DataClass.SURFACE) != a.data_key("t1", "s1", DataClass.SURFACE)


def test_shred_leaves_a_tombstone_other_nodes_see(make_store: Factory) -> None:
    a, b = make_store(), make_store()
    a.data_key("t1", "s1", DataClass.RAW)
    a.data_key("t1", "s1", DataClass.SURFACE)
    done = a.shred("t1", "s1", (DataClass.RAW,), principal="ops", reason="retention")
    assert [(s.data_class, s.principal, s.reason) for s in done] == [
        (DataClass.RAW, "ops", "retention")]
    found = b.lookup("t1", "s1", DataClass.RAW)
    assert found.state is KeyState.SHREDDED and found.key is None and found.shredded_at
    assert b.lookup("t1", "s1", DataClass.SURFACE).state is KeyState.ACTIVE
    with pytest.raises(ContentKeyShredded):
        b.data_key("t1", "s1", DataClass.RAW)
    assert [s.data_class for s in b.shredded("t1", "s1")] == [DataClass.RAW]
    assert a.shred("t1", "s1", (DataClass.RAW,), principal="ops", reason="again") == []


def test_rotation_rewraps_every_key_of_the_tenant_only(make_store: Factory) -> None:
    a = make_store()
    keys = {(t, s, c): a.data_key(t, s, c) for t in ("t1", "t2") for s in ("s1", "s2")
            for c in (DataClass.RAW, DataClass.BUSINESS)}
    assert a.rotate("t1") == 4
    b = make_store()
    assert {k: b.data_key(*k) for k in keys} == keys
    assert b.rewrap("t1") == 0  # already on the current version
    assert sorted({s for s, _, _ in b.sessions("t1")}) == ["s1", "s2"]


def test_holds_per_session_and_tenant(make_store: Factory) -> None:
    a, b = make_store(), make_store()
    a.data_key("t1", "s1", DataClass.RAW)
    a.place_hold("t1", "s1", reason="case 7", principal="legal")
    with pytest.raises(LegalHold, match="case 7"):
        b.shred("t1", "s1", (DataClass.RAW,), principal="ops", reason="x")
    assert [h.session_id for h in b.holds("t1")] == ["s1"]
    assert b.hold_on("t1", "s2") is None
    released = b.release_hold("t1", "s1")
    assert released is not None and released.reason == "case 7"
    assert b.holds("t1") == []


def test_the_redis_store_holds_no_key_in_the_clear(redis_client: redis.Redis,
                                                   redis_prefix: str, tmp_path: Path) -> None:
    store = RedisKeyStore(redis_client, TenantKeys(tmp_path), prefix=redis_prefix)
    key = store.data_key("t1", "s1", DataClass.SURFACE)
    dump = b"".join(
        json.dumps({k.decode(): v.decode() for k, v in redis_client.hgetall(name).items()}
                   ).encode()
        for name in redis_client.scan_iter(match=f"{redis_prefix}*")
        if redis_client.type(name) == b"hash")
    assert base64.b64encode(key) not in dump and key not in dump
    # a node without the tenant key cannot open it: the key reads as missing
    other = RedisKeyStore(redis_client, TenantKeys(tmp_path / "none", create=False),
                          prefix=redis_prefix)
    assert other.lookup("t1", "s1", DataClass.SURFACE).state is KeyState.MISSING


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["file", "redis"])
def make_cached(request: pytest.FixtureRequest, tmp_path: Path
                ) -> Callable[..., KeyStore]:
    """Stores with the default lookup cache (2 s feed checks) on a clock the test moves."""
    if request.param == "file":
        return lambda **kw: FileKeyStore(tmp_path / "keys", **kw)
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("redis_prefix")
    kek_dir = tmp_path / "tenant-keys"
    return lambda **kw: RedisKeyStore(client, TenantKeys(kek_dir), prefix=prefix, **kw)


def test_a_cached_key_is_read_once_until_a_shred_elsewhere_reaches_the_feed(
        make_cached: Callable[..., KeyStore]) -> None:
    clock = _Clock()
    a, b = make_cached(), make_cached(monotonic=clock)
    key = a.data_key("t1", "s1", DataClass.SURFACE)
    reads: list[str] = []
    backend = b._lookup

    def counted(tenant: str, session_id: str, cls: DataClass) -> object:
        reads.append(session_id)
        return backend(tenant, session_id, cls)
    b._lookup = counted  # type: ignore[method-assign]
    for _ in range(3):  # cached past the feed interval: the key store is not read again
        assert b.lookup("t1", "s1", DataClass.SURFACE).key == key
        clock.t += 5
    assert reads == ["s1"]
    a.shred("t1", "s1", (DataClass.SURFACE,), principal="ops", reason="erasure")
    clock.t += 2.0  # the next feed check names s1: the key is gone from b's cache
    found = b.lookup("t1", "s1", DataClass.SURFACE)
    assert found.state is KeyState.SHREDDED and found.key is None
    assert reads == ["s1", "s1"]


def test_a_missing_key_is_asked_again_after_the_feed_interval(
        make_cached: Callable[..., KeyStore]) -> None:
    clock = _Clock()
    a, b = make_cached(), make_cached(monotonic=clock)
    assert b.lookup("t1", "s2", DataClass.RAW).state is KeyState.MISSING
    key = a.data_key("t1", "s2", DataClass.RAW)  # a writer creates it meanwhile
    clock.t += 2.0
    assert b.lookup("t1", "s2", DataClass.RAW).key == key


def test_the_lookup_cache_is_bounded(make_cached: Callable[..., KeyStore]) -> None:
    b = make_cached(cache_entries=2)
    for sid in ("s1", "s2", "s3"):
        b.data_key("t1", sid, DataClass.RAW)
    assert len(b._cache) == 2 and ("t1", "s1", DataClass.RAW) not in b._cache


def test_a_key_created_without_a_read_back_is_the_stored_one_and_shreds(
        make_store: Factory) -> None:
    a = make_store()
    key = a.data_key("t1", "new", DataClass.SURFACE)  # created here: no read-back
    b = make_store()  # another node unwraps what was stored
    assert b.lookup("t1", "new", DataClass.SURFACE).key == key
    a.shred("t1", "new", (DataClass.SURFACE,), principal="ops", reason="erasure")
    for store in (a, b, make_store()):
        assert store.lookup("t1", "new", DataClass.SURFACE).state is KeyState.SHREDDED
        with pytest.raises(ContentKeyShredded):
            store.data_key("t1", "new", DataClass.SURFACE)


def test_a_shred_racing_a_key_creation_wins(make_store: Factory) -> None:
    # The shredder ran after the creator's tombstone check and before its key was in
    # place: it found no key and left its tombstone. The creator must not use its key.
    store = make_store()
    shredder = make_store()
    put = store._put_if_absent

    def racing(tenant: str, session_id: str, cls: DataClass, record: dict[str, Any]
               ) -> dict[str, Any]:
        shredder.shred(tenant, session_id, (cls,), principal="ops", reason="race")
        return put(tenant, session_id, cls, record)

    store._put_if_absent = racing  # type: ignore[method-assign]
    with pytest.raises(ContentKeyShredded):
        store.data_key("t1", "racy", DataClass.RAW)
    assert make_store().lookup("t1", "racy", DataClass.RAW).state is KeyState.SHREDDED


def _opens(store: KeyStore, tenant: str, session_id: str, cls: DataClass,
           record: dict[str, Any]) -> bytes | None:
    """The data key a copied record opens with every tenant key version ``store`` holds
    (None: none opens it) — what someone holding an old copy could do."""
    from sessionstream.core.errors import MovedCiphertext
    from sessionstream.governance.crypto import unwrap, wrap_ad

    ring = store.tenant_keys.ring(tenant, fresh=True)
    assert ring is not None
    for kek in ring.versions.values():
        try:
            return unwrap(kek, base64.b64decode(record["nonce"]),
                          base64.b64decode(record["wrapped"]),
                          wrap_ad(tenant, session_id, cls.value, int(record["kek"])))
        except MovedCiphertext:
            continue
    return None


def test_retire_makes_an_old_copy_of_a_shredded_key_open_nothing(make_store: Factory) -> None:
    a = make_store()
    gone = a.data_key("t1", "gone", DataClass.RAW)
    kept = a.data_key("t1", "kept", DataClass.RAW)
    copy = a._get("t1", "gone", DataClass.RAW)  # a backup taken before the delete
    assert copy is not None and _opens(a, "t1", "gone", DataClass.RAW, copy) == gone
    a.shred("t1", "gone", (DataClass.RAW,), principal="ops", reason="erasure")
    assert a.deletion_pending("t1") == [1]
    assert _opens(a, "t1", "gone", DataClass.RAW, copy) == gone  # shredded, not yet complete
    done = a.retire("t1", grace_s=0)
    assert (done.rotated, done.version, done.destroyed, done.pending, done.complete) == (
        True, 2, [1], [], True)
    assert done.rewrapped == 1  # "kept" only
    b = make_store()  # another node, after the retirement
    assert _opens(b, "t1", "gone", DataClass.RAW, copy) is None
    assert b.data_key("t1", "kept", DataClass.RAW) == kept
    assert b.deletion_pending("t1") == []
    again = b.retire("t1", grace_s=0)  # nothing shredded since: no new version
    assert (again.rotated, again.version, again.destroyed) == (False, 2, [])


def test_retire_waits_for_other_processes_to_see_the_new_version_before_rewrapping(
        make_store: Factory) -> None:
    a = make_store()
    a.data_key("t1", "s1", DataClass.RAW)
    a.shred("t1", "s1", (DataClass.RAW,), principal="ops", reason="erasure")
    waits: list[tuple[float, int]] = []
    ring_then = a.tenant_keys

    def sleep(seconds: float) -> None:  # the new version is on disk while it waits
        found = ring_then.ring("t1", fresh=True)
        assert found is not None
        waits.append((seconds, found.current))

    a.retire("t1", sleep=sleep)
    assert waits == [(2 * ring_then.RELOAD_S, 2)]


def test_a_rewrap_racing_a_shred_does_not_bring_the_key_back(make_store: Factory) -> None:
    a = make_store()
    a.data_key("t1", "s1", DataClass.RAW)
    a.rotate("t1")
    record = a._get("t1", "s1", DataClass.RAW)
    assert record is not None
    a.shred("t1", "s1", (DataClass.RAW,), principal="ops", reason="erasure")
    assert a._replace_live("t1", "s1", DataClass.RAW, record) is False
    assert a._get("t1", "s1", DataClass.RAW) is None


def test_a_ring_from_the_environment_reports_the_versions_to_remove(
        make_store: Factory, tmp_path: Path) -> None:
    ring = "1:" + base64.b64encode(b"k" * 32).decode()
    a = make_store()
    a.tenant_keys = TenantKeys(None, env={"t1": ring}, create=False)
    a.data_key("t1", "s1", DataClass.RAW)
    a.shred("t1", "s1", (DataClass.RAW,), principal="ops", reason="erasure")
    done = a.retire("t1", grace_s=0)
    assert (done.complete, done.pending, done.rotated, done.destroyed) == (False, [1], False, [])
    a.tenant_keys = TenantKeys(None, env={"t1": "2:" + base64.b64encode(b"n" * 32).decode()
                                         + "," + ring}, create=False)
    done = a.retire("t1", grace_s=0)  # the operator put version 2 in front on every node
    assert (done.complete, done.pending, done.version) == (False, [1], 2)
    a.tenant_keys = TenantKeys(None, env={"t1": "2:" + base64.b64encode(b"n" * 32).decode()},
                               create=False)
    assert a.deletion_pending("t1") == []  # and then removed version 1 everywhere


# ---------------------------------------------------------------- batches (issue 25)

PAIRS = [(f"b{i}", cls) for i in range(6) for cls in (DataClass.RAW, DataClass.SURFACE)]


def test_a_batch_creates_the_keys_every_node_then_reads(make_store: Factory) -> None:
    a, b = make_store(), make_store()
    first = a.data_key("t1", "b0", DataClass.RAW)  # one existed before the batch
    keys = a.data_keys("t1", PAIRS)
    assert sorted(keys) == sorted(PAIRS) and keys[("b0", DataClass.RAW)] == first
    assert len(set(keys.values())) == len(PAIRS)
    assert {p: b.data_key("t1", *p) for p in PAIRS} == keys
    assert b.data_keys("t1", PAIRS) == keys  # a batch over existing keys creates none
    assert sorted({s for s, _, _ in b.sessions("t1")}) == [f"b{i}" for i in range(6)]


def test_a_batch_leaves_out_a_shredded_key_and_does_not_revive_it(make_store: Factory
                                                                  ) -> None:
    a = make_store()
    a.shred("t1", "b1", (DataClass.RAW,), principal="ops", reason="erasure")
    keys = a.data_keys("t1", PAIRS)
    assert ("b1", DataClass.RAW) not in keys and len(keys) == len(PAIRS) - 1
    for store in (a, make_store()):
        assert store.lookup("t1", "b1", DataClass.RAW).state is KeyState.SHREDDED


def test_a_shred_racing_a_batch_creation_wins(make_store: Factory) -> None:
    store, shredder = make_store(), make_store()
    put = store._put_many_if_absent

    def racing(tenant: str, items: list[tuple[str, DataClass, dict[str, Any]]]
               ) -> list[dict[str, Any]]:
        shredder.shred(tenant, "b2", (DataClass.SURFACE,), principal="ops", reason="race")
        return put(tenant, items)

    store._put_many_if_absent = racing  # type: ignore[method-assign]
    keys = store.data_keys("t1", PAIRS)
    assert ("b2", DataClass.SURFACE) not in keys and len(keys) == len(PAIRS) - 1
    assert make_store().lookup("t1", "b2", DataClass.SURFACE).state is KeyState.SHREDDED


def test_two_nodes_racing_a_batch_get_the_same_keys(make_store: Factory) -> None:
    a, b = make_store(), make_store()
    put = a._put_many_if_absent

    def beaten(tenant: str, items: list[tuple[str, DataClass, dict[str, Any]]]
               ) -> list[dict[str, Any]]:
        b.data_keys(tenant, PAIRS[:4])  # b creates some between a's read and a's put
        return put(tenant, items)

    a._put_many_if_absent = beaten  # type: ignore[method-assign]
    mine = a.data_keys("t1", PAIRS)
    theirs = {p: make_store().data_key("t1", *p) for p in PAIRS}
    assert {p: a.data_key("t1", *p) for p in PAIRS} == theirs
    assert {p: k for p, k in mine.items()} == {p: theirs[p] for p in mine}


def _crashed_batch(root: Path) -> tuple[FileKeyStore, dict[tuple[str, DataClass], bytes]]:
    """A batch whose process died before its settler ran (the batch file is still in
    pending/, the key files were never synced)."""
    store = FileKeyStore(root, cache_ttl_s=0)
    store._settler.add = lambda batch, files: None  # type: ignore[method-assign]
    return store, store.data_keys("t1", PAIRS)


def test_keys_created_in_one_batch_all_survive_a_crash_and_reopen(tmp_path: Path) -> None:
    store, keys = _crashed_batch(tmp_path / "keys")
    files = {p: Path(store._file("t1", p[0], p[1], "key")) for p in PAIRS}
    # what the crash did to the unsynced key files: one lost its bytes, one its link
    files[PAIRS[0]].write_bytes(b"")
    files[PAIRS[1]].unlink()
    pending = tmp_path / "keys" / "data" / "t1" / "pending"
    assert len(list(pending.glob("*.keys"))) == 1
    reopened = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    assert {p: reopened.data_key("t1", *p) for p in PAIRS} == keys
    assert list(pending.glob("*.keys")) == []  # recovered and settled
    assert json.loads(files[PAIRS[0]].read_bytes())["wrapped"]


def test_a_torn_batch_file_gives_its_readable_prefix_never_a_corrupt_store(
        tmp_path: Path) -> None:
    store, keys = _crashed_batch(tmp_path / "keys")
    for p in PAIRS:  # the crash lost every unsynced key file
        Path(store._file("t1", p[0], p[1], "key")).unlink()
    [batch] = (tmp_path / "keys" / "data" / "t1" / "pending").glob("*.keys")
    raw = batch.read_bytes()
    cut = raw.index(b"\n", raw.index(b"\n") + 1) + 1 + 40  # two records and a torn third
    batch.write_bytes(raw[:cut])
    reopened = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    assert [reopened.lookup("t1", *p).key for p in PAIRS[:2]] == [keys[p] for p in PAIRS[:2]]
    for p in PAIRS[2:]:  # never acknowledged durable: missing, and made anew on use
        assert reopened.lookup("t1", *p).state is KeyState.MISSING
    again = reopened.data_keys("t1", PAIRS)
    assert sorted(again) == sorted(PAIRS)


def test_a_key_shredded_after_its_batch_stays_shredded_after_a_crash(tmp_path: Path) -> None:
    store, keys = _crashed_batch(tmp_path / "keys")
    store.shred("t1", "b3", (DataClass.RAW,), principal="ops", reason="erasure")
    reopened = FileKeyStore(tmp_path / "keys", cache_ttl_s=0)
    assert reopened.lookup("t1", "b3", DataClass.RAW).state is KeyState.SHREDDED
    assert not Path(reopened._file("t1", "b3", DataClass.RAW, "key")).exists()
    assert reopened.lookup("t1", "b3", DataClass.SURFACE).key == keys[("b3", DataClass.SURFACE)]


def test_the_settler_syncs_a_batch_and_removes_its_file(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys")
    store.data_keys("t1", PAIRS)
    store._settler.drain()
    assert list((tmp_path / "keys" / "data" / "t1" / "pending").glob("*")) == []
