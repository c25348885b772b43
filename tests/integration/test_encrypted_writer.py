"""The writer seals content on the real Kafka; read-back opens it; forks inherit sealed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sessionstream.core.codec import decode
from sessionstream.core.privacy import ALL_CLASSES, DELETED_TEXT, NOT_INHERITED_TEXT, DataClass
from sessionstream.core.session import Session
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.streams_helpers import read_topic
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

CANARY = "canary-4b1e-secret"


@pytest.fixture
def sealed_cfg(writer_cfg: WriterConfig, tmp_path: Path) -> WriterConfig:
    cipher = ContentCipher(FileKeyStore(tmp_path / "keys", cache_ttl_s=0), "default")
    return dataclasses.replace(writer_cfg, cipher=cipher, spill_threshold=64)


def _turn(w: SessionWriter, n: int) -> None:
    w.append("turn/start", {})
    w.append("user/message", {"content": f"{CANARY} question {n}"})
    w.append("step/start", {})
    w.append("request/header", {"provider": "p", "model": "m"})
    w.append("assistant/chunk", {"text": f"{CANARY} chunk"})
    call = {"call_id": f"c{n}", "name": "ls", "arguments": {"path": CANARY}}
    w.append("assistant/message", {"content": f"{CANARY} answer", "tool_calls": [call]})
    w.append("tool/call", call)
    w.append("tool/result", {"call_id": f"c{n}", "status": "ok", "content": CANARY * 20})
    w.append("step/end", {})
    w.append("turn/end", {"reason": "completed"})


def test_the_log_and_attachments_hold_no_content_and_read_back_opens_it(
        sealed_cfg: WriterConfig) -> None:
    w = SessionWriter.create(sealed_cfg)
    _turn(w, 1)
    w.flush(10)
    written = list(w.session.events)
    w.close()
    records = read_topic(sealed_cfg.bootstrap, sealed_cfg.topic, len(written))
    assert all(CANARY.encode() not in (r.value or b"") for r in records)
    wire = [decode(r.value) for r in records if r.value is not None]
    assert {p.data_class for e in wire for p in e.sealed} == {DataClass.RAW, DataClass.SURFACE}
    assert sealed_cfg.attachment_dir is not None
    blobs = [p for p in sealed_cfg.attachment_dir.rglob("*") if p.is_file()]
    assert blobs and all(CANARY.encode() not in p.read_bytes() for p in blobs)
    back = read_log(sealed_cfg, w.session_id)
    assert back.admitted == written  # opened: exactly what was appended
    resumed = SessionWriter.open(sealed_cfg, w.session_id)
    assert resumed.session.events[: len(written)] == tuple(written)
    resumed.close()


def test_a_fork_inherits_sealed_seed_and_parent_deletion_reaches_it(
        sealed_cfg: WriterConfig) -> None:
    parent = SessionWriter.create(sealed_cfg)
    _turn(parent, 1)
    parent.flush(10)
    child = parent.fork()
    child.append("user/message", {"content": "the child's own words"})
    child.flush(10)
    parent.close()
    child.close()
    assert list(child.session.lineage["inherited_classes"]) == ["surface", "business", "reasoning"]
    log = read_log(sealed_cfg, child.session_id).admitted
    chunk = next(e for e in log if e.type == "assistant/chunk")
    assert chunk.data["text"] == NOT_INHERITED_TEXT  # raw is not copied by default
    msg = next(e for e in log if e.type == "user/message")
    assert msg.data["content"] == f"{CANARY} question 1"
    # Deleting the parent's surface class: the child's inherited seed is unreadable too,
    # while the child's own content stays.
    assert sealed_cfg.cipher is not None
    sealed_cfg.cipher.store.shred("default", parent.session_id, (DataClass.SURFACE,),
                                  principal="t", reason="parent deleted")
    log = read_log(sealed_cfg, child.session_id).admitted
    contents = [e.data["content"] for e in log if e.type == "user/message"]
    assert contents == [DELETED_TEXT, "the child's own words"]
    Session.from_events(log)  # still a valid session: pairing holds


def test_create_makes_the_sessions_data_keys_so_a_sealed_append_creates_none(
        sealed_cfg: WriterConfig) -> None:
    cipher = sealed_cfg.cipher
    assert cipher is not None
    w = SessionWriter.create(sealed_cfg)
    try:
        made = {cls for sid, cls, _ in cipher.store.sessions("default") if sid == w.session_id}
        # every class of a session (memory keys are per memory operation, not per session)
        assert made == set(ALL_CLASSES)  # one batch while the broker acknowledged the start
        generation = cipher.store.generation
        _turn(w, 1)
        w.flush(10)
        assert cipher.store.generation == generation  # no key was created by the appends
        written = list(w.session.events)
    finally:
        w.close()
    assert read_log(sealed_cfg, w.session_id).admitted == written  # opened with those keys
