"""The compaction agent against the real Kafka and Redis."""

from __future__ import annotations

import pytest

from sessionstream.core.compaction import Attempt, Budget
from sessionstream.core.events import SurfaceOp
from sessionstream.core.messages import Kind
from sessionstream.core.session import Session
from sessionstream.core.surface import token_estimate
from sessionstream.producers.compactor import Compactor
from sessionstream.producers.writer import SessionWriter, WriterConfig, read_log
from tests.integration.writers import writer_cfg

__all__ = ["writer_cfg"]

pytestmark = pytest.mark.integration

WORDS = " ".join(f"row{i}" for i in range(80))


def work_turn(w: SessionWriter, n: int) -> None:
    """A completed turn with a tool call whose result carries an operation id."""
    w.append("turn/start", {})
    w.append("step/start", {})
    w.append("user/message", {"content": f"task {n}: {WORDS}"})
    w.append("request/header", {"provider": "p", "model": "m"})
    call = {"call_id": f"call-{n}", "name": "run_query", "arguments": {"n": n}}
    w.append("assistant/message", {"content": "querying", "tool_calls": [call]})
    w.append("tool/call", call)
    w.append("tool/result", {"call_id": f"call-{n}", "status": "ok", "content": WORDS * 2,
                             "operation_id": f"op-{n}"})
    w.append("step/end", {})
    w.append("step/start", {})
    w.append("request/header", {"provider": "p", "model": "m"})
    w.append("assistant/message", {"content": f"done {n}: {WORDS}"})
    w.append("step/end", {})
    w.append("turn/end", {"reason": "completed"})


def written_session(cfg: WriterConfig, turns: int = 5) -> str:
    w = SessionWriter.create(cfg)
    w.append("todo/add", {"id": "t1", "text": "ship the report"})
    for n in range(turns):
        work_turn(w, n)
    w.close()
    return w.session_id


def test_the_agent_compacts_a_written_session(writer_cfg: WriterConfig) -> None:
    sid = written_session(writer_cfg)
    before = Session.from_events(read_log(writer_cfg, sid).admitted)
    report = Compactor(writer_cfg, budget=Budget(keep_recent=4)).compact(sid, trigger="manual")
    assert report.outcome == "completed", report.reason
    rb = read_log(writer_cfg, sid)
    assert rb.rejections == []
    session = Session.from_events(rb.admitted)
    tail = [e.type for e in session.events[before.next_seq:]]
    assert tail == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]
    replace = session.events[before.next_seq + 2]
    assert replace.surface_op is SurfaceOp.REPLACE
    messages = session.derive_messages()
    assert messages[0].kind is Kind.SUMMARY and messages[0].seqs == (replace.seq,)
    assert all(f"op-{n}" in str(messages[0].content) for n in range(4))
    assert "t1" in str(messages[0].content)
    assert token_estimate(messages) < token_estimate(before.derive_messages())
    assert report.surface_tokens_after < report.surface_tokens_before
    assert replace.writer.epoch == session.events[before.next_seq - 1].writer.epoch + 1


def test_events_written_while_the_agent_summarizes_are_kept(writer_cfg: WriterConfig) -> None:
    sid = written_session(writer_cfg, turns=4)
    late_ids: list[str] = []

    def owner_writes_meanwhile(_attempt: Attempt) -> None:
        w = SessionWriter.open(writer_cfg, sid)  # the owner resumes and keeps working
        work_turn(w, 99)
        w.flush(10)
        late_ids.extend(e.event_id for e in w.session.events[-14:])
        w.close()

    agent = Compactor(writer_cfg, budget=Budget(keep_recent=4),
                      on_summarized=owner_writes_meanwhile)
    report = agent.compact(sid, trigger="manual")
    assert report.outcome == "completed", report.reason
    assert report.arrived_meanwhile == 14  # the owner's end-seed + a 13-event turn
    rb = read_log(writer_cfg, sid)
    assert rb.rejections == []
    ids = [e.event_id for e in rb.admitted]
    assert all(i in ids for i in late_ids)
    session = Session.from_events(rb.admitted)
    assert [e.seq for e in session.events[report.commit_seq:]] == [
        a["seq"] for a in report.appended]
    messages = session.derive_messages()
    assert messages[0].kind is Kind.SUMMARY
    assert "done 99" in str(messages[-1].content)  # the late turn is on the surface
    # and a later resume of the owner sees the compacted surface
    w = SessionWriter.open(writer_cfg, sid)
    assert w.session.derive_messages()[0].kind is Kind.SUMMARY
    w.close()
