"""The writer's batch append (``SessionWriter.append_many``) on the native path against
the reference: ``NativePath.append_many`` (one ``Appender.append_many`` call per run of
items the extension holds the rules of, the one-append route for the others) and
``ReferencePath.append_many`` (one ``Session.append`` per item), as they ship.

The sender here records what the paths produce, and runs the native batch the way
``KafkaSender.produce_native`` does, with a recording stand-in for confluent-kafka's
``Producer.produce`` and ``poll``; the writer over the real broker is
tests/integration/test_writer.py. The extension's own stops (a stateful type, the
record limit, a full queue, an error of the id source) are tested on ``append_many``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core import codec
from sessionstream.core.events import CountingClock, Draft, SequentialIds
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.session import Session
from sessionstream.producers import native_append as na
from tests.unit.strategies import random_log
from tests.unit.test_native_append import (
    FixedNonceAesGcm,
    Sender,
    bad_drafts,
    cipher,
    native,
    native_path,
    outcome,
    reference_path,
)


class Producer:
    """Records what the batch hands to ``produce`` and how often it polls."""

    def __init__(self, refuse_after: int | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.polls = 0
        self.refuse_after = refuse_after

    def produce(self, *args: Any) -> None:
        if self.refuse_after is not None and len(self.calls) >= self.refuse_after:
            raise BufferError("Local: Queue full")
        self.calls.append(args)

    def poll(self, timeout: float) -> int:
        assert timeout == 0
        self.polls += 1
        return 0


class Writer:
    """The writer's bookkeeping the batch fills (SessionWriter._bytes, _mine, ...)."""

    def __init__(self) -> None:
        self.records: dict[str, bytes] = {}
        self.mine: list[Any] = []
        self.waiting: list[str] = []
        self.sent: list[str] = []
        self.since = 0


def batch(path: na.NativeAppend, session: Session, items: list[Any], p: Producer,
          w: Writer, *, limit: int = 1 << 30, poll_every: int = 16, log: Any = "log",
          start: int = 0) -> tuple[int, Any]:
    assert path.append_many is not None
    out = path.append_many(session, items, start, na.BatchProduce(
        draft=Draft, seal=path.seal_args, produce=p.produce, poll=p.poll, topic="topic",
        log=log, sent=w.sent, since_poll=w.since, poll_every=poll_every, key=b"key",
        limit=limit, records=w.records, mine=w.mine, waiting=w.waiting))
    w.since = out.since_poll
    return out.next, out.left


class BatchSender(Sender):
    """A sender with a native log, as ``KafkaSender.produce_native`` runs a batch:
    the records the extension hands to the producer are produced too, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.producer = Producer()
        self.sent: list[str] = []  # the ids of the batch's records (the sender's own list)
        self.since = 0

    def produce_native(self, run: Any) -> tuple[bool, Any]:
        before = len(self.producer.calls)
        try:
            result, self.since = run(self.producer.produce, self.producer.poll, "topic",
                                     self.log, self.sent, self.since)
        finally:
            new = self.producer.calls[before:]
            ids = self.sent[len(self.sent) - len(new):]
            self.produced += [(key, value, eid) for (_t, value, key, _p, _l), eid
                              in zip(new, ids, strict=True)]
        return True, result


def item_of(draft: Draft, as_pair: bool) -> Any:
    plain = (draft.surface_op is None and not draft.source_event_seqs
             and draft.turn_id is None and draft.step_id is None)
    return (draft.type, draft.data) if as_pair and plain else draft


def run_many(path: Any, items: list[Any]) -> list[tuple[str, Any]]:
    """``path.append_many`` as a writer's caller sees it, over every item: an item
    refused raises (those before it are produced), the caller goes on after it."""
    got: list[tuple[str, Any]] = []
    i = 0
    while i < len(items):
        before = len(path.mine)
        r = outcome(lambda i=i: path.append_many(items[i:]))
        got.extend(("ok", e) for e in path.mine[before:])
        i += len(path.mine) - before
        if r[0] == "error":
            got.append(r)
            i += 1
        else:
            assert i == len(items)
    return got


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.booleans(), st.data())
def test_batch_append_matches_one_python_append_per_item(seed: int, encrypted: bool,
                                                        data: st.DataObject) -> None:
    """Same outcome per item (event or error class and message), same events, and the
    records produced are the reference's bytes, in order, each with its bookkeeping."""
    log = random_log(seed, steps=50)
    sid = log[0].session_id
    ref = reference_path(sid, cipher(FixedNonceAesGcm()) if encrypted else None)
    nat = native_path(sid, cipher() if encrypted else None)
    nat.sender = sender = BatchSender()
    items: list[Any] = []
    for e in log[1:]:
        if e.ignorable:
            continue
        good = Draft(e.type, thaw(e.data), e.surface_op, e.source_event_seqs, e.turn_id,
                     e.step_id)
        if data.draw(st.booleans()):
            items.append(data.draw(bad_drafts(good)))
        items.append(item_of(good, data.draw(st.booleans())))
    want = run_many(ref, items)
    got = run_many(nat, items)
    assert [g[0] for g in got] == [x[0] for x in want]
    for g, x in zip(got, want, strict=True):
        assert g[1] == x[1]  # the same event, or the same error class and message
    assert nat.session.events == ref.session.events
    assert [v for _, v, _ in sender.produced] == [v for _, v, _ in ref.sender.produced]
    assert [eid for _, _, eid in sender.produced] == [e.event_id for e in nat.mine]
    assert [e.event_id for e in nat.mine] == nat.waiting == list(nat.records)
    assert len(sender.sent) == len(sender.producer.calls)  # the batch's own records
    assert sender.producer.polls == len(sender.sent) // 16  # (POLL_EVERY)


def test_the_native_path_produces_a_batch_of_chunks_in_the_extension() -> None:
    """The batch the differential test compares is the extension's: chunks are produced
    by ``Appender.append_many``, the stateful items in between by the one-append route."""
    ref, nat = reference_path("many"), native_path("many")
    nat.sender = sender = BatchSender()
    items: list[Any] = [("turn/start", {}), ("step/start", {}), *chunks(20),
                        ("step/end", {}), ("step/start", {}), *chunks(3)]
    assert ref.append_many(items) == nat.append_many(items)
    assert len(sender.producer.calls) == 23 and len(sender.sent) == 23
    assert [v for _, v, _ in sender.produced] == [v for _, v, _ in ref.sender.produced]
    assert sender.producer.polls == 1  # one poll per 16 records (POLL_EVERY)


def opened(sid: str) -> tuple[Session, na.NativeAppend]:
    s = Session.create(sid, clock=CountingClock(), ids=SequentialIds(sid))
    for d in (Draft("turn/start", {}), Draft("step/start", {}),
              Draft("request/header", {"provider": "p", "model": "m"})):
        s.append(d)
    return s, native(None, sid)


def chunks(n: int, size: int = 10) -> list[tuple[str, dict[str, Any]]]:
    return [("assistant/chunk", {"text": "x" * size, "index": i}) for i in range(n)]


def test_batch_stops_at_a_stateful_type_and_a_foreign_item_with_nothing_changed() -> None:
    s, path = opened("stops")
    p, w = Producer(), Writer()
    items: list[Any] = [*chunks(3), ("step/end", {}), *chunks(2), ["not", "a draft"]]
    j, left = batch(path, s, items, p, w)
    assert (j, left) == (3, None) and len(s.events) == 4 + 3  # step/end not started
    assert s.append(Draft("step/end", {})).type == "step/end"
    assert s.append(Draft("step/start", {})).type == "step/start"
    j, left = batch(path, s, items, p, w, start=4)
    assert (j, left) == (6, None) and len(p.calls) == 5 == len(w.mine)


def test_batch_hands_back_a_record_over_the_limit_stamped_but_not_produced() -> None:
    s, path = opened("limit")
    p, w = Producer(), Writer()
    items = [*chunks(2), ("assistant/chunk", {"text": "y" * 600, "index": 9}), *chunks(1)]
    small = max(len(c) for c in (codec.encode(s.events[-1]),)) + 200
    j, left = batch(path, s, items, p, w, limit=small)
    assert j == 2 and left is not None
    event, value = left
    assert s.events[-1] is event and event.data["index"] == 9  # in the session, as append
    assert value == codec.encode(event) and len(value) + 3 > small
    assert len(p.calls) == 2 and event.event_id not in w.records and w.mine[-1] is not event


def test_batch_hands_back_the_record_a_full_queue_refused_and_polls_on_schedule() -> None:
    s, path = opened("full")
    p, w = Producer(refuse_after=5), Writer()
    j, left = batch(path, s, chunks(8), p, w, poll_every=2)
    assert j == 5 and left is not None and left[0] is s.events[-1]
    assert left[1] == codec.encode(left[0])
    assert len(w.mine) == len(w.sent) == len(w.records) == 5  # the refused one: not kept
    assert p.polls == 2 and w.since == 1


def test_batch_propagates_an_error_of_the_id_source_after_what_it_produced() -> None:
    sid = "ids"
    seq = SequentialIds(sid)
    calls = [0]
    budget = [1 << 30]

    def ids() -> str:
        calls[0] += 1
        if calls[0] > budget[0]:
            raise RuntimeError("id source down")
        return seq()

    s = Session.create(sid, clock=CountingClock(), ids=ids)
    for d in (Draft("turn/start", {}), Draft("step/start", {}),
              Draft("request/header", {"provider": "p", "model": "m"})):
        s.append(d)
    budget[0] = calls[0] + 2  # two more ids, then the source fails
    path = native(None, sid)
    p, w = Producer(), Writer()
    with pytest.raises(RuntimeError, match="id source down"):
        batch(path, s, chunks(5), p, w)
    assert len(p.calls) == len(w.sent) == 2 and len(s.events) == 6
