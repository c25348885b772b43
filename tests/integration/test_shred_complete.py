"""A completed deletion from outside: copies of the wrapped keys taken before it open nothing.

The copies are what an operator's world keeps: the file store's key directory (a backup
of the state dir), and a real Redis's RDB snapshot and append-only file. Each is opened
after the deletion with the tenant key ring as it then is (the node's own key material),
through the product's reader: before ``keys retire`` the copy still opens the content
(the control), after it nothing does.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore, KeyStore, RedisKeyStore, TenantKeys
from sessionstream.governance.service import Governance
from sessionstream.producers.audit import WriterAuditLog
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

CANARY = "canary-7c1e-shredded"


class ScratchRedis:
    """A redis-server of this test on a unix socket (no TCP port to clash), own data dir."""

    def __init__(self, directory: Path, *, aof: bool) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.dir = directory
        self.sock = directory / "redis.sock"
        args = ["redis-server", "--port", "0", "--unixsocket", str(self.sock),
                "--unixsocketperm", "700", "--dir", str(directory), "--save", "",
                "--appendonly", "yes" if aof else "no", "--appendfsync", "always"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.client = redis.Redis(unix_socket_path=str(self.sock))
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                if self.client.info("persistence").get("loading", 0) == 0:
                    break
            except (redis.ConnectionError, FileNotFoundError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"scratch redis-server did not start: {err[-500:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[list[ScratchRedis]]:
    started: list[ScratchRedis] = []
    yield started
    for server in started:
        server.stop()


def _write(cfg: WriterConfig) -> str:
    w = SessionWriter.create(cfg)
    w.append("turn/start", {})
    w.append("user/message", {"content": f"{CANARY} ask"})
    w.append("step/start", {})
    w.append("request/header", {"provider": "p", "model": "m"})
    w.append("assistant/chunk", {"text": f"{CANARY} chunk"})
    call = {"call_id": "c0", "name": "pay", "arguments": {"to": CANARY}}
    w.append("assistant/message", {"content": f"{CANARY} ok", "tool_calls": [call]})
    w.append("tool/call", call)
    w.append("tool/result", {"call_id": "c0", "status": "ok", "content": f"{CANARY} paid"})
    w.append("step/end", {})
    w.append("turn/end", {"reason": "completed"})
    w.append("goal/set", {"goal": f"{CANARY} goal"})
    w.flush(10)
    w.close()
    return w.session_id


def _reads_canary(cfg: WriterConfig, store: KeyStore, session_id: str) -> bool:
    """Whether the session's log, opened with ``store``, shows any of its content."""
    opened = dataclasses.replace(cfg, cipher=ContentCipher(store, cfg.tenant))
    events = read_log(opened, session_id).admitted
    assert len(events) >= 12  # the log itself stays: only its content is at stake
    return CANARY in json.dumps([e.data for e in events])


def test_a_backup_of_the_file_key_store_opens_nothing_after_a_completed_deletion(
        writer_cfg: WriterConfig, redis_client: redis.Redis, tmp_path: Path) -> None:
    rings = TenantKeys(tmp_path / "tenant-keys")
    store = FileKeyStore(tmp_path / "keys", rings, cache_ttl_s=0)
    cfg = dataclasses.replace(writer_cfg, cipher=ContentCipher(store, "default"))
    sid = _write(cfg)
    shutil.copytree(tmp_path / "keys", tmp_path / "backup")  # before the delete
    gov = Governance(cfg, store, redis_client, audit=WriterAuditLog(cfg), retire_grace_s=0)

    def backup() -> KeyStore:
        return FileKeyStore(tmp_path / "backup", TenantKeys(tmp_path / "tenant-keys"))

    gov.delete(sid, reason="erasure request")
    assert not _reads_canary(cfg, FileKeyStore(tmp_path / "keys",
                                               TenantKeys(tmp_path / "tenant-keys")), sid)
    assert _reads_canary(cfg, backup(), sid)  # the control: shredded, not yet complete
    done = gov.retire()
    assert done.complete and done.destroyed == [1]
    assert not _reads_canary(cfg, backup(), sid)


def test_a_completed_deletion_leaves_nothing_to_open_in_an_rdb_or_aof_taken_before(
        writer_cfg: WriterConfig, redis_client: redis.Redis, tmp_path: Path,
        scratch: list[ScratchRedis]) -> None:
    keys = ScratchRedis(tmp_path / "keys-redis", aof=True)
    scratch.append(keys)
    rings = tmp_path / "tenant-keys"
    store = RedisKeyStore(keys.client, TenantKeys(rings), prefix=writer_cfg.key_prefix,
                          cache_ttl_s=0)
    cfg = dataclasses.replace(writer_cfg, cipher=ContentCipher(store, "default"))
    sid = _write(cfg)
    keys.client.save()  # the RDB snapshot and the AOF, as a backup would take them
    (tmp_path / "rdb").mkdir()
    shutil.copy(tmp_path / "keys-redis" / "dump.rdb", tmp_path / "rdb" / "dump.rdb")
    shutil.copytree(tmp_path / "keys-redis" / "appendonlydir",
                    tmp_path / "aof" / "appendonlydir")
    aof_text = b"".join(p.read_bytes() for p in (tmp_path / "aof").rglob("*.aof"))
    assert b"HSETNX" in aof_text.upper()  # the wrapped keys are in the copied AOF

    def from_copy(directory: str, aof: bool) -> KeyStore:
        server = ScratchRedis(tmp_path / directory, aof=aof)
        scratch.append(server)
        assert server.client.dbsize() > 0  # the copy loaded
        return RedisKeyStore(server.client, TenantKeys(rings), prefix=writer_cfg.key_prefix)

    gov = Governance(cfg, store, redis_client, audit=WriterAuditLog(cfg), retire_grace_s=0)
    gov.delete(sid, reason="erasure request")
    for directory, aof in (("rdb", False), ("aof", True)):  # the control
        assert _reads_canary(cfg, from_copy(directory, aof), sid), directory
        scratch.pop().stop()
    report = gov.delete(sid, reason="erasure request", complete=True)  # `delete --complete`
    assert report.retirement is not None and report.retirement.complete
    assert report.shredded == []  # the keys were destroyed by the first call
    for directory, aof in (("rdb", False), ("aof", True)):
        assert not _reads_canary(cfg, from_copy(directory, aof), sid), directory
