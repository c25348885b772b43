"""Tenant key rings: the versioned key-encryption keys that wrap every data key.

A ring comes from the environment (``<version>:<base64>,…``) or from a 0600 file per
tenant (``<tenant key dir>/<tenant>/kek.json``), kept apart from the wrapped data keys;
versions only grow, so destroying the versions up to a shred's mark makes every copy of
a destroyed data key inert (:meth:`KeyStore.retire
<sessionstream.governance.keys.port.KeyStore.retire>`).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessionstream.core.errors import SealedContentError
from sessionstream.core.files import create_if_absent, write_atomically
from sessionstream.governance.crypto import KEY_BYTES, new_key


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise SealedContentError(f"{what} is not base64") from None


class KeyConfigError(SealedContentError):
    """A tenant key file or variable is malformed; the message says where and how to fix."""


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
                "keys": {str(v): b64(k) for v, k in sorted(self.versions.items())}}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> TenantKeyRing:
        try:
            versions = {int(v): unb64(k, f"{where} key {v}") for v, k in obj["keys"].items()}
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
            versions[int(version)] = unb64(b64, f"{name} version {version}")
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


def write_private(path: Path, text: str) -> None:
    """Write ``path`` atomically (0600; directories made on the way 0700). A new inode
    replaces the old one: the old bytes are unlinked, not overwritten, so what was in the
    file is gone only as far as the file system forgets unlinked blocks. The design does
    not rely on it: a shred is complete when the tenant key versions that wrapped the key
    are destroyed (:meth:`KeyStore.retire`), not when a file is rewritten."""
    write_atomically(path, text.encode("utf-8"), private=True)


def create_private(path: Path, text: str) -> bool:
    """Create ``path`` (0600) with ``text`` unless it exists; True if this call created it."""
    return create_if_absent(path, text.encode("utf-8"), private=True)


def tighten(directory: Path) -> None:
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
                create_private(path, json.dumps(found.to_json()))
                old.unlink(missing_ok=True)
                return self._read(path)
        if not create:
            return None
        create_private(path, json.dumps(TenantKeyRing(1, {1: new_key()}).to_json()))
        tighten(path.parent.parent)
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
        write_private(path, json.dumps(ring.to_json()))
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
