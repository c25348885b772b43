"""SessionWriter against the real Kafka and Redis: order, fencing, resume, errors."""

from __future__ import annotations

import dataclasses
import math
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from sessionstream.core import codec
from sessionstream.core.admission import Verdict
from sessionstream.core.errors import InvalidData, InvariantViolation, SchemaViolation
from sessionstream.producers import native_append as na
from sessionstream.producers.errors import Fenced, MessageTooLarge, UnconfirmedEvents
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.writers import tool_turn, writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration


def raw_count(cfg: WriterConfig) -> int:
    """Records in the whole topic (every partition)."""
    c = Consumer({"bootstrap.servers": cfg.bootstrap, "group.id": "x", "log_level": 3})
    try:
        meta = c.list_topics(cfg.topic, timeout=10).topics[cfg.topic]
        return sum(
            c.get_watermark_offsets(TopicPartition(cfg.topic, p), timeout=10)[1]
            for p in meta.partitions
        )
    finally:
        c.close()


def test_flushed_session_reads_back_in_order_with_index(writer_cfg: WriterConfig) -> None:
    w = SessionWriter.create(writer_cfg)
    for n in range(3):
        tool_turn(w, n)
    w.flush(10)
    ids = [e.event_id for e in w.session.events]
    w.close()
    for use_index in (True, False):
        rb = read_log(writer_cfg, w.session_id, use_index=use_index)
        assert [e.event_id for e in rb.admitted] == ids
        assert [e.seq for e in rb.admitted] == list(range(len(ids)))
        assert rb.rejections == []


def test_invalid_data_and_invariant_violations_never_reach_kafka(
    writer_cfg: WriterConfig,
) -> None:
    w = SessionWriter.create(writer_cfg)
    w.append("turn/start", {})
    with pytest.raises(InvalidData):
        w.append("user/message", {"content": "x", "score": math.nan})
    with pytest.raises(SchemaViolation):
        w.append("user/message", {"content": 42})
    with pytest.raises(InvariantViolation):
        w.append("tool/result", {"call_id": "nope", "status": "ok", "content": "x"})
    with pytest.raises(InvariantViolation):
        w.append("step/end", {})
    w.append("turn/end", {"reason": "completed"})
    w.flush(10)
    w.close()
    assert raw_count(writer_cfg) == 3  # session/start, turn/start, turn/end
    rb = read_log(writer_cfg, w.session_id)
    assert [e.type for e in rb.admitted] == ["session/start", "turn/start", "turn/end"]


def test_message_too_large_is_refused_before_producing(
    writer_cfg: WriterConfig, tmp_path: Path
) -> None:
    cfg = WriterConfig(**{**writer_cfg.__dict__, "max_message_bytes": 64 * 1024,
                          "attachment_dir": None})
    w = SessionWriter.create(cfg)
    w.flush(10)
    before = w.next_seq
    with pytest.raises(MessageTooLarge, match="attachment"):
        w.append("user/message", {"content": "x" * 100_000})
    assert w.next_seq == before
    w.append("user/message", {"content": "small"})
    w.close()
    assert raw_count(cfg) == 2


def test_large_tool_result_spills_to_the_attachment_store(writer_cfg: WriterConfig) -> None:
    from sessionstream.producers.attachments import LocalAttachmentStore

    w = SessionWriter.create(writer_cfg)
    tool_turn(w, 0, close=False)
    call_id = w.session.events[-1].data["call_id"]
    big = "line of output\n" * 30_000  # ~450 KB
    ev = w.append("tool/result", {"call_id": call_id, "status": "ok", "content": big})
    assert "content" not in ev.data
    att = ev.data["attachment"]
    assert att["size"] == len(big.encode()) and big.startswith(att["head"])
    assert big.endswith(att["tail"])
    w.close()
    store = LocalAttachmentStore(writer_cfg.attachment_dir)  # type: ignore[arg-type]
    assert store.get(att["sha256"]).decode() == big
    rb = read_log(writer_cfg, w.session_id)
    assert rb.admitted[-1].data["attachment"]["sha256"] == att["sha256"]


def test_two_writers_race_one_history_is_admitted(writer_cfg: WriterConfig) -> None:
    w1 = SessionWriter.create(writer_cfg)
    tool_turn(w1, 0)
    w1.flush(10)
    w2 = SessionWriter.open(writer_cfg, w1.session_id, steal=True)  # takes over: epoch 2
    # w1 has not re-checked its lease yet (within ttl/3): both produce concurrently.
    late = []
    for i in range(3):
        late.append(w1.append("user/message", {"content": f"w1 {i}"}).event_id)
        w2.append("user/message", {"content": f"w2 {i}"})
    # w1's barrier never calls its refused events durable: it names them
    with pytest.raises(Fenced) as info:
        w1.flush(10)
    assert info.value.not_admitted == late
    w2.flush(10)
    c1, c2 = w1.confirm(10), w2.confirm(10)
    assert c2.ok, c2
    assert len(c1.rejected) == 3
    assert {r.verdict for r in c1.rejected} <= {Verdict.STALE_EPOCH, Verdict.SEQ_CONFLICT}
    # Once it checks its lease, the loser is fenced for good.
    w1._last_renew = 0.0
    with pytest.raises(Fenced):
        w1.append("user/message", {"content": "late"})
    with pytest.raises(Fenced):
        w1.append("user/message", {"content": "later"})
    w2.close()
    a = read_log(writer_cfg, w1.session_id, use_index=True)
    b = read_log(writer_cfg, w1.session_id, use_index=False)
    assert [e.event_id for e in a.admitted] == [e.event_id for e in b.admitted]
    contents = [e.data.get("content") for e in a.admitted if e.type == "user/message"]
    assert not any(str(c).startswith("w1 ") for c in contents)
    assert [e.seq for e in a.admitted] == list(range(len(a.admitted)))


def test_zombie_writer_events_are_rejected(writer_cfg: WriterConfig) -> None:
    cfg = WriterConfig(**{**writer_cfg.__dict__, "lease_ttl_ms": 300})
    zombie = SessionWriter.create(cfg)
    tool_turn(zombie, 0)
    zombie.flush(10)
    time.sleep(0.5)  # the zombie pauses past its TTL; the lease expires
    heir = SessionWriter.open(cfg, zombie.session_id)  # no steal needed
    heir.append("user/message", {"content": "heir"})
    heir.flush(10)
    # The zombie resumes *after* its lease check (paused between check and produce).
    zombie._maybe_renew = lambda: None  # type: ignore[method-assign]
    z = zombie.append("user/message", {"content": "zombie"})
    with pytest.raises(Fenced) as info:
        zombie.flush(10)  # acknowledged by the broker, refused by every reader
    assert info.value.not_admitted == [z.event_id]
    conf = zombie.confirm(10)
    assert [r.verdict for r in conf.rejected] == [Verdict.STALE_EPOCH]
    heir.close()
    rb = read_log(cfg, zombie.session_id)
    assert all(e.data.get("content") != "zombie" for e in rb.admitted)
    assert rb.admitted[-1].data["content"] == "heir"


CRASHER = textwrap.dedent(
    """
    import json, sys, time
    from sessionstream.producers.writer import SessionWriter, WriterConfig
    cfg = WriterConfig(**json.loads(sys.argv[1]))
    w = SessionWriter.create(cfg)
    from tests.integration.writers import tool_turn
    tool_turn(w, 0)
    tool_turn(w, 1, close=False)      # mid-turn: tool call without result
    w.flush(10)
    flushed = [e.event_id for e in w.session.events]
    w.append("assistant/chunk", {"text": "not flushed maybe"})
    print(json.dumps({"sid": w.session_id, "flushed": flushed}), flush=True)
    time.sleep(600)
    """
)


def test_sigkilled_writer_is_resumed_by_another_process(writer_cfg: WriterConfig) -> None:
    import json

    args = {k: (str(v) if isinstance(v, Path) else v) for k, v in writer_cfg.__dict__.items()}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHER, json.dumps(args)], cwd=root,
        stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(root)},
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    w = SessionWriter.open(writer_cfg, info["sid"], steal=True)  # the dead one's lease is live
    ids = [e.event_id for e in w.session.events]
    assert set(info["flushed"]) <= set(ids)
    types = [e.type for e in w.session.events]
    assert types[-2:] == ["turn/end", "session/end-seed"]
    assert w.session.events[-2].data["reason"] == "interrupted"
    assert w.session.events[-1].data["seed_length"] == len(types) - 1
    nxt = w.append("turn/start", {})
    assert nxt.seq == len(types)
    w.close()
    rb = read_log(writer_cfg, info["sid"])
    assert [e.seq for e in rb.admitted] == list(range(len(types) + 1))
    assert rb.admitted[-1].writer.epoch == 2


def test_resend_after_delivery_timeout_does_not_duplicate(writer_cfg: WriterConfig) -> None:
    from sessionstream.producers.kafka import KafkaSender

    w = SessionWriter.create(writer_cfg)
    healthy = w._sender
    # Records sent where no broker listens time out (message.timeout.ms) unconfirmed.
    w._path.sender = KafkaSender("127.0.0.1:9", writer_cfg.topic,
                            config={"message.timeout.ms": 300, "linger.ms": 1})
    w.append("turn/start", {})
    w.append("user/message", {"content": "hello"})
    with pytest.raises(UnconfirmedEvents) as err:
        w.flush(5)
    assert list(err.value.event_ids) == [e.event_id for e in w.session.events[1:]]
    assert set(err.value.states.values()) == {"possibly-persisted"}
    # Back on a healthy producer the writer resends: same event_ids, same bytes.
    w._path.sender = healthy
    resent = w.resend_unconfirmed()
    assert resent == [e.event_id for e in w.session.events[1:]]
    w.flush(10)
    # A second resend of acknowledged records (a timeout that did persist): duplicates.
    for e in w.session.events:
        w._sender.produce(e.session_id.encode(), w._e.encode(e), e.event_id)
    w.flush(10)
    w.close()
    rb = read_log(writer_cfg, w.session_id)
    assert [e.event_id for e in rb.admitted] == [e.event_id for e in w.session.events]
    assert rb.rejections and {r.verdict for r in rb.rejections} == {Verdict.DUPLICATE}


@pytest.mark.parametrize("append", ["native", "python"])
def test_timed_out_records_are_unconfirmed_exactly_and_resent_on_either_append_path(
        writer_cfg: WriterConfig, append: str) -> None:
    """The writer's own delivery tracking (a native log per sender on the native path,
    a Delivery per record on the Python one): the events whose records timed out are
    the ones reported, the acknowledged ones are not, and a resend makes them durable."""
    if append == "native" and na.why_not(codec.encode) is not None:
        pytest.skip("the native extension is not built")
    from sessionstream.producers.kafka import KafkaSender

    cfg = dataclasses.replace(writer_cfg, append=append)
    w = SessionWriter.create(cfg)
    assert w._path.native == (append == "native")
    assert (w._sender._log is not None) == (append == "native")
    w.append("turn/start", {})
    w.append("step/start", {})
    w.append("assistant/chunk", {"text": "durable"})
    w.flush(10)
    healthy = w._sender
    dead = KafkaSender("127.0.0.1:9", cfg.topic,
                       config={"message.timeout.ms": 300, "linger.ms": 1})
    if append == "native":
        assert dead.use_log(w._path.delivery_log())  # type: ignore[attr-defined]
    w._path.sender = dead
    lost = [w.append("assistant/chunk", {"text": f"lost {i}"}) for i in range(3)]
    with pytest.raises(UnconfirmedEvents) as err:
        w.flush(5)
    assert list(err.value.event_ids) == [e.event_id for e in lost]
    assert set(err.value.states.values()) == {"possibly-persisted"}
    w._path.sender = healthy
    assert w.resend_unconfirmed() == [e.event_id for e in lost]
    w.flush(10)
    assert w.unconfirmed() == {}
    w.close()
    rb = read_log(cfg, w.session_id)
    assert [e.event_id for e in rb.admitted] == [e.event_id for e in w.session.events]


def test_fork_creates_child_with_lineage(writer_cfg: WriterConfig) -> None:
    w = SessionWriter.create(writer_cfg)
    tool_turn(w, 0)
    tool_turn(w, 1, close=False)
    child = w.fork("child-" + w.session_id)  # stable tail: before the open turn
    assert child.session.lineage["parent_session"] == w.session_id
    child.append("user/message", {"content": "child continues"})
    child.close()
    w.close()
    rb = read_log(writer_cfg, child.session_id)
    assert rb.admitted[0].data["lineage"]["seed_length"] == 10
    assert [e.type for e in rb.admitted][-2:] == ["session/end-seed", "user/message"]


@pytest.mark.parametrize("append", ["native", "python"])
def test_append_many_writes_what_single_appends_write_and_a_refused_batch_stores_nothing(
        writer_cfg: WriterConfig, append: str) -> None:
    """A batch (stateless chunks between stateful types, Drafts and pairs) is one
    session's log in order, flushed and admitted; an item refused raises the core's
    error and nothing of its batch is appended or sent — not the items before it."""
    if append == "native" and na.why_not(codec.encode) is not None:
        pytest.skip("the native extension is not built")
    from sessionstream.core.events import Draft

    cfg = dataclasses.replace(writer_cfg, append=append)
    w = SessionWriter.create(cfg)
    assert w._path.native == (append == "native")
    items: list[Any] = [("turn/start", {}), Draft("step/start", {}),
                        ("request/header", {"provider": "p", "model": "m"})]
    items += [("assistant/chunk", {"text": f"t{i}", "index": i}) for i in range(40)]
    items += [Draft("assistant/chunk", {"text": "d"}), ("step/end", {})]
    events = w.append_many(items)
    assert [e.seq for e in events] == list(range(1, 46))
    assert events == list(w.session.events[1:])
    before = w.next_seq
    with pytest.raises(InvariantViolation):
        w.append_many([("assistant/chunk", {"text": "ok 1"}),
                       ("assistant/chunk", {"text": "ok 2"}),
                       ("assistant/chunk", {"text": "outside a step"}),  # step ended
                       ("turn/end", {"reason": "completed"})])
    assert w.next_seq == before  # the first chunk is already outside the step
    w.append("step/start", {})
    with pytest.raises(SchemaViolation):
        w.append_many([("assistant/chunk", {"text": "ok 1"}),
                       ("assistant/chunk", {"text": "ok 2"}),
                       ("assistant/chunk", {"text": 42}),
                       ("assistant/chunk", {"text": "never"})])
    assert w.session.events[-1].type == "step/start"  # "ok 1", "ok 2" were never appended
    w.append_many([("assistant/chunk", {"text": "ok 1"}), ("assistant/chunk", {"text": "ok 2"})])
    w.flush(10)
    w.close()
    rb = read_log(cfg, w.session_id)
    assert [e.event_id for e in rb.admitted] == [e.event_id for e in w.session.events]
    assert rb.rejections == [] and len(rb.admitted) == before + 3
    assert raw_count(cfg) == before + 3


def test_append_many_records_that_time_out_are_unconfirmed_exactly_and_resent(
        writer_cfg: WriterConfig) -> None:
    """The batch's records go to the sender's native log like single appends: those
    that time out are the ones a flush reports, and a resend makes them durable."""
    if na.why_not(codec.encode) is not None:
        pytest.skip("the native extension is not built")
    from sessionstream.producers.kafka import KafkaSender

    w = SessionWriter.create(dataclasses.replace(writer_cfg, append="native"))
    w.append_many([("turn/start", {}), ("step/start", {}),
                   ("assistant/chunk", {"text": "durable"})])
    w.flush(10)
    healthy = w._sender
    dead = KafkaSender("127.0.0.1:9", writer_cfg.topic,
                       config={"message.timeout.ms": 300, "linger.ms": 1})
    assert dead.use_log(w._path.delivery_log())  # type: ignore[attr-defined]
    w._path.sender = dead
    lost = w.append_many([("assistant/chunk", {"text": f"lost {i}"}) for i in range(20)])
    assert dead._produced == 20  # produced by the batch itself, counted by the sender
    with pytest.raises(UnconfirmedEvents) as err:
        w.flush(5)
    assert list(err.value.event_ids) == [e.event_id for e in lost]
    w._path.sender = healthy
    assert w.resend_unconfirmed() == [e.event_id for e in lost]
    w.flush(10)
    w.close()
    rb = read_log(writer_cfg, w.session_id)
    assert [e.event_id for e in rb.admitted] == [e.event_id for e in w.session.events]


def test_create_on_a_started_id_whose_holder_is_away_says_session_exists_at_once(
        writer_cfg: WriterConfig) -> None:
    """The documented "create, then open on SessionExists": a started id whose holder
    died with its lease live is SessionExists now, not a wait for the lease."""
    from sessionstream.producers.errors import SessionExists

    cfg = dataclasses.replace(writer_cfg, lease_ttl_ms=600_000)
    w = SessionWriter.create(cfg)
    w.append("user/message", {"content": "hi"})
    w.flush(10)
    w.abandon()  # a crash: the lease stays live for ten minutes
    with pytest.raises(SessionExists):
        SessionWriter.create(cfg, w.session_id)


def test_release_then_retake_continues_without_reading_and_after_another_node_catches_up(
        writer_cfg: WriterConfig) -> None:
    """A per-write hold: release() hands the session off; retake() continues at a new
    epoch — with its own session as is when nobody wrote meanwhile, else after reading
    only what the other node added — and no repair or end-seed is written."""
    a = SessionWriter.create(writer_cfg)
    a.append("turn/start", {})
    a.append("user/message", {"content": "from a"})
    a.release()
    b = SessionWriter.take(writer_cfg, a.session_id)  # another node, its first write
    assert b.session.open_turn is not None  # the turn a left open stays open
    b.append("user/message", {"content": "from b"})
    b.release()
    a.retake()
    assert a.epoch > b.epoch and a.session.events[-1].data["content"] == "from b"
    a.append("turn/end", {"reason": "completed"})
    a.close()
    types = [e.type for e in read_log(writer_cfg, a.session_id).admitted]
    assert types == ["session/start", "turn/start", "user/message", "user/message",
                     "turn/end"]  # one history; nothing repaired, no end-seed
    b.close()


def test_pooled_read_back_consumers_return_each_read_only_its_own_records(
        writer_cfg: WriterConfig) -> None:
    """Read-backs reuse the process's consumers (producers.readback.CONSUMERS): reads of
    two sessions in turn, over the same and other offsets, each get exactly their own
    session's admitted events, whatever the consumer fetched for the read before."""
    from sessionstream.producers import readback

    a, b = SessionWriter.create(writer_cfg), SessionWriter.create(writer_cfg)
    for i in range(30):
        a.append("user/message", {"content": f"a{i}"})
        b.append("user/message", {"content": f"b{i}"})
    a.close()
    b.close()
    pooled = sum(len(v) for v in readback.CONSUMERS._idle.values())
    assert pooled >= 1  # the starts' proofs gave their consumers back
    for w in (a, b, a, b):
        got = [e.data.get("content") for e in read_log(writer_cfg, w.session_id).admitted
               if e.type == "user/message"]
        prefix = "a" if w is a else "b"
        assert got == [f"{prefix}{i}" for i in range(30)]
