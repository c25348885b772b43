"""The native delivery log (native/src/append/delivery.rs) a writer's sender uses on
the native append path: one callback for every record, outcomes per event id read
from the record's value, taken in once per flush (producers.kafka.KafkaSender.use_log).

Unit level: librdkafka's reports are played in by hand (the message's value, partition
and offset; an error object for a failure); tests/integration/test_writer.py drives it
through a real broker, timeouts included.
"""

from __future__ import annotations

from typing import Any

import pytest

from sessionstream.core import codec
from sessionstream.core.events import Draft
from sessionstream.producers import native_append as na
from sessionstream.producers.kafka import Delivery, DeliveryState

pytestmark = pytest.mark.skipif(na.why_not(codec.encode) is not None,
                                reason="the native extension is not built")


class Msg:
    """What the callback reads of a confluent-kafka Message."""

    def __init__(self, value: bytes, partition: int = 3, offset: int = -1) -> None:
        self._v, self._p, self._o = value, partition, offset

    def value(self) -> bytes:
        return self._v

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o


def records(n: int) -> list[tuple[str, bytes]]:
    """(event id, record) of ``n`` events as the native append path produces them."""
    from tests.unit.test_native_append import native_path

    path = native_path("dl")
    for d in [Draft("turn/start", {}), Draft("step/start", {})] + [
            Draft("assistant/chunk", {"text": f"c{i}"}) for i in range(n - 2)]:
        path.append(d)
    return [(eid, value) for _key, value, eid in path.sender.produced]


def new_log() -> tuple[Any, list[tuple[str, Any]]]:
    log = na.NativeAppend(codec.encode, None, na.writer_header(), "dl").delivery_log()
    failures: list[tuple[str, Any]] = []

    def on_error(eid: str, err: Any) -> Delivery:
        failures.append((eid, err))
        d = Delivery(eid)
        d.state = DeliveryState.POSSIBLY_PERSISTED
        return d

    log.set_on_error(on_error)
    return log, failures


def test_acknowledgements_are_taken_in_per_event_with_offsets_and_range() -> None:
    recs = records(5)
    log, failures = new_log()
    for i, (_, value) in enumerate(recs):
        log(None, Msg(value, partition=2, offset=100 + i))
    ids = [e for e, _ in recs]
    offsets: dict[str, int] = {}
    held = {e: v for e, v in recs}
    taken, waiting, part, lo, hi = log.harvest(ids, offsets, held)
    assert taken == ids and waiting == [] and (part, lo, hi) == (2, 100, 104)
    assert offsets == {e: 100 + i for i, e in enumerate(ids)} and held == {}
    assert log.unconfirmed(ids) == {} and log.reported == 5 and not failures
    assert log.forget(ids + ids[:1], ids[:2]) == ids[2:]
    assert log.get(ids[0]) is None and log.get(ids[2]) == (2, 102)


def test_a_failure_is_reported_for_exactly_its_event_and_an_ack_of_a_copy_wins() -> None:
    recs = records(4)
    ids = [e for e, _ in recs]
    log, failures = new_log()
    log(None, Msg(recs[0][1], offset=7))
    log("timed out", Msg(recs[1][1]))  # possibly persisted
    # recs[2] never reported: pending; recs[3] fails after an ack of another copy.
    log(None, Msg(recs[3][1], offset=9))
    log("late failure of the other copy", Msg(recs[3][1]))
    assert failures == [(ids[1], "timed out")]
    assert log.unconfirmed(ids) == {ids[1]: "possibly-persisted", ids[2]: "pending"}
    offsets: dict[str, int] = {}
    taken, waiting, *_ = log.harvest(ids, offsets, {})
    assert taken == [ids[0], ids[3]] and waiting == [ids[1], ids[2]]
    assert isinstance(log.get(ids[1]), Delivery)
    # The resent copy of the failed event lands: acknowledged from then on.
    log(None, Msg(recs[1][1], offset=12))
    assert log.unconfirmed(ids) == {ids[2]: "pending"}
    assert log.reported == 5


def test_a_report_whose_value_names_no_event_leaves_it_pending() -> None:
    recs = records(3)
    log, _failures = new_log()
    log(None, Msg(b"not a record", offset=1))
    log(None, Msg(recs[2][1][:12], offset=2))  # cut inside the envelope
    assert log.reported == 2 and log.unidentified == 2
    assert log.unconfirmed([recs[2][0]]) == {recs[2][0]: "pending"}


def test_a_sender_and_its_log_are_collected_together() -> None:
    """The log holds the sender's failure listener and the sender holds the log: the
    cycle must not keep a closed writer's sender alive."""
    import gc
    import weakref

    from sessionstream.producers.kafka import KafkaSender

    sender = KafkaSender("127.0.0.1:9", "t")  # no network until first use
    log, _ = new_log()
    assert sender.use_log(log)
    assert not sender.use_log(new_log()[0])  # one log per sender
    gone = weakref.ref(sender)
    del sender, log
    gc.collect()
    assert gone() is None
