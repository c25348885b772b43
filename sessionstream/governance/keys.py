"""The key hierarchy: tenant key-encryption keys and per-session, per-class data keys.

::

    tenant key ring (KEK, versioned)          <tenant key dir>/<tenant>/kek.json or env
      └── data key (tenant, session, class)   random 256-bit, stored only wrapped by the KEK
            └── sealed content of that session and class (AES-256-GCM, crypto.py)

Two stores implement the core's ``ContentKeys`` port with the same behaviour (one
contract test suite runs over both):

* :class:`FileKeyStore`: wrapped data keys as files under the state directory (0600,
  created atomically: two processes asking for the same new key get the same one). The
  default of the local stack; its tenant key is created on first use.
* :class:`RedisKeyStore`: wrapped data keys in Redis (``<prefix>:{<tenant>/<session>}:dkeys``),
  for a fleet of nodes; each node gets the tenant key from a file or the environment —
  never from Redis, so a Redis dump alone opens nothing.

Shredding a data key deletes the wrapped key and leaves a tombstone (when, by whom,
why, the tenant key version that wrapped it) so readers can say *deleted* rather than
*missing*, and raises the tenant's *shred mark* to that version. A copy of the wrapped
key taken before (a file, an AOF, an RDB, a backup) still opens with that version, so a
deletion is complete only when :meth:`KeyStore.retire` has destroyed every version up to
the mark (rotate if needed, wait for other processes to see the new version, rewrap the
live keys, drop the old versions): the completion point, docs/operations.md "When a
deletion is complete". Rotating the tenant key rewraps every data key with the new
version; the events in Kafka are not touched. The tenant key rings live apart from the
wrapped data keys (``TenantKeys``: a directory per tenant outside the key dir, or the
environment); every key directory is 0700 and every key file 0600. Legal holds
live in the same store. Unwrapped keys are cached per process until the tenant's shred
feed names them (checked every ``cache_ttl_s``): a shred done elsewhere reaches a
running process within that time (at once in the process that shreds).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import itertools
import json
import os
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessionstream.core.errors import ContentKeyShredded, SealedContentError
from sessionstream.core.files import create_if_absent, make_private_dirs, write_atomically
from sessionstream.core.privacy import DataClass, KeyLookup, KeyState
from sessionstream.core.rows import KeySpace
from sessionstream.governance.crypto import KEY_BYTES, new_key, unwrap, wrap, wrap_ad

Clock = Callable[[], int]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise SealedContentError(f"{what} is not base64") from None


class KeyConfigError(SealedContentError):
    """A tenant key file or variable is malformed; the message says where and how to fix."""


# ------------------------------------------------------------------ tenant keys


@dataclass(frozen=True)
class TenantKeyRing:
    """The versions of one tenant's key-encryption key; ``current`` wraps new data keys.

    Versions only grow (a rotation adds ``max + 1``), so a data key destroyed while it
    was wrapped by version ``v`` can only ever have been wrapped by versions up to ``v``:
    destroying those versions (:meth:`KeyStore.retire`) makes every old copy of it inert.
    """

    current: int
    versions: Mapping[int, bytes]

    def __post_init__(self) -> None:
        if self.current not in self.versions:
            raise KeyConfigError(f"tenant key version {self.current} is not in the ring")
        for v, key in self.versions.items():
            if len(key) != KEY_BYTES:
                raise KeyConfigError(f"tenant key version {v} is {len(key)} bytes, need 32")

    def to_json(self) -> dict[str, Any]:
        return {"current": self.current,
                "keys": {str(v): _b64(k) for v, k in sorted(self.versions.items())}}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> TenantKeyRing:
        try:
            versions = {int(v): _unb64(k, f"{where} key {v}") for v, k in obj["keys"].items()}
            return cls(int(obj["current"]), versions)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise KeyConfigError(
                f"{where} is not a tenant key file ({{\"current\": N, \"keys\": "
                f"{{\"N\": base64}}}}): {exc}"
            ) from None

    @classmethod
    def from_env_value(cls, value: str, name: str) -> TenantKeyRing:
        """``<version>:<base64>[,<version>:<base64>…]``; the first is current."""
        versions: dict[int, bytes] = {}
        first = None
        for item in value.split(","):
            version, sep, b64 = item.strip().partition(":")
            if not sep or not version.isdigit():
                raise KeyConfigError(
                    f"{name} must be '<version>:<base64 of 32 bytes>[,…]', e.g. '1:…'"
                )
            versions[int(version)] = _unb64(b64, f"{name} version {version}")
            first = int(version) if first is None else first
        if first is None:
            raise KeyConfigError(f"{name} is empty")
        return cls(first, versions)

    def rotated(self) -> TenantKeyRing:
        nxt = max(self.versions) + 1
        return TenantKeyRing(nxt, {**self.versions, nxt: new_key()})

    def only_current(self) -> TenantKeyRing:
        """The ring with every version but the current one destroyed."""
        return TenantKeyRing(self.current, {self.current: self.versions[self.current]})


def _write_private(path: Path, text: str) -> None:
    """Write ``path`` atomically (0600; directories made on the way 0700). A new inode
    replaces the old one: the old bytes are unlinked, not overwritten, so what was in the
    file is gone only as far as the file system forgets unlinked blocks. The design does
    not rely on it: a shred is complete when the tenant key versions that wrapped the key
    are destroyed (:meth:`KeyStore.retire`), not when a file is rewritten."""
    write_atomically(path, text.encode("utf-8"), private=True)


def _create_private(path: Path, text: str) -> bool:
    """Create ``path`` (0600) with ``text`` unless it exists; True if this call created it."""
    return create_if_absent(path, text.encode("utf-8"), private=True)


def _tighten(directory: Path) -> None:
    """Make an existing key directory 0700 (a tree made by an older release was 0755)."""
    try:
        if os.stat(directory).st_mode & 0o077:
            os.chmod(directory, 0o700)
    except FileNotFoundError:
        pass


class TenantKeys:
    """Where a node finds each tenant's key ring: a directory of files and/or variables.

    ``env`` maps tenant → ``<version>:<base64>,…`` (from ``Env.TENANT_KEY``); a tenant
    without one uses ``<directory>/<tenant>/kek.json`` (directories 0700, file 0600:
    one directory per tenant, so each can have its own owner), created on first use when
    ``create`` (the local stack) — otherwise a missing ring means this node cannot open
    that tenant's content (readers show it as unavailable). The directory is kept apart
    from the wrapped data keys (settings refuse one inside the other), so a copy of the
    data-key store alone opens nothing. ``legacy``: the directory of the older layout
    (``<key dir>/tenants/<tenant>.kek``, beside the data keys); a ring found only there
    is moved into ``directory`` on first use.

    A file-held ring is read again when the file changed, checked at most every
    ``reload_s`` (a rotation or retirement done by another process reaches this one
    within that time; ``keys retire`` waits that long before it rewraps).
    """

    #: Seconds between checks that a tenant's key file changed.
    RELOAD_S = 2.0

    def __init__(self, directory: Path | None, *, env: Mapping[str, str] | None = None,
                 create: bool = True, legacy: Path | None = None,
                 reload_s: float = RELOAD_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self._env = dict(env or {})
        self._create = create
        self._legacy = legacy
        self.reload_s = reload_s  # seconds between checks that a key file changed
        self._monotonic = monotonic
        #: tenant -> (ring, file signature, monotonic time of the last check)
        self._rings: dict[str, tuple[TenantKeyRing, Any, float]] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        state["_rings"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def path(self, tenant: str) -> Path | None:
        return None if self.directory is None else self.directory / tenant / "kek.json"

    def from_env(self, tenant: str) -> bool:
        """True when the tenant's ring comes from the environment (not a file here)."""
        return tenant in self._env

    def ring(self, tenant: str, *, create: bool | None = None,
             fresh: bool = False) -> TenantKeyRing | None:
        """The tenant's ring (None: this node has none); ``fresh`` reads the file now."""
        with self._lock:
            held = self._rings.get(tenant)
            now = self._monotonic()
            if held is not None and not fresh and now - held[2] < self.reload_s:
                return held[0]
            if tenant in self._env:
                ring = TenantKeyRing.from_env_value(self._env[tenant],
                                                    f"tenant key of {tenant!r}")
                self._rings[tenant] = (ring, None, float("inf"))
                return ring
            path = self.path(tenant)
            if path is None:
                return None
            signature = _signature(path)
            if held is not None and signature == held[1] and signature is not None:
                self._rings[tenant] = (held[0], signature, now)
                return held[0]
            loaded = self._load(tenant, path, self._create if create is None else create)
            if loaded is not None:
                self._rings[tenant] = (loaded, _signature(path), now)
            else:
                self._rings.pop(tenant, None)
            return loaded

    def _load(self, tenant: str, path: Path, create: bool) -> TenantKeyRing | None:
        ring = self._read(path)
        if ring is not None:
            return ring
        if self._legacy is not None:
            old = self._legacy / f"{tenant}.kek"
            found = self._read(old)
            if found is not None:  # the older layout kept it beside the data keys: move it
                _create_private(path, json.dumps(found.to_json()))
                old.unlink(missing_ok=True)
                return self._read(path)
        if not create:
            return None
        _create_private(path, json.dumps(TenantKeyRing(1, {1: new_key()}).to_json()))
        _tighten(path.parent.parent)
        return self._read(path)

    @staticmethod
    def _read(path: Path) -> TenantKeyRing | None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KeyConfigError(f"cannot read tenant key file {path}: {exc}") from None
        try:
            return TenantKeyRing.from_json(json.loads(text), str(path))
        except ValueError as exc:
            raise KeyConfigError(f"tenant key file {path} is not JSON: {exc}") from None

    def _store(self, tenant: str, ring: TenantKeyRing) -> None:
        path = self.path(tenant)
        if path is None:
            raise KeyConfigError(f"no tenant key directory for {tenant!r}")
        _write_private(path, json.dumps(ring.to_json()))
        with self._lock:
            self._rings[tenant] = (ring, _signature(path), self._monotonic())

    def rotate(self, tenant: str) -> TenantKeyRing:
        """A new current version for ``tenant`` (file-held rings only)."""
        if tenant in self._env:
            raise KeyConfigError(
                f"the tenant key of {tenant!r} comes from the environment: add a new version "
                "in front of the variable's value on every node, then run `keys rotate`"
            )
        ring = self.ring(tenant, create=True, fresh=True)
        if ring is None:
            raise KeyConfigError(f"no tenant key for {tenant!r} to rotate")
        new = ring.rotated()
        self._store(tenant, new)
        return new

    def destroy_old_versions(self, tenant: str) -> list[int]:
        """Keep only the current version of a file-held ring; the versions destroyed."""
        ring = self.ring(tenant, fresh=True)
        if ring is None or tenant in self._env:
            return []
        gone = sorted(v for v in ring.versions if v != ring.current)
        if gone:
            self._store(tenant, ring.only_current())
        return gone

    def forget(self, tenant: str) -> None:
        with self._lock:
            self._rings.pop(tenant, None)


def _signature(path: Path) -> Any:
    """What changes when a key file is replaced (a new inode) or rewritten."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


# ------------------------------------------------------------------- key stores


@dataclass(frozen=True)
class Shredded:
    """One destroyed data key: which, when, by whom, why."""

    tenant: str
    session_id: str
    data_class: DataClass
    at: int
    principal: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "session_id": self.session_id,
                "data_class": self.data_class.value, "at": self.at,
                "principal": self.principal, "reason": self.reason}


@dataclass(frozen=True)
class Hold:
    """A legal hold: on a session, or on the whole tenant (``session_id`` None)."""

    tenant: str
    session_id: str | None
    reason: str
    principal: str
    at: int

    @property
    def scope(self) -> str:
        return (f"session {self.session_id!r}" if self.session_id else "tenant") + \
            f" of tenant {self.tenant!r}"

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "session_id": self.session_id, "reason": self.reason,
                "principal": self.principal, "at": self.at}


@dataclass(frozen=True)
class Retirement:
    """What ``keys retire`` did for a tenant (see :meth:`KeyStore.retire`)."""

    tenant: str
    version: int  # the current tenant key version after it
    rewrapped: int  # live data keys rewrapped with it
    destroyed: list[int]  # tenant key versions destroyed
    shred_mark: int  # the highest version that ever wrapped a destroyed key
    pending: list[int]  # versions still held that did: not complete while non-empty
    rotated: bool  # a new version was made for it

    @property
    def complete(self) -> bool:
        return not self.pending

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "version": self.version, "rewrapped": self.rewrapped,
                "destroyed": self.destroyed, "shred_mark": self.shred_mark,
                "pending": self.pending, "rotated": self.rotated, "complete": self.complete}


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

    def __init__(self, tenant_keys: TenantKeys, *, clock: Clock = _now_ms,
                 cache_ttl_s: float = 2.0, max_age_s: float = 60.0,
                 cache_entries: int | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.tenant_keys = tenant_keys
        self._monotonic = monotonic
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

    def monotonic(self) -> float:
        """This store's monotonic clock (what :meth:`data_key_until` answers in)."""
        return self._monotonic()

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
        key = unwrap(ring.versions[version], _unb64(record["nonce"], "data key nonce"),
                     _unb64(record["wrapped"], "wrapped data key"),
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
        record = {"kek": ring.current, "nonce": _b64(nonce), "wrapped": _b64(wrapped),
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
            made[(sid, cls)] = (key, {"kek": ring.current, "nonce": _b64(nonce),
                                      "wrapped": _b64(wrapped), "created": self._clock()})
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
        ring = self.tenant_keys.rotate(tenant)
        return self.rewrap(tenant, ring)

    def rewrap(self, tenant: str, ring: TenantKeyRing | None = None) -> int:
        """Rewrap every live data key of ``tenant`` not on the ring's current version
        with it; the count. A key shredded meanwhile is left destroyed."""
        ring = ring or self.tenant_keys.ring(tenant)
        if ring is None:
            raise KeyConfigError(f"no tenant key for tenant {tenant!r} on this node")
        count = 0
        for session_id, cls, record in list(self._records(tenant)):
            version = int(record["kek"])
            if version == ring.current:
                continue
            if version not in ring.versions:
                raise KeyConfigError(
                    f"data key {session_id!r}/{cls.value} is wrapped by tenant key version "
                    f"{version}, which this node does not have: add it to the ring first"
                )
            key = unwrap(ring.versions[version], _unb64(record["nonce"], "nonce"),
                         _unb64(record["wrapped"], "wrapped key"),
                         wrap_ad(tenant, session_id, cls.value, version))
            nonce, wrapped = wrap(ring.versions[ring.current], key,
                                  wrap_ad(tenant, session_id, cls.value, ring.current))
            if self._replace_live(tenant, session_id, cls,
                                  {**record, "kek": ring.current, "nonce": _b64(nonce),
                                   "wrapped": _b64(wrapped)}):
                count += 1
        with self._lock:
            self.generation += 1
            self._cache.clear()
        return count

    def retire(self, tenant: str, *, grace_s: float | None = None,
               sleep: Callable[[float], None] = time.sleep) -> Retirement:
        """Complete the tenant's deletions: no copy of a destroyed data key opens again.

        Every shred raises the tenant's shred mark to the tenant key version that wrapped
        the key; any copy of it (a key file, an AOF, an RDB, a backup) is wrapped by a
        version up to the mark. So: if the current version is at or below the mark,
        rotate to a new one; wait ``grace_s`` (default: twice the ring reload interval)
        so every process wraps new data keys with it; rewrap every live data key with
        it; then destroy every older version of a file-held ring. A ring from the
        environment cannot be changed here: the versions to remove are reported
        (``pending``) and the deletion is complete once every node has dropped them.
        """
        ring = self.tenant_keys.ring(tenant, create=True, fresh=True)
        if ring is None:
            raise KeyConfigError(f"no tenant key for tenant {tenant!r} on this node")
        mark = self._shred_mark(tenant)
        rotated = False
        if ring.current <= mark:
            if self.tenant_keys.from_env(tenant):
                return Retirement(tenant, ring.current, 0, [], mark,
                                  sorted(v for v in ring.versions if v <= mark), False)
            ring = self.tenant_keys.rotate(tenant)
            rotated = True
            wait = 2 * self.tenant_keys.reload_s if grace_s is None else grace_s
            if wait > 0:
                sleep(wait)
        count = 0
        if len(ring.versions) > 1:  # one version: every live key is on it already
            count = self.rewrap(tenant, ring)
            # A writer that created a key with the old version during the first pass
            # (its ring not yet reloaded) is caught by a second one.
            count += self.rewrap(tenant, ring)
        destroyed = self.tenant_keys.destroy_old_versions(tenant)
        after = self.tenant_keys.ring(tenant, fresh=True) or ring
        pending = sorted(v for v in after.versions if v <= mark)
        return Retirement(tenant, after.current, count, destroyed, mark, pending, rotated)

    def deletion_pending(self, tenant: str) -> list[int]:
        """The tenant key versions this node still holds that wrapped a destroyed data
        key (empty: every deletion of the tenant is complete here)."""
        ring = self.tenant_keys.ring(tenant, fresh=True)
        mark = self._shred_mark(tenant)
        return [] if ring is None else sorted(v for v in ring.versions if v <= mark)

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


def _session_file(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


#: The directory (under a tenant's key directory) of batch files not yet settled.
PENDING = "pending"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_unsynced(directory: Path, target: str, data: bytes) -> bool:
    """Create ``target`` (0600) with ``data`` unless it exists, without a sync (a batch
    file holds the durable copy): written beside it, then linked, so a reader sees it
    whole or not at all. True if this call created it."""
    fd, tmp = _private_temp(directory)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.close(fd)
        fd = -1
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        return True
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(tmp)


_TEMP_NAMES = itertools.count()


def _private_temp(directory: Path) -> tuple[int, str]:
    """A new 0600 file in ``directory`` named ``.tmp-<pid>-<n>`` (open fd, path): what
    ``tempfile.mkstemp`` does, without its random-name machinery (the pid and a counter
    keep the names of live processes apart)."""
    while True:
        tmp = f"{directory}{os.sep}.tmp-{os.getpid()}-{next(_TEMP_NAMES)}"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                           | getattr(os, "O_CLOEXEC", 0), 0o600), tmp
        except FileExistsError:  # left by a process that died with this pid
            continue


def _batch_records(batch: Path) -> Iterator[tuple[str, DataClass, dict[str, Any]]]:
    """The records of a batch file up to its first unreadable line (a torn write)."""
    try:
        raw = batch.read_bytes()
    except FileNotFoundError:
        return
    for line in raw.split(b"\n"):
        try:
            obj = json.loads(line)
            record = obj["record"]
            sid, cls = str(record["session_id"]), DataClass(obj["class"])
            if not isinstance(record.get("wrapped"), str):
                return
        except (ValueError, TypeError, KeyError, AttributeError):
            return
        yield sid, cls, record


class _Settler:
    """Makes a batch's key files durable off the caller's path, then removes its batch
    file: one ``syncfs`` of the key directory's file system (Linux; it writes what the
    kernel would write back anyway, sooner), else an fsync per file. A daemon thread,
    started on first use; what it has not settled when the process ends is recovered
    by the next process (:meth:`FileKeyStore._recover`)."""

    #: Seconds a settle waits for more batches to share its sync.
    GATHER_S = 0.5

    def __init__(self) -> None:
        self._queue: list[tuple[Path, list[str]]] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, batch: Path, files: list[str]) -> None:
        with self._cond:
            self._queue.append((batch, files))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="key-settler",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def drain(self) -> None:
        """Settle everything queued now (tests; a clean shutdown)."""
        with self._cond:
            work, self._queue = self._queue, []
        self._settle_batches(work)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
            time.sleep(self.GATHER_S)
            self.drain()

    def _settle_batches(self, work: list[tuple[Path, list[str]]]) -> None:
        if not work:
            return
        try:
            self.settle([f for _, files in work for f in files])
        except OSError:
            return  # the batch files stay: the next process recovers from them
        for batch, _ in work:
            batch.unlink(missing_ok=True)

    @staticmethod
    def settle(files: list[str]) -> None:
        """Make ``files`` durable (a missing one is skipped: shredded meanwhile)."""
        if not files:
            return
        if _syncfs(os.path.dirname(files[0])):
            return
        for path in files:
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _syncfs(directory: str) -> bool:
    """``syncfs(2)`` on the file system holding ``directory``; False where it is not
    available (then the caller syncs file by file)."""
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return False
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        return bool(call(fd) == 0)
    finally:
        os.close(fd)


class FileKeyStore(KeyStore):
    """Wrapped data keys as 0600 files: ``<root>/<tenant>/<sha256(session)>.<class>.key``.

    The file holds the session id too (for rotation and retention, which walk the keys).
    """

    def __init__(self, root: Path, tenant_keys: TenantKeys | None = None, **kw: Any) -> None:
        self.root = Path(root)
        # Without rings given: beside the root, never under it (a copy of the data keys
        # must not carry the key that opens them); an older tree's are moved there.
        super().__init__(tenant_keys or TenantKeys(Path(f"{self.root}-tenant-keys"),
                                                   legacy=self.root / "tenants"), **kw)
        self._secured: set[str] = set()
        self._settler = _Settler()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_secured"] = set()  # the new process recovers what is pending, too
        state["_settler"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._settler = _Settler()

    def _secure(self, tenant: str) -> None:
        """Once per tenant and process: the key directories of an older tree to 0700,
        and the batches a crash left pending recovered (:meth:`_recover`)."""
        if tenant in self._secured:
            return
        for directory in (self.root, self.root / "data", self.root / "data" / tenant,
                          self.root / "holds"):
            _tighten(directory)
        if (self.root / "data" / tenant / PENDING).is_dir():
            with self._creating(tenant):
                self._recover(tenant)
        self._secured.add(tenant)

    # creating keys: one at a time, or a batch with one sync --------------------
    @contextlib.contextmanager
    def _creating(self, tenant: str) -> Iterator[None]:
        """The tenant's creation lock (flock, across processes): a new key's file is
        made by one creator at a time, so every batch record is its key's first one."""
        import fcntl

        base = self.root / "data" / tenant
        make_private_dirs(base)
        fd = os.open(base / ".create.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _put_many_if_absent(self, tenant: str,
                            items: list[tuple[str, DataClass, dict[str, Any]]]
                            ) -> list[dict[str, Any]]:
        """Store a batch of new keys with one sync: the records go to a batch file in
        ``pending/`` (written, fsynced, its directory fsynced: the keys are durable from
        here), then each key's own file is linked in place unsynced (readers see it whole
        or not at all). A settler thread syncs the file system and removes the batch
        file; after a crash, the next process to use the tenant restores from the batch
        files left what a key file lost (:meth:`_recover`)."""
        self._secure(tenant)
        base = self.root / "data" / tenant
        out: list[dict[str, Any]] = []
        with self._creating(tenant):
            new: list[tuple[int, str, DataClass, dict[str, Any]]] = []
            for sid, cls, record in items:
                there = self._read(self._file(tenant, sid, cls, "key"))
                out.append(there if there is not None else {**record, "session_id": sid})
                if there is None:
                    new.append((len(out) - 1, sid, cls, out[-1]))
            if not new:
                return out
            pending = base / PENDING
            make_private_dirs(pending)
            batch = pending / f"{time.time_ns()}-{os.getpid()}-{new_key().hex()[:8]}.keys"
            lines = b"".join(json.dumps({"class": cls.value, "record": rec}).encode() + b"\n"
                             for _, _, cls, rec in new)
            fd = os.open(batch, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                view = memoryview(lines)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(pending)
            made = []
            for i, sid, cls, rec in new:
                target = self._file(tenant, sid, cls, "key")
                if not _link_unsynced(base, target, json.dumps(rec).encode()):
                    out[i] = self._read(target) or rec  # an older release's creator won
                made.append(target)
        self._settler.add(batch, made)
        return out

    def _put_if_absent(self, tenant: str, session_id: str, cls: DataClass,
                       record: dict[str, Any]) -> dict[str, Any]:
        self._secure(tenant)
        path = self._path(tenant, session_id, cls, "key")
        mine = {**record, "session_id": session_id}
        with self._creating(tenant):
            if _create_private(path, json.dumps(mine)):
                return mine  # created by this call: what it wrote (no read-back)
        return self._read(path) or record

    def _recover(self, tenant: str) -> None:
        """Restore, from the batch files a crash left in ``pending/``, each key whose own
        file is missing or unreadable and that has no tombstone (a shred since stays a
        shred), synced; then sync the file system and remove those batch files. A torn
        batch file gives its readable prefix (each record is one whole line). The
        caller holds the creation lock."""
        pending = self.root / "data" / tenant / PENDING
        batches = sorted(pending.glob("*.keys"))
        if not batches:
            return
        made: list[str] = []
        for batch in batches:
            for sid, cls, record in _batch_records(batch):
                target = self._file(tenant, sid, cls, "key")
                made.append(target)
                if self._tombstone(tenant, sid, cls) is not None:
                    continue
                try:
                    there = self._read(target)
                except KeyConfigError:
                    there = None  # linked before the crash, its bytes never written
                if there is None or "wrapped" not in there:
                    _write_private(Path(target), json.dumps(record))
        _Settler.settle(made)
        for batch in batches:
            batch.unlink(missing_ok=True)

    def _path(self, tenant: str, session_id: str, cls: DataClass, suffix: str) -> Path:
        return Path(self._file(tenant, session_id, cls, suffix))

    def _file(self, tenant: str, session_id: str, cls: DataClass, suffix: str) -> str:
        """The path as text (a lookup reads two files: no pathlib objects on that path)."""
        return (f"{self.root}{os.sep}data{os.sep}{tenant}{os.sep}"
                f"{_session_file(session_id)}.{cls.value}.{suffix}")

    def _read(self, path: Path | str) -> dict[str, Any] | None:
        # os.open/os.read rather than open(): a lookup reads two small files, and the
        # file objects were half of its cost (18 against 9 us per read, measured)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KeyConfigError(f"key file {os.path.basename(path)} is unreadable: {exc}"
                                 ) from None
        try:
            chunks = []
            while chunk := os.read(fd, 65_536):
                chunks.append(chunk)
            value: dict[str, Any] = json.loads(b"".join(chunks))
            return value
        except (OSError, ValueError) as exc:
            raise KeyConfigError(f"key file {os.path.basename(path)} is unreadable: {exc}"
                                 ) from None
        finally:
            os.close(fd)

    def _get(self, tenant: str, session_id: str, cls: DataClass) -> dict[str, Any] | None:
        if tenant not in self._secured:
            self._secure(tenant)
        return self._read(self._file(tenant, session_id, cls, "key"))

    def _replace(self, tenant: str, session_id: str, cls: DataClass,
                 record: dict[str, Any]) -> None:
        _write_private(self._path(tenant, session_id, cls, "key"),
                       json.dumps({**record, "session_id": session_id}))

    def _replace_live(self, tenant: str, session_id: str, cls: DataClass,
                      record: dict[str, Any]) -> bool:
        # A shred writes its tombstone before it unlinks the key: a replace that lands
        # after that unlink finds the tombstone below and unlinks its own file.
        path = self._path(tenant, session_id, cls, "key")
        if not path.exists() or self._tombstone(tenant, session_id, cls) is not None:
            return False
        self._replace(tenant, session_id, cls, record)
        if self._tombstone(tenant, session_id, cls) is not None:
            path.unlink(missing_ok=True)
            return False
        return True

    def _mark_path(self, tenant: str) -> Path:
        return self.root / "data" / tenant / "shred-mark"

    def _mark_shredded(self, tenant: str, kek_version: int) -> None:
        import fcntl

        path = self._mark_path(tenant)
        make_private_dirs(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # two shredders: the higher version stays
            raw = os.pread(fd, 64, 0).strip()
            if kek_version > (int(raw) if raw.isdigit() else 0):
                data = str(kek_version).encode()
                os.pwrite(fd, data.ljust(20), 0)
                os.fsync(fd)
        finally:
            os.close(fd)  # releases the lock

    def _shred_mark(self, tenant: str) -> int:
        try:
            raw = self._mark_path(tenant).read_bytes().strip()
        except FileNotFoundError:
            return 0
        if not raw.isdigit():
            raise KeyConfigError(f"shred mark of tenant {tenant!r} is unreadable: {raw[:20]!r}")
        return int(raw)

    def _tombstone(self, tenant: str, session_id: str, cls: DataClass) -> dict[str, Any] | None:
        return self._read(self._file(tenant, session_id, cls, "shredded"))

    def _destroy(self, tenant: str, session_id: str, cls: DataClass,
                 tombstone: dict[str, Any]) -> bool:
        self._secure(tenant)
        _write_private(self._path(tenant, session_id, cls, "shredded"), json.dumps(tombstone))
        path = self._path(tenant, session_id, cls, "key")
        # Unlinked, not overwritten: a rewrite would be a new inode anyway, and blocks a
        # file system or an SSD keeps are out of this process's reach. The wrapped key's
        # copies stop opening when ``retire`` destroys the tenant key versions.
        try:
            path.unlink()
            existed = True
        except FileNotFoundError:
            existed = False
        self._announce(tenant, session_id, cls)
        return existed

    def _feed_path(self, tenant: str) -> Path:
        return self.root / "data" / tenant / "shreds.log"

    def _announce(self, tenant: str, session_id: str, cls: DataClass) -> None:
        """One JSON line per shred, appended (O_APPEND: a line is written whole)."""
        path = self._feed_path(tenant)
        make_private_dirs(path.parent)
        line = (json.dumps([session_id, cls.value]) + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _shreds_since(self, tenant: str, position: Any) -> tuple[Any, list[tuple[str, str]]]:
        path = self._feed_path(tenant)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if position is None or size == position:
            return size, []
        if size < position:
            return None, []
        with path.open("rb") as fh:
            fh.seek(position)
            raw = fh.read(size - position)
        end = raw.rfind(b"\n") + 1  # a line still being written is read next time
        out = []
        for line in raw[:end].splitlines():
            try:
                sid, cls = json.loads(line)
                out.append((str(sid), str(cls)))
            except (ValueError, TypeError):
                return None, []  # not a feed line: drop the tenant's cache
        return position + end, out

    def _records(self, tenant: str) -> Iterator[tuple[str, DataClass, dict[str, Any]]]:
        base = self.root / "data" / tenant
        if not base.is_dir():
            return
        for path in sorted(base.glob("*.key")):  # shreds.log and shred-mark do not match
            record = self._read(path)
            if record is None or "session_id" not in record:
                continue
            cls = DataClass(path.name.split(".")[1])
            yield str(record["session_id"]), cls, record

    def _holds_path(self, tenant: str) -> Path:
        return self.root / "holds" / f"{tenant}.json"

    def _hold_records(self, tenant: str) -> dict[str, dict[str, Any]]:
        return self._read(self._holds_path(tenant)) or {}

    def _set_hold(self, tenant: str, scope: str, record: dict[str, Any] | None) -> None:
        self._secure(tenant)
        holds = self._hold_records(tenant)
        if record is None:
            holds.pop(scope, None)
        else:
            holds[scope] = record
        _write_private(self._holds_path(tenant), json.dumps(holds))


#: Replace a wrapped key only while it is there and not shredded (one atomic step).
_REPLACE_LIVE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 and
   redis.call('HEXISTS', KEYS[1], ARGV[1] .. ':shredded') == 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
"""


class RedisKeyStore(KeyStore):
    """Wrapped data keys in Redis for a fleet; tenant keys from each node's file/env.

    ``<prefix>:{<tenant>/<session>}:dkeys`` (hash: ``<class>`` → wrapped key,
    ``<class>:shredded`` → tombstone), the tenant's key list ``<prefix>:{<tenant>}:dkeys``
    (a set of session ids, for rotation and retention), its shred feed
    ``<prefix>:{<tenant>}:dkeys:shreds`` (a list) and ``<prefix>:{<tenant>}:holds``.
    Purging a session's Redis rows keeps its ``dkeys`` hash: the tombstones are the proof.
    """

    def __init__(self, client: Any, tenant_keys: TenantKeys, *, prefix: str = "ss",
                 **kw: Any) -> None:
        self._r = client
        self._prefix = prefix
        super().__init__(tenant_keys, **kw)

    def _key(self, tenant: str, session_id: str) -> str:
        return KeySpace(tenant, self._prefix).data_keys(session_id)

    def _hget(self, tenant: str, session_id: str, field: str) -> dict[str, Any] | None:
        raw = self._r.hget(self._key(tenant, session_id), field)
        if raw is None:
            return None
        value: dict[str, Any] = json.loads(raw)
        return value

    def _get(self, tenant: str, session_id: str, cls: DataClass) -> dict[str, Any] | None:
        return self._hget(tenant, session_id, cls.value)

    def _put_if_absent(self, tenant: str, session_id: str, cls: DataClass,
                       record: dict[str, Any]) -> dict[str, Any]:
        self._r.hsetnx(self._key(tenant, session_id), cls.value, json.dumps(record))
        self._r.sadd(KeySpace(tenant, self._prefix).data_key_sessions(), session_id)
        return self._get(tenant, session_id, cls) or record

    def _get_many(self, tenant: str, pairs: list[tuple[str, DataClass]]
                  ) -> dict[tuple[str, DataClass], tuple[dict[str, Any] | None,
                                                        dict[str, Any] | None]]:
        """Every pair's key and tombstone in one round trip (a pipeline of HMGETs)."""
        pipe = self._r.pipeline(transaction=False)
        for sid, cls in pairs:
            pipe.hmget(self._key(tenant, sid), [f"{cls.value}:shredded", cls.value])
        out: dict[tuple[str, DataClass], tuple[dict[str, Any] | None,
                                               dict[str, Any] | None]] = {}
        for pair, (tomb, raw) in zip(pairs, pipe.execute(), strict=True):
            out[pair] = (None if tomb is None else json.loads(tomb),
                         None if raw is None or tomb is not None else json.loads(raw))
        return out

    def _put_many_if_absent(self, tenant: str,
                            items: list[tuple[str, DataClass, dict[str, Any]]]
                            ) -> list[dict[str, Any]]:
        """One round trip: HSETNX each, the tenant's key list, then each stored value
        (the winner's when another creator was first)."""
        pipe = self._r.pipeline(transaction=False)
        for sid, cls, record in items:
            pipe.hsetnx(self._key(tenant, sid), cls.value, json.dumps(record))
        pipe.sadd(KeySpace(tenant, self._prefix).data_key_sessions(),
                  *sorted({sid for sid, _, _ in items}))
        for sid, cls, _ in items:
            pipe.hget(self._key(tenant, sid), cls.value)
        stored = pipe.execute()[len(items) + 1:]
        return [record if raw is None else json.loads(raw)
                for (_, _, record), raw in zip(items, stored, strict=True)]

    def _tombstoned(self, tenant: str, pairs: list[tuple[str, DataClass]]
                    ) -> set[tuple[str, DataClass]]:
        pipe = self._r.pipeline(transaction=False)
        for sid, cls in pairs:
            pipe.hexists(self._key(tenant, sid), f"{cls.value}:shredded")
        return {pair for pair, there in zip(pairs, pipe.execute(), strict=True) if there}

    def _replace(self, tenant: str, session_id: str, cls: DataClass,
                 record: dict[str, Any]) -> None:
        self._r.hset(self._key(tenant, session_id), cls.value, json.dumps(record))

    def _replace_live(self, tenant: str, session_id: str, cls: DataClass,
                      record: dict[str, Any]) -> bool:
        return bool(self._r.eval(_REPLACE_LIVE, 1, self._key(tenant, session_id), cls.value,
                                 json.dumps(record)))

    def _mark_shredded(self, tenant: str, kek_version: int) -> None:
        self._r.zadd(KeySpace(tenant, self._prefix).data_key_mark(), {"kek": kek_version},
                     gt=True)

    def _shred_mark(self, tenant: str) -> int:
        score = self._r.zscore(KeySpace(tenant, self._prefix).data_key_mark(), "kek")
        return 0 if score is None else int(score)

    def _tombstone(self, tenant: str, session_id: str, cls: DataClass) -> dict[str, Any] | None:
        return self._hget(tenant, session_id, f"{cls.value}:shredded")

    def _destroy(self, tenant: str, session_id: str, cls: DataClass,
                 tombstone: dict[str, Any]) -> bool:
        key = self._key(tenant, session_id)
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(key, f"{cls.value}:shredded", json.dumps(tombstone))
        pipe.hdel(key, cls.value)
        pipe.rpush(KeySpace(tenant, self._prefix).data_key_shreds(),
                   json.dumps([session_id, cls.value]))
        return bool(pipe.execute()[1])

    def _announce(self, tenant: str, session_id: str, cls: DataClass) -> None:
        self._r.rpush(KeySpace(tenant, self._prefix).data_key_shreds(),
                      json.dumps([session_id, cls.value]))

    def _shreds_since(self, tenant: str, position: Any) -> tuple[Any, list[tuple[str, str]]]:
        feed = KeySpace(tenant, self._prefix).data_key_shreds()
        size = int(self._r.llen(feed))
        if position is None or size == position:
            return size, []
        if size < position:
            return None, []
        out = []
        for raw in self._r.lrange(feed, position, size - 1):
            try:
                sid, cls = json.loads(raw)
                out.append((str(sid), str(cls)))
            except (ValueError, TypeError):
                return None, []
        return size, out

    def _records(self, tenant: str) -> Iterator[tuple[str, DataClass, dict[str, Any]]]:
        for raw in sorted(self._r.smembers(KeySpace(tenant, self._prefix).data_key_sessions())):
            session_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            for cls in DataClass:
                record = self._get(tenant, session_id, cls)
                if record is not None:
                    yield session_id, cls, record

    def _hold_records(self, tenant: str) -> dict[str, dict[str, Any]]:
        raw = self._r.hgetall(KeySpace(tenant, self._prefix).holds())
        return {(k.decode() if isinstance(k, bytes) else k): json.loads(v)
                for k, v in raw.items()}

    def _set_hold(self, tenant: str, scope: str, record: dict[str, Any] | None) -> None:
        key = KeySpace(tenant, self._prefix).holds()
        if record is None:
            self._r.hdel(key, scope)
        else:
            self._r.hset(key, scope, json.dumps(record))
