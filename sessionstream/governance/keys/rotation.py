"""Rotation: data keys rewrapped under a new tenant key version, and the old versions
retired so that no copy of a shredded data key opens again (the completion point of a
deletion, docs/operations.md "When a deletion is complete")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from sessionstream.core.privacy import DataClass
from sessionstream.governance.crypto import unwrap, wrap, wrap_ad
from sessionstream.governance.keys.records import Retirement
from sessionstream.governance.keys.ring import KeyConfigError, TenantKeyRing, TenantKeys, b64, unb64


class Rewrappable(Protocol):
    """What rotation uses of a key store (:class:`~sessionstream.governance.keys.port.KeyStore`)."""

    tenant_keys: TenantKeys

    def _records(self, tenant: str) -> Iterator[tuple[str, DataClass, dict[str, Any]]]: ...

    def _replace_live(self, tenant: str, session_id: str, cls: DataClass,
                      record: dict[str, Any]) -> bool: ...

    def _shred_mark(self, tenant: str) -> int: ...

    def drop_cached(self) -> None: ...


def rewrap(store: Rewrappable, tenant: str, ring: TenantKeyRing | None = None) -> int:
    """Rewrap every live data key of ``tenant`` not on the ring's current version with
    it; the count. A key shredded meanwhile is left destroyed."""
    ring = ring or store.tenant_keys.ring(tenant)
    if ring is None:
        raise KeyConfigError(f"no tenant key for tenant {tenant!r} on this node")
    count = 0
    for session_id, cls, record in list(store._records(tenant)):
        version = int(record["kek"])
        if version == ring.current:
            continue
        if version not in ring.versions:
            raise KeyConfigError(
                f"data key {session_id!r}/{cls.value} is wrapped by tenant key version "
                f"{version}, which this node does not have: add it to the ring first"
            )
        key = unwrap(ring.versions[version], unb64(record["nonce"], "nonce"),
                     unb64(record["wrapped"], "wrapped key"),
                     wrap_ad(tenant, session_id, cls.value, version))
        nonce, wrapped = wrap(ring.versions[ring.current], key,
                              wrap_ad(tenant, session_id, cls.value, ring.current))
        if store._replace_live(tenant, session_id, cls,
                               {**record, "kek": ring.current, "nonce": b64(nonce),
                                "wrapped": b64(wrapped)}):
            count += 1
    store.drop_cached()
    return count


def retire(store: Rewrappable, tenant: str, *, grace_s: float | None,
           sleep: Callable[[float], None]) -> Retirement:
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
    keys = store.tenant_keys
    ring = keys.ring(tenant, create=True, fresh=True)
    if ring is None:
        raise KeyConfigError(f"no tenant key for tenant {tenant!r} on this node")
    mark = store._shred_mark(tenant)
    rotated = False
    if ring.current <= mark:
        if keys.from_env(tenant):
            return Retirement(tenant, ring.current, 0, [], mark,
                              sorted(v for v in ring.versions if v <= mark), False)
        ring = keys.rotate(tenant)
        rotated = True
        wait = 2 * keys.reload_s if grace_s is None else grace_s
        if wait > 0:
            sleep(wait)
    count = 0
    if len(ring.versions) > 1:  # one version: every live key is on it already
        count = rewrap(store, tenant, ring)
        # A writer that created a key with the old version during the first pass
        # (its ring not yet reloaded) is caught by a second one.
        count += rewrap(store, tenant, ring)
    destroyed = keys.destroy_old_versions(tenant)
    after = keys.ring(tenant, fresh=True) or ring
    pending = sorted(v for v in after.versions if v <= mark)
    return Retirement(tenant, after.current, count, destroyed, mark, pending, rotated)
