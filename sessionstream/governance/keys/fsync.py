"""Batched durability of new key files: one sync for a batch of keys, off the caller's path.

The file store writes a batch of new keys to one batch file in ``pending/`` (synced:
the keys are durable from there), links each key's own file in place unsynced, and
hands both to :class:`Settler`, a thread that syncs the file system once and removes
the batch file; the next process recovers from a batch file a crash left
(:meth:`FileKeyStore._recover <sessionstream.governance.keys.file_store.FileKeyStore._recover>`).
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sessionstream.core.privacy import DataClass

#: The directory (under a tenant's key directory) of batch files not yet settled.
PENDING = "pending"


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def link_unsynced(directory: Path, target: str, data: bytes) -> bool:
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


def batch_records(batch: Path) -> Iterator[tuple[str, DataClass, dict[str, Any]]]:
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


class Settler:
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
        if syncfs(os.path.dirname(files[0])):
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


def syncfs(directory: str) -> bool:
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
