"""The file store: wrapped data keys as 0600 files under the state directory.

The default of the local stack: ``<root>/data/<tenant>/<sha256(session)>.<class>.key``,
created atomically (two processes asking for the same new key get the same one); a
batch of new keys is made durable with one sync (:mod:`~sessionstream.governance.keys.fsync`).
Its tenant key ring is created on first use (:mod:`~sessionstream.governance.keys.ring`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sessionstream.core.files import make_private_dirs
from sessionstream.core.privacy import DataClass
from sessionstream.governance.crypto import new_key
from sessionstream.governance.keys.fsync import (
    PENDING,
    Settler,
    batch_records,
    fsync_dir,
    link_unsynced,
)
from sessionstream.governance.keys.port import KeyStore
from sessionstream.governance.keys.ring import (
    KeyConfigError,
    TenantKeys,
    create_private,
    tighten,
    write_private,
)


def _session_file(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


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
        self._settler = Settler()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_secured"] = set()  # the new process recovers what is pending, too
        state["_settler"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._settler = Settler()

    def _secure(self, tenant: str) -> None:
        """Once per tenant and process: the key directories of an older tree to 0700,
        and the batches a crash left pending recovered (:meth:`_recover`)."""
        if tenant in self._secured:
            return
        for directory in (self.root, self.root / "data", self.root / "data" / tenant,
                          self.root / "holds"):
            tighten(directory)
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
            fsync_dir(pending)
            made = []
            for i, sid, cls, rec in new:
                target = self._file(tenant, sid, cls, "key")
                if not link_unsynced(base, target, json.dumps(rec).encode()):
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
            if create_private(path, json.dumps(mine)):
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
            for sid, cls, record in batch_records(batch):
                target = self._file(tenant, sid, cls, "key")
                made.append(target)
                if self._tombstone(tenant, sid, cls) is not None:
                    continue
                try:
                    there = self._read(target)
                except KeyConfigError:
                    there = None  # linked before the crash, its bytes never written
                if there is None or "wrapped" not in there:
                    write_private(Path(target), json.dumps(record))
        Settler.settle(made)
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
        write_private(self._path(tenant, session_id, cls, "key"),
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
        write_private(self._path(tenant, session_id, cls, "shredded"), json.dumps(tombstone))
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
        write_private(self._holds_path(tenant), json.dumps(holds))
