"""The exceptions of the producers package (agent-side session writers).

Every error raised here derives from :class:`ProducerError`, itself a
:class:`~sessionstream.core.errors.SessionStreamError`, and its message says what to do
next. confluent-kafka and redis errors are translated at the boundary (``raise X(...)
from exc``); :func:`map_kafka_error` is the single place that decides what a
librdkafka error code means for us::

    SessionStreamError
    └── ProducerError
        ├── KafkaProducerError          a Kafka operation failed (carries .code, .retriable)
        │   ├── BrokerUnavailable       no broker reachable / no leader (check bootstrap)
        │   ├── TopicNotFound           the tenant's events topic does not exist: `topics ensure`
        │   ├── NotAuthorized           ACLs / credentials refuse us
        │   ├── MessageTooLarge         envelope above the topic's max message size (pre-checked)
        │   ├── QueueFull               local queue still full after bounded retries
        │   ├── DeliveryFailed          the broker definitively refused the record: NOT written
        │   ├── PossiblyPersisted       outcome unknown: may be in the log (resend; readers de-dup)
        │   │   └── DeliveryTimeout     message.timeout.ms expired (in flight or queued)
        │   └── ProducerFatal           idempotence state broken: open a new writer
        ├── UnconfirmedEvents           flush() could not confirm every event (lists event_ids)
        ├── LeaseError
        │   ├── LeaseUnavailable        another writer holds the session's lease
        │   ├── Fenced                  this writer lost its lease; it never writes again
        │   │                           (.not_admitted: the event ids readers refused)
        │   ├── ResumeRaceLost          open() lost a race with another resumer: its
        │   │                           lifecycle did not start (open again, or leave it)
        │   └── RedisUnavailable        the lease store / index cannot be reached
        │       └── LeaseExpired        Redis unreachable for a whole TTL: appends pause
        ├── SessionNotFound             open() of a session with no admitted events
        ├── SessionExists               create() of a session id that already has events
        ├── ReadBackError               a session's events could not be read back from Kafka
        └── WriterClosed                append/flush after close() (or after a fatal error)

:class:`~sessionstream.core.errors.AttachmentError` (an attachment store could not write
or read a blob) is the core's, shared with the sealed store of ``sessionstream.governance``;
it is re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaError

from sessionstream.core.errors import AttachmentError as AttachmentError  # re-exported
from sessionstream.core.errors import SessionStreamError
from sessionstream.core.settings import Env


class ProducerError(SessionStreamError):
    """Root of the producers package's errors."""


class KafkaProducerError(ProducerError):
    """A Kafka operation failed; ``code`` is the librdkafka error code (or None)."""

    hint = "see the Kafka client error for details"

    def __init__(self, message: str, *, code: int | None = None, retriable: bool = False) -> None:
        self.code = code
        self.retriable = retriable
        super().__init__(f"{message} — {self.hint}")


class BrokerUnavailable(KafkaProducerError):
    hint = (
        f"no Kafka broker answered: check {Env.KAFKA_BOOTSTRAP} and that Kafka runs "
        "(`sessionstream status`, `sessionstream up`)"
    )


class TopicNotFound(KafkaProducerError):
    hint = "create the tenant's topics with `sessionstream topics ensure`"


class NotAuthorized(KafkaProducerError):
    hint = (
        f"the broker refused this principal ({Env.KAFKA_SASL_USERNAME}) its credentials "
        "or ACLs: a tenant's principals reach only topics under sessionstream.<tenant>. "
        "(`sessionstream acl apply --tenant T`, docs/operations.md \"Access scopes\")")


class MessageTooLarge(KafkaProducerError):
    hint = (
        "the event is larger than the topic's max message size: spill large payloads "
        "to the attachment store (lower the attachment threshold) or raise max.message.bytes"
    )


class QueueFull(KafkaProducerError):
    hint = (
        "the local producer queue stayed full: the broker is slow or unreachable; "
        "call flush() more often or raise queue.buffering.max.messages"
    )


class DeliveryFailed(KafkaProducerError):
    hint = "the broker refused the record; it was not written"


class PossiblyPersisted(KafkaProducerError):
    hint = (
        "the record may or may not be in the log: resend it (same event_id; readers "
        "drop duplicates) or read back with confirm()"
    )


class DeliveryTimeout(PossiblyPersisted):
    hint = (
        "delivery timed out (message.timeout.ms); the record may still be in the log: "
        "resend it (readers drop duplicates by event_id) or confirm()"
    )


class ProducerFatal(KafkaProducerError):
    hint = (
        "the idempotent producer hit a fatal error and cannot continue: close this writer "
        "and open() the session again (a new writer takes the lease)"
    )


class UnconfirmedEvents(ProducerError):
    """flush() could not confirm every appended event; nothing is assumed lost or written."""

    def __init__(self, states: Mapping[str, str], *, timeout: float | None = None) -> None:
        self.states = dict(states)
        self.event_ids: Sequence[str] = list(states)
        shown = ", ".join(f"{eid} ({st})" for eid, st in list(states.items())[:10])
        more = f" and {len(states) - 10} more" if len(states) > 10 else ""
        when = f" within {timeout:g}s" if timeout is not None else ""
        super().__init__(
            f"{len(states)} event(s) not confirmed by the broker{when}: {shown}{more}. "
            "Call flush() again, resend_unconfirmed() (readers drop duplicates by event_id), "
            "or confirm() to learn what the log holds"
        )


class LeaseError(ProducerError):
    """The session lease could not be taken, kept or checked."""


class LeaseUnavailable(LeaseError):
    def __init__(self, session_id: str, owner: str, ttl_ms: int) -> None:
        self.session_id = session_id
        self.owner = owner
        self.ttl_ms = ttl_ms
        super().__init__(
            f"session {session_id!r} is leased by writer {owner!r} for another {ttl_ms} ms: "
            "wait for it to close or expire, or take it over explicitly (steal=True)"
        )


class Fenced(LeaseError):
    def __init__(self, session_id: str, epoch: int, detail: str = "",
                 not_admitted: Sequence[str] = ()) -> None:
        self.session_id = session_id
        self.epoch = epoch
        #: The event ids of this writer that readers refused (flush() names them; they
        #: are not part of the session and were never reported durable).
        self.not_admitted = list(not_admitted)
        super().__init__(
            f"writer of session {session_id!r} at epoch {epoch} lost its lease"
            f"{': ' + detail if detail else ''}; it will not write again — open() the "
            "session anew to continue (its last events may be rejected: see confirm())"
        )


class ResumeRaceLost(LeaseError):
    """open() could not start its lifecycle: another resumer's events won the race."""

    def __init__(self, session_id: str, epoch: int, detail: str) -> None:
        self.session_id = session_id
        self.epoch = epoch
        super().__init__(
            f"resuming session {session_id!r} at epoch {epoch} lost a race with another "
            f"writer: {detail}; nothing this resume wrote is part of the session — open() "
            "it again to continue (the other writer holds it now)"
        )


def redacted_url(url: str) -> str:
    """``url`` without its password (safe to show in an error or a log)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    cred, _, host = rest.rpartition("@")
    user = cred.split(":", 1)[0]
    return f"{scheme}://{user + ':***' if ':' in cred else user}@{host}"


class RedisUnavailable(LeaseError):
    def __init__(self, what: str, url: str | None = None) -> None:
        self.what = what
        where = f" at {redacted_url(url)}" if url else ""
        super().__init__(
            f"Redis (lease store and session index){where} failed during {what}: check "
            f"{Env.REDIS_URL} and that Redis runs (`sessionstream status`)"
        )


class LeaseExpired(RedisUnavailable):
    """The lease could not be renewed for a whole TTL: another writer may hold it now."""

    def __init__(self, session_id: str, epoch: int, unrenewed_ms: int, ttl_ms: int,
                 url: str | None = None) -> None:
        self.session_id = session_id
        self.epoch = epoch
        self.what = "lease renew"
        LeaseError.__init__(
            self,
            f"the lease of session {session_id!r} (epoch {epoch}) was not renewed for "
            f"{unrenewed_ms} ms, past its {ttl_ms} ms TTL, because Redis"
            f"{' at ' + redacted_url(url) if url else ''} is unreachable: another writer "
            "may hold the session now, so this append was refused (nothing produced). "
            f"Bring Redis back ({Env.REDIS_URL}, `sessionstream status`): the next "
            "append renews the lease if it is still ours, else raises Fenced — or open() "
            "the session anew",
        )


class SessionNotFound(ProducerError):
    """No admitted event of the session. ``epoch`` > 0: its lease was taken (a create()
    that died before its ``session/start`` was admitted), so the id was never started."""

    def __init__(self, session_id: str, epoch: int = 0) -> None:
        self.session_id = session_id
        self.epoch = epoch
        if epoch > 0:
            why = (f"session {session_id!r} was never started: its lease was taken (epoch "
                   f"{epoch}) but no session/start of it was admitted (a create() that did "
                   "not finish); create() it with this id, which starts it at a new epoch")
        else:
            why = (f"session {session_id!r} has no admitted events in this tenant's topic: "
                   "check the session id and tenant, or create() it")
        super().__init__(why)


class SessionExists(ProducerError):
    """The session's log holds admitted events (it was started): open() resumes it."""

    def __init__(self, session_id: str, detail: str = "") -> None:
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} already exists{f' ({detail})' if detail else ''}: "
            "open() it to resume (steal=True if its last writer crashed), or pick a new id"
        )


class ReadBackError(ProducerError):
    """Reading a session's events back from Kafka failed."""


class WriterClosed(ProducerError):
    def __init__(self, session_id: str, why: str = "it was closed") -> None:
        super().__init__(
            f"the writer of session {session_id!r} cannot be used: {why}; open() the session again"
        )


# --- librdkafka error codes -> our errors ---------------------------------------------------

_E = KafkaError

#: Every librdkafka code a producer is expected to meet, and what it means for us.
#: Codes not listed fall back by their flags: fatal -> ProducerFatal, retriable ->
#: PossiblyPersisted (never assume "failed" means "not written"), else DeliveryFailed.
KAFKA_ERROR_MAP: Mapping[int, type[KafkaProducerError]] = {
    # transport and metadata: nothing reached a broker (or its leader)
    _E._TRANSPORT: BrokerUnavailable,
    _E._ALL_BROKERS_DOWN: BrokerUnavailable,
    _E._RESOLVE: BrokerUnavailable,
    _E._TIMED_OUT: BrokerUnavailable,
    _E._DESTROY: BrokerUnavailable,
    _E.BROKER_NOT_AVAILABLE: BrokerUnavailable,
    _E.LEADER_NOT_AVAILABLE: BrokerUnavailable,
    _E.NOT_LEADER_FOR_PARTITION: BrokerUnavailable,
    _E.NOT_ENOUGH_REPLICAS: BrokerUnavailable,
    _E.NETWORK_EXCEPTION: PossiblyPersisted,
    _E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: PossiblyPersisted,
    _E.REQUEST_TIMED_OUT: DeliveryTimeout,
    _E._MSG_TIMED_OUT: DeliveryTimeout,
    _E._TIMED_OUT_QUEUE: DeliveryTimeout,
    _E._PURGE_INFLIGHT: PossiblyPersisted,
    _E._PURGE_QUEUE: DeliveryFailed,  # purged before it was ever sent
    # topics
    _E._UNKNOWN_TOPIC: TopicNotFound,
    _E.UNKNOWN_TOPIC_OR_PART: TopicNotFound,
    _E._UNKNOWN_PARTITION: TopicNotFound,
    _E.UNKNOWN_TOPIC_ID: TopicNotFound,
    # authorization
    _E.TOPIC_AUTHORIZATION_FAILED: NotAuthorized,
    _E.CLUSTER_AUTHORIZATION_FAILED: NotAuthorized,
    _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: NotAuthorized,
    _E.GROUP_AUTHORIZATION_FAILED: NotAuthorized,
    _E.SASL_AUTHENTICATION_FAILED: NotAuthorized,
    _E._AUTHENTICATION: NotAuthorized,
    _E._SSL: NotAuthorized,
    # size
    _E.MSG_SIZE_TOO_LARGE: MessageTooLarge,
    _E.RECORD_LIST_TOO_LARGE: MessageTooLarge,
    _E.INVALID_MSG_SIZE: MessageTooLarge,
    # local queue
    _E._QUEUE_FULL: QueueFull,
    # record refused: definitively not written
    _E.INVALID_RECORD: DeliveryFailed,
    _E.INVALID_MSG: DeliveryFailed,
    _E.INVALID_TIMESTAMP: DeliveryFailed,
    _E.INVALID_REQUIRED_ACKS: DeliveryFailed,
    _E.POLICY_VIOLATION: DeliveryFailed,
    _E.KAFKA_STORAGE_ERROR: DeliveryFailed,
    _E.UNSUPPORTED_COMPRESSION_TYPE: DeliveryFailed,
    _E.UNSUPPORTED_VERSION: DeliveryFailed,
    _E.UNSUPPORTED_FOR_MESSAGE_FORMAT: DeliveryFailed,
    _E.THROTTLING_QUOTA_EXCEEDED: DeliveryFailed,
    _E._INVALID_ARG: DeliveryFailed,
    _E._BAD_MSG: DeliveryFailed,
    _E._VALUE_SERIALIZATION: DeliveryFailed,
    _E._KEY_SERIALIZATION: DeliveryFailed,
    # idempotence broken: this producer instance cannot go on
    _E._FATAL: ProducerFatal,
    _E._FENCED: ProducerFatal,
    _E._GAPLESS_GUARANTEE: ProducerFatal,
    _E._INCONSISTENT: ProducerFatal,
    _E.OUT_OF_ORDER_SEQUENCE_NUMBER: ProducerFatal,
    _E.INVALID_PRODUCER_EPOCH: ProducerFatal,
    _E.UNKNOWN_PRODUCER_ID: ProducerFatal,
    _E.PRODUCER_FENCED: ProducerFatal,
    _E.INVALID_PRODUCER_ID_MAPPING: ProducerFatal,
    _E.DUPLICATE_SEQUENCE_NUMBER: ProducerFatal,
}


def map_kafka_error(err: KafkaError, *, what: str = "producing") -> KafkaProducerError:
    """Translate a librdkafka error into our tree (never raises; unknown codes fall back)."""
    code = err.code()
    cls = KAFKA_ERROR_MAP.get(code)
    if cls is None or (cls is not ProducerFatal and err.fatal()):
        cls = ProducerFatal if err.fatal() else (
            PossiblyPersisted if err.retriable() else DeliveryFailed
        )
    return cls(f"{what}: {err.name()}: {err.str()}", code=code, retriable=err.retriable())
