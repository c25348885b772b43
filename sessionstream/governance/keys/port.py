"""The key store port: data keys wrapped by the tenant key, their tombstones, legal holds.

:class:`KeyStore` is what every backend shares: the lookup cache and the shred feed that
keeps it honest, creating data keys (one at a time or in a batch), shredding, holds, and
rotation (its steps: :mod:`~sessionstream.governance.keys.rotation`). A backend
implements the abstract storage methods only (``_get``, ``_put_if_absent``, ``_destroy``,
the shred feed, …): :mod:`~sessionstream.governance.keys.file_store` and
:mod:`~sessionstream.governance.keys.redis_store`, both held to one contract suite
(tests/integration/test_keystores.py). A new backend (a KMS, a database) subclasses
:class:`KeyStore` and joins that suite's fixture.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sessionstream.core.errors import ContentKeyShredded
from sessionstream.core.privacy import DataClass, KeyLookup, KeyState
from sessionstream.governance.crypto import new_key, unwrap, wrap, wrap_ad
from sessionstream.governance.keys import rotation
from sessionstream.governance.keys.records import Hold, Retirement, Shredded
from sessionstream.governance.keys.ring import (
    KeyConfigError,
    TenantKeyRing,
    TenantKeys,
    b64,
    unb64,
)

Clock = Callable[[], int]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class KeyStore(ABC):
    """Data keys (wrapped), their tombstones and legal holds; the ``ContentKeys`` port.

    Lookups are cached per process (bounded, least recently used out first). An active
    or shredded key stays cached until the tenant's *shred feed* names it: every shred
    appends (session, class) to the feed after destroying the key, and a lookup reads
    the feed's new entries when its last check is ``cache_ttl_s`` old (one stat or one
    LLEN per tenant, not two reads per session), so a shred done elsewhere reaches a
    running process within that time (at once in the process that shreds). A missing
    key is cached for ``cache_ttl_s`` only (a writer may create it meanwhile), and every
    entry is read again after ``max_age_s`` (a shredder that died between its destroy
    and its feed entry). ``cache_ttl_s=0``: the feed is checked on every lookup.
    """

    #: Lookups cached per store (the least recently used go first).
    CACHE_ENTRIES = 65_536

    def __init__(self, tenant_keys: TenantKeys, *, clock: Clock = now_ms,
                 cache_ttl_s: float = 2.0, max_age_s: float = 60.0,
                 cache_entries: int | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.tenant_keys = tenant_keys
        self._monotonic = monotonic
        #: This store's monotonic clock (what :meth:`data_key_until` answers in): the
        #: clock itself, so a caller checking a kept key calls no method of the store.
        self.monotonic = monotonic
        self._clock = clock
        self._ttl = cache_ttl_s
        self._max_age = max_age_s
        self._bound = cache_entries or self.CACHE_ENTRIES
        self._cache: OrderedDict[tuple[str, str, DataClass], tuple[float, KeyLookup]] = \
            OrderedDict()
        #: per tenant: (monotonic time of the last feed check, the feed position read)
        self._feed: dict[str, tuple[float, Any]] = {}
        #: lookups come from several threads (replay reads keys ahead of its flush)
        self._lock = threading.RLock()
        #: Bumped whenever this process drops cached lookups (a shred here, a new key, a
        #: rewrap): a caller holding a key from data_key_until() looks again then.
        self.generation = 0

    # another process -----------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """What a spawned process gets (the fleet's writers take the cipher along): the
        configuration, not this process's lock, cached keys or feed positions."""
        state = self.__dict__.copy()
        del state["_lock"]
        state["_cache"] = OrderedDict()
        state["_feed"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # backend ------------------------------------------------------------
    @abstractmethod
    def _get(self, tenant: str, session_id: str, cls: DataClass) -> dict[str, Any] | None: ...

    @abstractmethod
    def _put_if_absent(self, tenant: str, session_id: str, cls: DataClass,
                       record: dict[str, Any]) -> dict[str, Any]: ...

    @abstractmethod
    def _replace(self, tenant: str, session_id: str, cls: DataClass,
                 record: dict[str, Any]) -> None: ...

    @abstractmethod
    def _tombstone(self, tenant: str, session_id: str, cls: DataClass) -> dict[str, Any] | None:
        ...

    @abstractmethod
    def _destroy(self, tenant: str, session_id: str, cls: DataClass,
                 tombstone: dict[str, Any]) -> bool:
        """Write the tombstone, then delete the wrapped key; True if a key existed."""

    @abstractmethod
    def _replace_live(self, tenant: str, session_id: str, cls: DataClass,
                      record: dict[str, Any]) -> bool:
        """Replace the wrapped key only while it exists and is not shredded (a rewrap
        racing a shred must not bring the destroyed key back); True if replaced."""

    @abstractmethod
    def _mark_shredded(self, tenant: str, kek_version: int) -> None:
        """Raise the tenant's *shred mark* to ``kek_version`` (it never goes down): the
        highest tenant key version that ever wrapped a destroyed data key."""

    @abstractmethod
    def _shred_mark(self, tenant: str) -> int:
        """The tenant's shred mark (0: nothing shredded since marks were kept)."""

    @abstractmethod
    def _announce(self, tenant: str, session_id: str, cls: DataClass) -> None:
        """Append (session, class) to the tenant's shred feed (``_destroy`` does it too,
        after the key is gone)."""

    @abstractmethod
    def _shreds_since(self, tenant: str, position: Any) -> tuple[Any, list[tuple[str, str]]]:
        """The shred feed of ``tenant`` past ``position`` (None: from its current end):
        its new position and the (session, class value) shredded since. A feed that
        was reset (shorter than ``position``) answers ``position`` None: the caller
        drops every cached key of the tenant."""

    @abstractmethod
    def _records(self, tenant: str) -> Iterator[tuple[str, DataClass, dict[str, Any]]]: ...

    @abstractmethod
    def _hold_records(self, tenant: str) -> dict[str, dict[str, Any]]: ...

    @abstractmethod
    def _set_hold(self, tenant: str, scope: str, record: dict[str, Any] | None) -> None: ...

    # ContentKeys ----------------------------------------------------------
    def lookup(self, tenant: str, session_id: str, data_class: DataClass) -> KeyLookup:
        with self._lock:
            now = self._monotonic()
            self._follow_shreds(tenant, now)
            ck = (tenant, session_id, data_class)
            hit = self._cache.get(ck)
            if hit is not None:
                at, found = hit
                age = now - at
                if age < self._max_age and (found.state is not KeyState.MISSING
                                            or age < self._ttl):
                    self._cache.move_to_end(ck)
                    return found
            found = self._lookup(tenant, session_id, data_class)
            self._remember(ck, now, found)
            return found

    def lookup_until(self, tenant: str, session_id: str,
                     data_class: DataClass) -> tuple[KeyLookup, float]:
        """``lookup``, and until when (this store's monotonic clock) the answer may be
        reused without asking again, as long as :meth:`cache_epoch` stays the same: an
        active or shredded key until its cache entry is ``max_age_s`` old; a missing one
        not after now (a writer may create it any time)."""
        with self._lock:
            found = self.lookup(tenant, session_id, data_class)
            at = self._cache[(tenant, session_id, data_class)][0]  # just used: the newest
            if found.state is KeyState.MISSING:
                return found, self._monotonic()
            return found, at + self._max_age

    def cache_epoch(self, tenant: str) -> tuple[int, float]:
        """(epoch, now): the tenant's shred feed followed (at most once per
        ``cache_ttl_s``, as a lookup does), then :attr:`generation` (it changes whenever
        a key answered before may be stale: a shred the feed names or done here, a reset
        feed, a new key, a rewrap) and this store's monotonic time. A caller that keeps
        answers of :meth:`lookup_until` across calls drops them all when the epoch
        changed, and each one once ``now`` reaches its time (the native fold does)."""
        with self._lock:
            now = self._monotonic()
            self._follow_shreds(tenant, now)
            return self.generation, now

    def data_key_until(self, tenant: str, session_id: str, data_class: DataClass
                       ) -> tuple[bytes, float]:
        """:meth:`data_key`, and the time (this store's monotonic clock, see
        :meth:`monotonic`) before which the same call answers the same unless
        :attr:`generation` changes: the tenant's next shred-feed check or the entry's
        re-read, whichever comes first (the writer keeps the key that long rather than
        asking per event; a shred reaches it as soon as it would reach this store)."""
        with self._lock:
            key = self.data_key(tenant, session_id, data_class)
            hit = self._cache.get((tenant, session_id, data_class))
            seen = self._feed.get(tenant)
            if hit is None or seen is None:
                return key, float("-inf")
            return key, min(hit[0] + self._max_age, seen[0] + self._ttl)

    def _follow_shreds(self, tenant: str, now: float) -> None:
        """Drop the cached keys the tenant's shred feed names since the last check
        (at most one check per ``cache_ttl_s``)."""
        seen = self._feed.get(tenant)
        if seen is not None and now - seen[0] < self._ttl:
            return
        if seen is None:  # first use: start at the feed's end (nothing cached yet)
            position, _ = self._shreds_since(tenant, None)
            self._feed[tenant] = (now, position)
            return
        position, shredded = self._shreds_since(tenant, seen[1])
        if position is None:  # the feed was reset: nothing cached of the tenant is trusted
            self.generation += 1
            for ck in [k for k in self._cache if k[0] == tenant]:
                del self._cache[ck]
            position, _ = self._shreds_since(tenant, None)
        if shredded:
            self.generation += 1
        for session_id, cls in shredded:
            for c in DataClass:
                if c.value == cls:
                    self._cache.pop((tenant, session_id, c), None)
        self._feed[tenant] = (now, position)

    def _lookup(self, tenant: str, session_id: str, cls: DataClass) -> KeyLookup:
        tomb = self._tombstone(tenant, session_id, cls)
        return self._answer(tenant, session_id, cls, tomb,
                            None if tomb is not None else self._get(tenant, session_id, cls))

    def _answer(self, tenant: str, session_id: str, cls: DataClass,
                tomb: dict[str, Any] | None, record: dict[str, Any] | None) -> KeyLookup:
        """The lookup answered by a tombstone and a stored record (either may be None)."""
        if tomb is not None:
            return KeyLookup(KeyState.SHREDDED, None, int(tomb.get("at", 0)))
        if record is None:
            return KeyLookup(KeyState.MISSING)
        ring = self.tenant_keys.ring(tenant)
        version = int(record["kek"])
        if ring is not None and version not in ring.versions:  # rotated elsewhere just now?
            ring = self.tenant_keys.ring(tenant, fresh=True)
        if ring is None or version not in ring.versions:
            return KeyLookup(KeyState.MISSING)
        key = unwrap(ring.versions[version], unb64(record["nonce"], "data key nonce"),
                     unb64(record["wrapped"], "wrapped data key"),
                     wrap_ad(tenant, session_id, cls.value, version))
        return KeyLookup(KeyState.ACTIVE, key)

    def data_key(self, tenant: str, session_id: str, data_class: DataClass) -> bytes:
        found = self.lookup(tenant, session_id, data_class)
        if found.state is KeyState.ACTIVE and found.key is not None:
            return found.key
        if found.state is KeyState.SHREDDED:
            raise ContentKeyShredded(tenant, session_id, data_class.value)
        ring = self.tenant_keys.ring(tenant, create=True)
        if ring is None:
            raise KeyConfigError(
                f"no tenant key for tenant {tenant!r} on this node: give every node the same "
                "key ring (the tenant key setting, or the tenant's key file under the key "
                "directory; see docs/operations.md, 'Key hierarchy')"
            )
        if self._tombstone(tenant, session_id, data_class) is not None:
            raise ContentKeyShredded(tenant, session_id, data_class.value)
        key = new_key()
        nonce, wrapped = wrap(ring.versions[ring.current], key,
                              wrap_ad(tenant, session_id, data_class.value, ring.current))
        record = {"kek": ring.current, "nonce": b64(nonce), "wrapped": b64(wrapped),
                  "created": self._clock()}
        stored = self._put_if_absent(tenant, session_id, data_class, record)
        ck = (tenant, session_id, data_class)
        with self._lock:
            self.generation += 1
            self._cache.pop(ck, None)
        if stored.get("nonce") != record["nonce"] or stored.get("wrapped") != record["wrapped"]:
            found = self.lookup(tenant, session_id, data_class)  # the winner of a race
            if found.key is None:
                raise ContentKeyShredded(tenant, session_id, data_class.value)
            return found.key
        # This call created the key: it is `key` (no read-back and unwrap). A shred that
        # ran before the key file was in place found nothing to destroy but left its
        # tombstone, which this check sees (as the lookup it replaces did): the key is
        # then never used, and every lookup answers shredded.
        if self._tombstone(tenant, session_id, data_class) is not None:
            raise ContentKeyShredded(tenant, session_id, data_class.value)
        with self._lock:
            self._remember(ck, self._monotonic(), KeyLookup(KeyState.ACTIVE, key))
        return key

    def data_keys(self, tenant: str, pairs: Iterable[tuple[str, DataClass]]
                  ) -> dict[tuple[str, DataClass], bytes]:
        """:meth:`data_key` of many (session, class) pairs at once, creating the missing
        ones in one batch (the file store: one fsync for the batch; the Redis store: one
        round trip to read, one to create), and caching them as ``data_key`` does. The
        answer holds the active keys; a shredded pair is left out (``data_key`` raises
        for it), so is one this call could not settle (asked again one by one)."""
        wanted = list(dict.fromkeys(pairs))
        out: dict[tuple[str, DataClass], bytes] = {}
        todo: list[tuple[str, DataClass]] = []
        with self._lock:
            now = self._monotonic()
            self._follow_shreds(tenant, now)
            for sid, cls in wanted:
                hit = self._cache.get((tenant, sid, cls))
                if hit is not None:  # a missing one is read again: it is to be made
                    at, found = hit
                    if now - at < self._max_age and found.state is not KeyState.MISSING:
                        self._cache.move_to_end((tenant, sid, cls))
                        if found.key is not None:
                            out[(sid, cls)] = found.key
                        continue
                todo.append((sid, cls))
        if not todo:
            return out
        stored = self._get_many(tenant, todo)
        missing: list[tuple[str, DataClass]] = []
        with self._lock:
            now = self._monotonic()
            for pair in todo:
                tomb, record = stored[pair]
                found = self._answer(tenant, pair[0], pair[1], tomb, record)
                self._remember((tenant, *pair), now, found)
                if found.key is not None:
                    out[pair] = found.key
                elif found.state is KeyState.MISSING and tomb is None and record is None:
                    missing.append(pair)
        if missing:
            out.update(self._create_many(tenant, missing))
        return out

    def _create_many(self, tenant: str, pairs: list[tuple[str, DataClass]]
                     ) -> dict[tuple[str, DataClass], bytes]:
        """New data keys for ``pairs`` (none stored, none shredded when read), stored in
        one batch; the ones this call created or another creator won (read back)."""
        ring = self.tenant_keys.ring(tenant, create=True)
        if ring is None:
            return {}  # data_key raises the error naming the setting, pair by pair
        made: dict[tuple[str, DataClass], tuple[bytes, dict[str, Any]]] = {}
        for sid, cls in pairs:
            key = new_key()
            nonce, wrapped = wrap(ring.versions[ring.current], key,
                                  wrap_ad(tenant, sid, cls.value, ring.current))
            made[(sid, cls)] = (key, {"kek": ring.current, "nonce": b64(nonce),
                                      "wrapped": b64(wrapped), "created": self._clock()})
        stored = self._put_many_if_absent(tenant, [(sid, cls, rec)
                                                   for (sid, cls), (_, rec) in made.items()])
        with self._lock:
            self.generation += 1
            for sid, cls in pairs:
                self._cache.pop((tenant, sid, cls), None)
        # As in data_key: a shred that ran before the keys were in place left its
        # tombstone; those keys are never used.
        shredded = self._tombstoned(tenant, pairs)
        out: dict[tuple[str, DataClass], bytes] = {}
        with self._lock:
            now = self._monotonic()
            for (pair, (key, record)), kept in zip(made.items(), stored, strict=True):
                if pair in shredded:
                    continue
                if (kept.get("nonce"), kept.get("wrapped")) != (record["nonce"],
                                                                 record["wrapped"]):
                    continue  # another creator won: looked up on its first use
                self._remember((tenant, *pair), now, KeyLookup(KeyState.ACTIVE, key))
                out[pair] = key
        return out

    def _get_many(self, tenant: str, pairs: list[tuple[str, DataClass]]
                  ) -> dict[tuple[str, DataClass], tuple[dict[str, Any] | None,
                                                        dict[str, Any] | None]]:
        """(tombstone, record) of each pair (the record is not read under a tombstone);
        a backend reads them in one go where it can."""
        out: dict[tuple[str, DataClass], tuple[dict[str, Any] | None,
                                               dict[str, Any] | None]] = {}
        for sid, cls in pairs:
            tomb = self._tombstone(tenant, sid, cls)
            out[(sid, cls)] = (tomb, None if tomb is not None else self._get(tenant, sid, cls))
        return out

    def _put_many_if_absent(self, tenant: str,
                            items: list[tuple[str, DataClass, dict[str, Any]]]
                            ) -> list[dict[str, Any]]:
        """``_put_if_absent`` of each item, in order (a backend stores them in one batch:
        every record is durable before this returns)."""
        return [self._put_if_absent(tenant, sid, cls, rec) for sid, cls, rec in items]

    def _tombstoned(self, tenant: str, pairs: list[tuple[str, DataClass]]
                    ) -> set[tuple[str, DataClass]]:
        """The pairs that have a tombstone."""
        return {(sid, cls) for sid, cls in pairs
                if self._tombstone(tenant, sid, cls) is not None}

    def _remember(self, ck: tuple[str, str, DataClass], at: float, found: KeyLookup) -> None:
        """Cache ``found`` for ``ck`` as of ``at``, the newest entry, within the bound
        (the oldest entries go first). The caller holds the lock."""
        self._cache[ck] = (at, found)
        self._cache.move_to_end(ck)
        while len(self._cache) > self._bound:
            self._cache.popitem(last=False)

    # governance -------------------------------------------------------------
    def created_at(self, tenant: str, session_id: str, cls: DataClass) -> int | None:
        record = self._get(tenant, session_id, cls)
        return None if record is None else int(record.get("created", 0))

    def shred(self, tenant: str, session_id: str, classes: tuple[DataClass, ...], *,
              principal: str, reason: str) -> list[Shredded]:
        """Destroy the session's data keys of ``classes`` (refused under a legal hold)."""
        from sessionstream.core.errors import LegalHold

        hold = self.hold_on(tenant, session_id)
        if hold is not None:
            raise LegalHold(hold.scope, hold.reason)
        at = self._clock()
        done = []
        for cls in classes:
            tomb: dict[str, Any] = {"at": at, "principal": principal, "reason": reason}
            if self._tombstone(tenant, session_id, cls) is None:
                record = self._get(tenant, session_id, cls)
                # The version that wraps it now is the newest that ever did (versions
                # only grow); None when the key never existed (nothing to retire).
                if record is not None:
                    tomb["kek"] = int(record["kek"])
                    self._mark_shredded(tenant, int(record["kek"]))
                self._destroy(tenant, session_id, cls, tomb)
                done.append(Shredded(tenant, session_id, cls, at, principal, reason))
            else:  # shredded before: tell the feed again (a shredder may have died
                self._announce(tenant, session_id, cls)  # between destroy and feed)
            self.generation += 1
            self._cache.pop((tenant, session_id, cls), None)
        return done

    def shredded(self, tenant: str, session_id: str) -> list[Shredded]:
        out = []
        for cls in DataClass:
            tomb = self._tombstone(tenant, session_id, cls)
            if tomb is not None:
                out.append(Shredded(tenant, session_id, cls, int(tomb.get("at", 0)),
                                    str(tomb.get("principal", "")), str(tomb.get("reason", ""))))
        return out

    def sessions(self, tenant: str) -> Iterator[tuple[str, DataClass, int]]:
        """(session, class, created ms) of every live data key of the tenant."""
        for session_id, cls, record in self._records(tenant):
            yield session_id, cls, int(record.get("created", 0))

    def rotate(self, tenant: str) -> int:
        """Rewrap every data key of ``tenant`` with a new tenant key version; the count."""
        return rotation.rewrap(self, tenant, self.tenant_keys.rotate(tenant))

    def rewrap(self, tenant: str, ring: TenantKeyRing | None = None) -> int:
        """Rewrap every live data key of ``tenant`` not on the ring's current version
        with it; the count. A key shredded meanwhile is left destroyed."""
        return rotation.rewrap(self, tenant, ring)

    def retire(self, tenant: str, *, grace_s: float | None = None,
               sleep: Callable[[float], None] = time.sleep) -> Retirement:
        """Complete the tenant's deletions: no copy of a destroyed data key opens again
        (:func:`~sessionstream.governance.keys.rotation.retire`)."""
        return rotation.retire(self, tenant, grace_s=grace_s, sleep=sleep)

    def deletion_pending(self, tenant: str) -> list[int]:
        """The tenant key versions this node still holds that wrapped a destroyed data
        key (empty: every deletion of the tenant is complete here)."""
        ring = self.tenant_keys.ring(tenant, fresh=True)
        mark = self._shred_mark(tenant)
        return [] if ring is None else sorted(v for v in ring.versions if v <= mark)

    def drop_cached(self) -> None:
        """Forget every cached lookup (a rewrap changed what the store holds)."""
        with self._lock:
            self.generation += 1
            self._cache.clear()

    # legal holds --------------------------------------------------------------
    def holds(self, tenant: str) -> list[Hold]:
        return [Hold(tenant, r.get("session_id"), str(r.get("reason", "")),
                     str(r.get("principal", "")), int(r.get("at", 0)))
                for r in self._hold_records(tenant).values()]

    def hold_on(self, tenant: str, session_id: str | None) -> Hold | None:
        """The hold that applies to the session (its own, else the tenant's), if any."""
        found = self._hold_records(tenant)
        for scope in ([f"session:{session_id}"] if session_id else []) + ["tenant"]:
            r = found.get(scope)
            if r is not None:
                return Hold(tenant, r.get("session_id"), str(r.get("reason", "")),
                            str(r.get("principal", "")), int(r.get("at", 0)))
        return None

    def place_hold(self, tenant: str, session_id: str | None, *, reason: str,
                   principal: str) -> Hold:
        hold = Hold(tenant, session_id, reason, principal, self._clock())
        self._set_hold(tenant, f"session:{session_id}" if session_id else "tenant",
                       hold.to_json())
        return hold

    def release_hold(self, tenant: str, session_id: str | None) -> Hold | None:
        scope = f"session:{session_id}" if session_id else "tenant"
        r = self._hold_records(tenant).get(scope)
        if r is None:
            return None
        self._set_hold(tenant, scope, None)
        return Hold(tenant, r.get("session_id"), str(r.get("reason", "")),
                    str(r.get("principal", "")), int(r.get("at", 0)))
