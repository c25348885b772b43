"""Deletion (crypto-shred + purge), legal holds and retention against real Kafka + Redis."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis

from sessionstream.core.errors import LegalHold
from sessionstream.core.privacy import DELETED_TEXT, DataClass
from sessionstream.core.rows import CHANGE_FIELD, KeySpace, SessionRow
from sessionstream.core.session import Session
from sessionstream.core.settings import Settings
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.service import Governance, SessionUnknown
from sessionstream.producers.audit import WriterAuditLog
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

CANARY = "canary-91d0-private"
DAY = 86_400_000


@pytest.fixture
def sealed_cfg(writer_cfg: WriterConfig, tmp_path: Path) -> WriterConfig:
    cipher = ContentCipher(FileKeyStore(tmp_path / "keys", cache_ttl_s=0), "default")
    return dataclasses.replace(writer_cfg, cipher=cipher, spill_threshold=64)


def _gov(cfg: WriterConfig, client: redis.Redis, **kw: object) -> Governance:
    assert cfg.cipher is not None
    return Governance(cfg, cfg.cipher.store, client, audit=WriterAuditLog(cfg),  # type: ignore[arg-type]
                      principal="dpo", **kw)


def _session(cfg: WriterConfig, n: int = 1) -> SessionWriter:
    w = SessionWriter.create(cfg)
    for i in range(n):
        w.append("turn/start", {})
        w.append("user/message", {"content": f"{CANARY} ask {i}"})
        w.append("step/start", {})
        w.append("request/header", {"provider": "p", "model": "m"})
        w.append("assistant/chunk", {"text": f"{CANARY} chunk"})
        call = {"call_id": f"c{i}", "name": "pay", "arguments": {"to": CANARY}}
        w.append("assistant/message", {"content": f"{CANARY} ok", "tool_calls": [call]})
        w.append("tool/call", call)
        w.append("tool/result", {"call_id": f"c{i}", "status": "ok", "content": f"{CANARY}{i}" * 9,
                                 "operation_id": f"op-{i}"})
        w.append("step/end", {})
        w.append("turn/end", {"reason": "completed"})
    w.append("goal/set", {"goal": f"{CANARY} goal"})
    w.flush(10)
    return w


def test_delete_shreds_content_keeps_metadata_order_pairing_and_audit(
        sealed_cfg: WriterConfig, redis_client: redis.Redis) -> None:
    a, b = _session(sealed_cfg, 2), _session(sealed_cfg, 1)
    before = list(a.session.events)
    a.close()
    b.close()
    report = _gov(sealed_cfg, redis_client).delete(a.session_id, reason="user asked")
    assert report.shredded == ["raw", "surface", "business", "reasoning"]
    assert report.operation_ids == ["op-0", "op-1"] and "does not undo" in report.note
    assert report.attachments_deleted == 2  # both spilled tool results of session a
    after = read_log(sealed_cfg, a.session_id).admitted
    # order, types, ids, writers and pairing metadata are intact; content is gone
    assert [(e.seq, e.type, e.event_id) for e in after[:-1]] == [
        (e.seq, e.type, e.event_id) for e in before]
    assert after[-1].type == "session/shred"
    assert after[-1].data["principal"] == "dpo" and after[-1].data["reason"] == "user asked"
    assert CANARY not in json.dumps([e.to_json() for e in after])
    messages = Session.from_events(after).derive_messages()
    assert {m.content for m in messages if m.role.value != "tool"} == {DELETED_TEXT}
    calls = [c.call_id for m in messages for c in m.tool_calls]
    results = [m.call_id for m in messages if m.call_id]
    assert calls == results == ["c0", "c1"]
    # the other session is untouched
    other = read_log(sealed_cfg, b.session_id).admitted
    assert other == list(b.session.events)


def test_deleting_one_class_leaves_the_others_readable(
        sealed_cfg: WriterConfig, redis_client: redis.Redis) -> None:
    w = _session(sealed_cfg)
    w.close()
    _gov(sealed_cfg, redis_client).delete(w.session_id, [DataClass.RAW])
    log = read_log(sealed_cfg, w.session_id).admitted
    assert next(e for e in log if e.type == "assistant/chunk").data["text"] == DELETED_TEXT
    assert next(e for e in log if e.type == "goal/set").data["goal"] == f"{CANARY} goal"
    assert next(e for e in log if e.type == "user/message").data["content"] == (
        f"{CANARY} ask 0")


def test_delete_fences_a_live_writer(sealed_cfg: WriterConfig,
                                     redis_client: redis.Redis) -> None:
    from sessionstream.core.errors import SessionStreamError
    from sessionstream.producers.errors import ProducerError

    w = _session(sealed_cfg)
    _gov(sealed_cfg, redis_client).delete(w.session_id)
    with pytest.raises((ProducerError, SessionStreamError)):
        w.append("user/message", {"content": "after deletion"})
        w.flush(10)
    w.abandon()
    log = read_log(sealed_cfg, w.session_id)
    assert log.admitted[-1].type == "session/shred"


def test_a_legal_hold_refuses_deletion_and_its_release_is_audited(
        sealed_cfg: WriterConfig, redis_client: redis.Redis) -> None:
    w = _session(sealed_cfg)
    w.close()
    gov = _gov(sealed_cfg, redis_client)
    gov.place_hold(w.session_id, reason="case 2026-17")
    with pytest.raises(LegalHold, match="case 2026-17"):
        gov.delete(w.session_id)
    gov.place_hold(None, reason="tenant-wide audit")
    gov.release_hold(w.session_id, reason="case closed")
    with pytest.raises(LegalHold, match="tenant-wide audit"):
        gov.delete(w.session_id)
    with pytest.raises(LegalHold):
        gov.delete(w.session_id, [DataClass.RAW])
    gov.release_hold(None)
    gov.delete(w.session_id)
    log = read_log(sealed_cfg, w.session_id).admitted
    audit = [(e.type, e.data.get("action")) for e in log if e.type.startswith("session/")
             and e.type != "session/start"]
    assert audit == [("session/hold", "placed"), ("session/hold", "released"),
                     ("session/shred", None)]


def test_retention_shreds_only_expired_classes_and_skips_held_sessions(
        sealed_cfg: WriterConfig, redis_client: redis.Redis) -> None:
    old, held = _session(sealed_cfg), _session(sealed_cfg)
    old.close()
    held.close()
    assert sealed_cfg.cipher is not None
    created = sealed_cfg.cipher.store.created_at("default", old.session_id, DataClass.RAW)
    assert created is not None
    retention = (("raw", 30 * DAY), ("surface", 365 * DAY))
    gov = _gov(sealed_cfg, redis_client, retention=retention,
               clock=lambda: created + 31 * DAY)
    gov.place_hold(held.session_id, reason="litigation")
    dry = gov.run_retention(dry_run=True)
    assert {(i.session_id, i.data_class, i.action) for i in dry.items} == {
        (old.session_id, "raw", "would-shred"), (held.session_id, "raw", "held")}
    assert read_log(sealed_cfg, old.session_id).admitted == list(old.session.events)
    report = gov.run_retention()
    assert {(i.session_id, i.data_class, i.action) for i in report.items} == {
        (old.session_id, "raw", "shredded"), (held.session_id, "raw", "held")}
    log = read_log(sealed_cfg, old.session_id).admitted
    assert next(e for e in log if e.type == "assistant/chunk").data["text"] == DELETED_TEXT
    assert next(e for e in log if e.type == "user/message").data["content"] != DELETED_TEXT
    assert log[-1].type == "session/shred" and log[-1].data["scope"] == "retention"
    held_log = read_log(sealed_cfg, held.session_id).admitted
    assert CANARY in next(e for e in held_log if e.type == "assistant/chunk").data["text"]


def test_purge_removes_the_sessions_redis_rows_and_feed_entries_only(
        sealed_cfg: WriterConfig, redis_client: redis.Redis, redis_prefix: str) -> None:
    ks = KeySpace("default", redis_prefix)
    redis_client.set(ks.generation_counter(), 2)  # replay allocated generation 2
    for sid in ("s1", "s2"):
        redis_client.hset(ks.session_row(sid, 1), mapping={"view:surface": "x"})
        redis_client.hset(ks.session_row(sid, 2), mapping={"view:surface": "x"})
        redis_client.xadd(ks.session_changes(sid, 1), {CHANGE_FIELD: "{}"})
        redis_client.hset(ks.lease(sid), mapping={"owner": "w"})
        redis_client.hset(ks.log_index(sid), mapping={"partition": 0})
        redis_client.set(ks.epoch(sid), 3)
        redis_client.hset(ks.data_keys(sid), mapping={"raw:shredded": "{}"})
        redis_client.zadd(ks.sessions_index(1), {sid: 1})
        redis_client.xadd(ks.tenant_changes(1), {CHANGE_FIELD: json.dumps({"session": sid})})
    keys, feed = _gov(sealed_cfg, redis_client).purge_redis("s1")
    assert (keys, feed) == (4, 1)  # two rows' view fields, the change stream, the lease
    left = {str(k) for k in redis_client.scan_iter(match=f"{redis_prefix}*")}
    assert {ks.epoch("s1"), ks.data_keys("s1"), ks.log_index("s1")} <= left
    assert not any(k.startswith(ks.session_key("s1", "g")) for k in left)
    assert ks.session_row("s2", 1) in left and ks.lease("s2") in left
    assert redis_client.zrange(ks.sessions_index(1), 0, -1) == ["s2"]
    assert redis_client.xlen(ks.tenant_changes(1)) == 1


class _Recording(redis.Connection):
    """A connection that records every command it sends and every round trip."""

    log: ClassVar[list[str]] = []
    commands: ClassVar[list[tuple[str, ...]]] = []
    trips: ClassVar[list[int]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        packer = self._command_packer

        class Packer:
            def pack(self, *cmd: Any) -> Any:
                _Recording.log.append(str(cmd[0]).upper())
                _Recording.commands.append(tuple(
                    c.decode() if isinstance(c, bytes) else str(c) for c in cmd))
                return packer.pack(*cmd)

        self._command_packer = Packer()  # type: ignore[assignment]

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        _Recording.trips.append(1)
        super().send_packed_command(command, check_health)


def _recording_client(url: str) -> redis.Redis:
    pool = redis.ConnectionPool.from_url(url, connection_class=_Recording,
                                         decode_responses=True)
    return redis.Redis(connection_pool=pool)


def _seed_generations(r: redis.Redis, ks: KeySpace, gens: int, feed_filler: int) -> None:
    """Two sessions in every generation 1..gens: rows with content and metadata, change
    streams, index entries and feed entries (s1's spread among ``feed_filler`` others)."""
    r.set(ks.generation_counter(), gens)
    for g in range(1, gens + 1):
        for sid in ("s1", "s2"):
            r.hset(ks.session_row(sid, g), mapping={
                SessionRow.view("surface"): CANARY, SessionRow.state("surface"): CANARY,
                SessionRow.state_version("surface"): "1", SessionRow.parts("surface"): "{}",
                SessionRow.part("surface", "messages", 0): CANARY,
                SessionRow.AS_OF_SEQ: "9", SessionRow.AS_OF_OFFSET: "9", SessionRow.META: "{}"})
            r.xadd(ks.session_changes(sid, g), {CHANGE_FIELD: json.dumps({"session": sid})})
            r.zadd(ks.sessions_index(g), {sid: g})
        with r.pipeline(transaction=False) as pipe:
            for i in range(feed_filler):
                sid = "s1" if i % 97 == 0 else "s2"
                pipe.xadd(ks.tenant_changes(g), {CHANGE_FIELD: json.dumps({"session": sid})})
            pipe.execute()


def test_purge_clears_every_generations_content_index_feed_and_change_stream(
        sealed_cfg: WriterConfig, redis_client: redis.Redis, redis_prefix: str) -> None:
    ks = KeySpace("default", redis_prefix)
    _seed_generations(redis_client, ks, 3, 2_500)  # the feeds span three XRANGE pages
    ours = sum(1 for i in range(2_500) if i % 97 == 0) * 3
    keys, feed = _gov(sealed_cfg, redis_client).purge_redis("s1")
    assert feed == ours
    assert keys == 3 * 5 + 3  # five content fields and the change stream per generation
    for g in (1, 2, 3):
        row = redis_client.hgetall(ks.session_row("s1", g))
        assert set(row) == {SessionRow.AS_OF_SEQ, SessionRow.AS_OF_OFFSET, SessionRow.META}, g
        assert CANARY not in json.dumps(row)
        assert not redis_client.exists(ks.session_changes("s1", g))
        assert redis_client.zrange(ks.sessions_index(g), 0, -1) == ["s2"]
        entries = redis_client.xrange(ks.tenant_changes(g))
        assert {json.loads(f[CHANGE_FIELD])["session"] for _, f in entries} == {"s2"}
        assert len(entries) == 2_500 - ours // 3
        assert CANARY in str(redis_client.hget(ks.session_row("s2", g), SessionRow.view("surface")))
        assert redis_client.exists(ks.session_changes("s2", g))


def test_purge_sends_no_scan_and_its_round_trips_do_not_grow_with_the_keyspace(
        sealed_cfg: WriterConfig, redis_client: redis.Redis, redis_prefix: str,
        settings: Settings) -> None:
    ks = KeySpace("default", redis_prefix)
    _seed_generations(redis_client, ks, 2, 10)
    client = _recording_client(settings.redis_url)
    try:
        client.ping()  # connect first: the handshake's round trips are not the purge's
        _Recording.log.clear()
        _Recording.trips.clear()
        _gov(sealed_cfg, client).purge_redis("s1")
        few = (list(_Recording.log), len(_Recording.trips))
        # 20k unrelated keys, some with this tenant's prefix (a SCAN would walk them all)
        for n in range(4):
            with redis_client.pipeline(transaction=False) as pipe:
                for i in range(5_000):
                    pipe.set(ks.session_key(f"other{n}-{i}", "g1"), "x")
                pipe.execute()
        _seed_generations(redis_client, ks, 2, 10)
        _Recording.log.clear()
        _Recording.trips.clear()
        _gov(sealed_cfg, client).purge_redis("s1")
        many = (list(_Recording.log), len(_Recording.trips))
    finally:
        client.close()
    assert "SCAN" not in few[0] and "SCAN" not in many[0]
    assert "XRANGE" in few[0] and "HDEL" in few[0]  # the recorder does see the purge
    assert many[1] == few[1] == 5  # MGET, session keys, HDEL, index + feeds, XDEL


def test_purge_pages_through_a_feed_longer_than_one_page_and_never_reads_it_whole(
        sealed_cfg: WriterConfig, redis_client: redis.Redis, redis_prefix: str,
        settings: Settings) -> None:
    """A page of 5 and a feed of 23: s1's entries on the first and last entry of pages,
    on consecutive pages and as the feed's last entry are all deleted; every read is one
    XRANGE ... COUNT 5 and every XDEL names at most one page of ids."""
    ks = KeySpace("default", redis_prefix)
    redis_client.set(ks.generation_counter(), 1)
    ours = {0, 4, 5, 9, 10, 17, 22}
    for i in range(23):
        redis_client.xadd(ks.tenant_changes(1), {CHANGE_FIELD: json.dumps(
            {"session": "s1" if i in ours else "s2", "i": i})})
    redis_client.xadd(ks.tenant_changes(1), {"other": "no change field"})  # skipped, kept
    client = _recording_client(settings.redis_url)
    try:
        _Recording.commands.clear()
        keys, feed = _gov(sealed_cfg, client, feed_page=5).purge_redis("s1")
    finally:
        client.close()
    assert (keys, feed) == (0, len(ours))
    left = redis_client.xrange(ks.tenant_changes(1))
    assert [json.loads(f[CHANGE_FIELD])["i"] for _, f in left if CHANGE_FIELD in f] == [
        i for i in range(23) if i not in ours]
    assert len(left) == 23 - len(ours) + 1
    reads = [c for c in _Recording.commands
             if c[0].upper() == "XRANGE" and c[1] == ks.tenant_changes(1)]
    assert len(reads) == 5  # 24 entries: pages of 5, 5, 5, 5, 4
    assert all(c[-2:] == ("COUNT", "5") for c in reads), reads
    assert reads[0][2] == "-" and all(c[2].startswith("(") for c in reads[1:])
    deletes = [c for c in _Recording.commands if c[0].upper() == "XDEL"]
    assert deletes and all(len(c) - 2 <= 5 for c in deletes)
    # deleted page by page while reading on, not collected over the whole feed first
    assert _Recording.commands.index(deletes[0]) < _Recording.commands.index(reads[-1])


async def test_purge_reaches_the_generation_of_a_replay_that_never_switched(
        writer_cfg: WriterConfig, sealed_cfg: WriterConfig, redis_client: redis.Redis,
        settings: Settings) -> None:
    """A replay that stops before switching (``--no-switch``, or one that crashed) leaves
    a generation past the readers' pointer; replay counts it in the generation counter
    before writing it, so a deletion purges it too."""
    from redis.asyncio import Redis

    from sessionstream.streams.replay import replay

    w = SessionWriter.create(writer_cfg)  # clear content: the replay folds it readable
    w.append("user/message", {"content": f"{CANARY} to forget"})
    w.flush(10)
    w.close()
    keys = writer_cfg.keys
    aredis = Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        report = await replay(bootstrap=settings.kafka_bootstrap, redis=aredis, keys=keys,
                              topic=writer_cfg.topic, switch=False)
    finally:
        await aredis.aclose()
    gen = report.generation
    assert not report.switched and gen > report.live_generation
    assert redis_client.get(keys.generation()) is None  # readers stay on the first
    row = keys.session_row(w.session_id, gen)
    assert CANARY in json.dumps(redis_client.hgetall(row))
    assert redis_client.zrange(keys.sessions_index(gen), 0, -1) == [w.session_id]
    assert redis_client.xlen(keys.tenant_changes(gen)) >= 1

    _gov(sealed_cfg, redis_client).purge_redis(w.session_id)
    assert CANARY not in json.dumps(redis_client.hgetall(row))
    assert not [f for f in redis_client.hkeys(row) if f.startswith(SessionRow.CONTENT_PREFIXES)]
    assert redis_client.zrange(keys.sessions_index(gen), 0, -1) == []
    assert redis_client.xlen(keys.tenant_changes(gen)) == 0


def test_deleting_in_a_tenant_that_writes_clear_says_the_clear_content_stays(
        sealed_cfg: WriterConfig, redis_client: redis.Redis) -> None:
    assert sealed_cfg.cipher is not None
    clear = dataclasses.replace(sealed_cfg, cipher=dataclasses.replace(sealed_cfg.cipher,
                                                                       enabled=False))
    w = _session(clear)
    w.close()
    report = _gov(clear, redis_client).delete(w.session_id)
    assert report.warnings and "not deleted" in report.warnings[0]
    assert CANARY in json.dumps([e.data for e in read_log(clear, w.session_id).admitted])
    sealed = _session(sealed_cfg)
    sealed.close()
    assert _gov(sealed_cfg, redis_client).delete(sealed.session_id).warnings == []


def test_deleting_an_unknown_session_is_a_clear_error(
        sealed_cfg: WriterConfig, redis_client: redis.Redis) -> None:
    with pytest.raises(SessionUnknown, match="nothing to delete"):
        _gov(sealed_cfg, redis_client).delete("no-such-session")


def test_the_cli_deletes_refuses_under_hold_and_runs_retention(
        writer_cfg: WriterConfig, redis_client: redis.Redis, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sessionstream.cli.main import main
    from sessionstream.core.settings import Settings
    from sessionstream.governance.wiring import content_cipher

    env = {"SESSIONSTREAM_EVENTS_TOPIC": writer_cfg.topic,
           "SESSIONSTREAM_KEY_PREFIX": writer_cfg.key_prefix,
           "SESSIONSTREAM_KEY_DIR": str(tmp_path / "cli-keys"),
           "SESSIONSTREAM_ATTACHMENT_DIR": str(tmp_path / "cli-att"),
           "SESSIONSTREAM_PRINCIPAL": "cli-dpo"}
    settings = Settings.from_env({**env, "SESSIONSTREAM_STATE_DIR": str(tmp_path)})
    cfg = dataclasses.replace(writer_cfg, cipher=content_cipher(settings),
                              attachment_dir=tmp_path / "cli-att")
    w = _session(cfg)
    w.close()
    runner = CliRunner()
    held = runner.invoke(main, ["hold", "place", w.session_id, "--reason", "case 9"], env=env)
    assert held.exit_code == 0, held.output
    refused = runner.invoke(main, ["delete", w.session_id], env=env)
    assert refused.exit_code == 1 and "legal hold" in refused.output
    runner.invoke(main, ["hold", "release", w.session_id], env=env)
    done = runner.invoke(main, ["delete", w.session_id, "--class", "surface", "--json"], env=env)
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["classes"] == ["surface"] and report["operation_ids"] == ["op-0"]
    # a fresh reader (this process cached the key it wrote with: a shred done by another
    # process reaches a running one within the key cache's TTL)
    cfg = dataclasses.replace(cfg, cipher=content_cipher(settings))
    log = read_log(cfg, w.session_id).admitted
    assert log[-1].data["principal"] == "cli-dpo"
    assert next(e for e in log if e.type == "user/message").data["content"] == DELETED_TEXT
    missing = runner.invoke(main, ["retention", "run"], env=env)
    assert missing.exit_code == 2 and "SESSIONSTREAM_RETENTION" in missing.output
    dry = runner.invoke(main, ["retention", "run", "--dry-run", "--json"],
                        env={**env, "SESSIONSTREAM_RETENTION": "raw=30d"})
    assert dry.exit_code == 0 and json.loads(dry.output)["items"] == []
    rotated = runner.invoke(main, ["keys", "rotate", "--json"], env=env)
    assert json.loads(rotated.output)["version"] == 2
    cfg = dataclasses.replace(cfg, cipher=content_cipher(settings))
    assert read_log(cfg, w.session_id).admitted == log  # still readable after rotation
    unknown = runner.invoke(main, ["delete", "no-such-session"], env=env)
    assert unknown.exit_code == 2 and "nothing to delete" in unknown.output
    # the surface shred above (under version 1; the rotation came after) is completed by
    # destroying version 1: no new version is needed for it
    retired = runner.invoke(main, ["keys", "retire", "--json"], env=env)
    assert retired.exit_code == 0, retired.output
    done = json.loads(retired.output)
    assert (done["complete"], done["rotated"], done["destroyed"], done["version"]) == (
        True, False, [1], 2)
    complete = runner.invoke(main, ["delete", w.session_id, "--class", "raw", "--complete",
                                    "--json"], env=env)
    assert complete.exit_code == 0, complete.output
    report = json.loads(complete.output)
    assert report["shredded"] == ["raw"] and report["retirement"]["complete"]
    assert report["retirement"]["destroyed"] == [2]  # raw was wrapped by 2: now on 3
    cfg = dataclasses.replace(cfg, cipher=content_cipher(settings))
    goal = next(e for e in read_log(cfg, w.session_id).admitted if e.type == "goal/set")
    assert goal.data["goal"] == f"{CANARY} goal"  # business survived both retirements


def test_diagnose_and_explain_say_which_requests_are_no_longer_reconstructable(
        sealed_cfg: WriterConfig, redis_client: redis.Redis, settings: object,
        tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sessionstream.cli.diagnose import live_facts
    from sessionstream.cli.main import main
    from sessionstream.core.diagnosis import diagnose
    from sessionstream.core.jsonl import write_jsonl

    w = _session(sealed_cfg, 2)
    w.close()
    mine = dataclasses.replace(settings, key_dir=tmp_path / "keys")  # type: ignore[type-var]

    def finding() -> dict:
        facts = live_facts(mine, w.session_id, prefix=sealed_cfg.key_prefix,
                           topic=sealed_cfg.topic)
        assert facts is not None
        return next(f for f in diagnose(facts) if f.check == "reconstructable").to_json()

    assert finding()["status"] == "ok"
    _gov(sealed_cfg, redis_client).delete(w.session_id, [DataClass.SURFACE])
    after = finding()
    assert after["status"] == "warning"
    assert set(after["evidence"]["lost_by_class"]) == {"surface"}
    assert after["evidence"]["not_reconstructable_requests"]  # the requests after seq 2
    assert after["evidence"]["shredded"][0]["classes"] == ["surface"]
    assert CANARY not in json.dumps(after)
    exported = tmp_path / "deleted.jsonl"
    write_jsonl(read_log(sealed_cfg, w.session_id).admitted, exported)
    out = CliRunner().invoke(main, ["explain", str(exported), "--json"])
    assert out.exit_code == 0, out.output
    part = json.loads(out.output)[-1]
    assert part["part"] == "reconstructability" and part["fully_reconstructable"] is False
