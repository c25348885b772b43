"""librdkafka errors map onto the producers exception tree, completely."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from sessionstream.core.errors import SessionStreamError
from sessionstream.producers import errors as pe

ALL_CODES = sorted(
    {getattr(KafkaError, n) for n in dir(KafkaError)
     if (n.isupper() or n.startswith("_")) and not n.startswith("__")
     and isinstance(getattr(KafkaError, n), int)}
)


@pytest.mark.parametrize("code", ALL_CODES)
def test_every_kafka_error_code_maps_to_a_producer_error(code: int) -> None:
    mapped = pe.map_kafka_error(KafkaError(code))
    assert isinstance(mapped, pe.KafkaProducerError)
    assert isinstance(mapped, SessionStreamError)
    assert mapped.code == code
    assert " — " in str(mapped)  # every message carries a hint on what to do


@pytest.mark.parametrize("code, cls", sorted(pe.KAFKA_ERROR_MAP.items()))
def test_handled_codes_map_to_their_declared_class(code: int, cls: type) -> None:
    assert type(pe.map_kafka_error(KafkaError(code))) is cls


def test_timeouts_are_possibly_persisted_never_plain_failures() -> None:
    for code in (KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
        assert isinstance(pe.map_kafka_error(KafkaError(code)), pe.PossiblyPersisted)


def test_unknown_retriable_codes_are_treated_as_possibly_persisted() -> None:
    err = KafkaError(KafkaError.REBALANCE_IN_PROGRESS, retriable=True)
    assert isinstance(pe.map_kafka_error(err), pe.PossiblyPersisted)


def test_fatal_flag_wins() -> None:
    err = KafkaError(KafkaError.INVALID_MSG, fatal=True)
    assert isinstance(pe.map_kafka_error(err), pe.ProducerFatal)


def test_unconfirmed_events_names_the_event_ids() -> None:
    exc = pe.UnconfirmedEvents({"e1": "pending", "e2": "possibly-persisted"}, timeout=2)
    assert exc.event_ids == ["e1", "e2"]
    assert "e1 (pending)" in str(exc) and "resend_unconfirmed" in str(exc)


def test_every_producer_error_derives_from_the_root() -> None:
    for obj in vars(pe).values():
        if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == pe.__name__:
            assert issubclass(obj, pe.ProducerError)


def test_redis_errors_name_the_url_without_its_password() -> None:
    exc = pe.RedisUnavailable("lease acquire", "redis://u:hunter2@db:6379/0")
    assert "redis://u:***@db:6379/0" in str(exc) and "hunter2" not in str(exc)
    assert "SESSIONSTREAM_REDIS_URL" in str(exc)
    expired = pe.LeaseExpired("s1", 3, 31_000, 30_000, "redis://db:6379/0")
    assert isinstance(expired, pe.RedisUnavailable)
    assert "Fenced" in str(expired) and "open()" in str(expired)


def test_broker_unavailable_says_what_to_do() -> None:
    msg = str(pe.BrokerUnavailable("no Kafka broker at 127.0.0.1:1 answered"))
    assert "127.0.0.1:1" in msg and "SESSIONSTREAM_KAFKA_BOOTSTRAP" in msg
    assert "sessionstream status" in msg


def test_librdkafka_log_lines_are_rate_limited_per_facility() -> None:
    import logging

    from sessionstream.producers.kafka_clients import RateLimit

    now = [0.0]
    f = RateLimit(burst=2, window_s=10, clock=lambda: now[0])

    def rec(fac: str) -> logging.LogRecord:
        return logging.LogRecord("x", logging.ERROR, "", 0, "%s [%s] %s",
                                 (fac, "rdkafka#producer-1", "down"), None)

    assert [f.filter(rec("FAIL")) for _ in range(4)] == [True, True, False, False]
    assert f.filter(rec("OTHER"))
    now[0] = 11.0
    r = rec("FAIL")
    assert f.filter(r) and "2 similar line(s) suppressed" in r.getMessage()
