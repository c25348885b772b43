"""Deletion, legal holds and retention: the Python API behind ``sessionstream delete``.

Deleting a session (or some of its data classes) is **crypto-shredding** plus purging:

1. refuse under a legal hold on the session or its tenant (:class:`LegalHold`);
2. take the session's lease (fencing a live writer: its later writes are rejected as a
   zombie's) and destroy its data keys of the classes (the key store keeps a tombstone):
   its content in Kafka — every replica, every backup — and in attachments can no
   longer be opened; readers get the defined placeholders;
3. purge the session's content from Redis: the views and states of every generation,
   its change streams, its entries in the tenant's change feed and session index, its
   lease, and (for ``raw``) its attachments. Kept: each row's admission state and
   watermark, the fencing epoch, the writer's offset index, the key tombstones;
4. optionally (``complete=True``; the retention job always) *retire*: rewrap the
   tenant's live data keys with a new tenant key version and destroy the versions that
   wrapped the destroyed keys (:meth:`KeyStore.retire`), so that no copy of a wrapped
   key taken before — a key file, an AOF, an RDB, a backup — opens anything;
5. append a ``session/shred`` audit event (classes, scope, principal, reason, time) to
   the session's log through the :class:`~sessionstream.governance.audit.AuditLog` port
   (the composition root wires the writer-backed one); it is metadata, so it stays
   readable. The projection processor,
   meeting it, refolds the session from the log — content as placeholders — the same
   row a replay builds.

Deleting a session never undoes what its tools did in other systems (seed §4.3): the
report says so, and lists the operation ids to follow up.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.errors import LegalHold, SessionStreamError
from sessionstream.core.privacy import ALL_CLASSES, DataClass
from sessionstream.core.rows import CHANGE_FIELD, KeySpace, SessionRow
from sessionstream.core.settings import Env
from sessionstream.governance.audit import AuditLog, SessionUnknown
from sessionstream.governance.keys import Hold, KeyStore, Retirement

__all__ = ["DeletionReport", "Governance", "RetentionItem", "RetentionReport",
           "SessionUnknown", "parse_classes"]

log = logging.getLogger(__name__)

#: Entries per XRANGE page when a deletion reads a tenant change feed.
FEED_PAGE = 1000

CLEAR_TENANT_WARNING = (
    f"this tenant writes content clear ({Env.ENCRYPTION}=off): what it wrote clear "
    "is not deleted — it stays readable in the log, and a refold of the session (a replay, "
    "the worker's after the audit event) writes it into Redis again; only sealed content "
    "was deleted"
)

EXTERNAL_EFFECTS_NOTE = (
    "deleting a session does not undo its side effects in other systems (tool calls that "
    "changed files, tickets, payments…); follow up on the operation ids listed"
)


@dataclass
class DeletionReport:
    session_id: str
    classes: list[str]
    shredded: list[str]  # classes whose key this call destroyed (others already were)
    audit_seq: int | None
    redis_keys_deleted: int
    feed_entries_deleted: int
    attachments_deleted: int
    operation_ids: list[str] = field(default_factory=list)
    note: str = EXTERNAL_EFFECTS_NOTE
    #: ``keys retire`` run by ``complete=True``: None when not run (the deletion is then
    #: complete at the next retirement, e.g. the retention job's)
    retirement: Retirement | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["retirement"] = None if self.retirement is None else self.retirement.to_json()
        return out


@dataclass
class RetentionItem:
    session_id: str
    data_class: str
    age_ms: int
    action: str  # "shredded" | "would-shred" | "held"
    detail: str = ""


@dataclass
class RetentionReport:
    dry_run: bool
    checked: int
    items: list[RetentionItem]
    retirement: Retirement | None = None  # the retirement the run ended with (not dry)

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "checked": self.checked,
                "items": [dataclasses.asdict(i) for i in self.items],
                "retirement": None if self.retirement is None else self.retirement.to_json()}


def parse_classes(names: Iterable[str]) -> tuple[DataClass, ...]:
    """``raw``/``surface``/``business``/``all`` → the classes, in their fixed order."""
    wanted: set[DataClass] = set()
    for name in names:
        if name == "all":
            wanted |= set(ALL_CLASSES)
            continue
        try:
            wanted.add(DataClass(name))
        except ValueError:
            raise SessionStreamError(
                f"--class {name!r} is not a data class: use raw, surface, business, "
                "reasoning or all"
            ) from None
    return tuple(c for c in ALL_CLASSES if c in wanted) or ALL_CLASSES


class Governance:
    """Deletion, holds and retention for one tenant (the composition root builds it).

    ``cfg`` names the tenant: its ``tenant``, ``key_prefix``, ``cipher`` and
    ``attachment_dir`` (the tenant's ``producers.writer.WriterConfig`` has them);
    ``redis`` is a synchronous client of the projections' Redis; ``audit`` the session
    log the audit events go to (``producers.audit.WriterAuditLog`` over the same config);
    ``feed_page`` the entries per XRANGE when a deletion reads a tenant change feed.
    """

    def __init__(self, cfg: Any, store: KeyStore, redis: Any, *, audit: AuditLog,
                 principal: str = "operator", retention: Sequence[tuple[str, int]] = (),
                 clock: Callable[[], int] | None = None, feed_page: int = FEED_PAGE,
                 retire_grace_s: float | None = None) -> None:
        if feed_page < 1:
            raise ValueError(f"feed_page={feed_page}: a page holds at least one entry")
        self.feed_page = feed_page
        self.retire_grace_s = retire_grace_s  # None: the key store's default wait
        self.cfg = cfg
        self.store = store
        self.redis = redis
        self.audit = audit
        self.principal = principal
        self.retention = dict(retention)
        self.tenant: str = cfg.tenant
        self.keys = KeySpace(self.tenant, cfg.key_prefix)
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)

    # -- deletion --------------------------------------------------------------------------
    def delete(self, session_id: str, classes: Sequence[DataClass] = ALL_CLASSES, *,
               reason: str = "", principal: str | None = None,
               scope: str = "delete", complete: bool = False) -> DeletionReport:
        """Crypto-shred ``classes`` of the session, audit it, purge its Redis and blobs;
        ``complete``: then :meth:`retire` (old copies of the keys open nothing after).

        Raises :class:`LegalHold` under a hold, :class:`SessionUnknown` for a session
        with no events.
        """
        who = principal or self.principal
        hold = self.store.hold_on(self.tenant, session_id)
        if hold is not None:
            raise LegalHold(hold.scope, hold.reason)
        # Taking the session fences its live writer before any key is destroyed.
        with self.audit.session(session_id, principal=who) as session:
            operation_ids = sorted({
                str(e.data["operation_id"]) for e in session.events
                if e.type == "tool/result" and e.data.get("operation_id")})
            done = self.store.shred(self.tenant, session_id, tuple(classes), principal=who,
                                    reason=reason or scope)
            # Purge first: the processor that folds the audit event then finds no
            # content to keep and refolds the session from the log (placeholders).
            redis_keys, feed = self.purge_redis(session_id)
            audit_seq = session.record("session/shred", {
                "classes": [c.value for c in classes], "scope": scope, "principal": who,
                "reason": reason, "shredded_at": self._clock()})
        redis_keys += self.redis.delete(self.keys.lease(session_id))  # released just now
        blobs = 0
        if DataClass.RAW in classes and self.cfg.cipher is not None and \
                self.cfg.attachment_dir is not None:
            from sessionstream.governance.opener import SealedAttachmentStore

            blobs = SealedAttachmentStore(self.cfg.attachment_dir, self.cfg.cipher,
                                          session_id).purge()
        log.info("deleted classes %s of a session (audit seq %d): %d Redis keys, %d feed "
                 "entries, %d attachments purged", [c.value for c in classes], audit_seq,
                 redis_keys, feed, blobs)
        return DeletionReport(session_id, [c.value for c in classes],
                              [s.data_class.value for s in done], audit_seq, redis_keys, feed,
                              blobs, operation_ids,
                              retirement=self.retire() if complete else None,
                              warnings=[] if self._seals() else [CLEAR_TENANT_WARNING])

    def _seals(self) -> bool:
        """Whether the tenant's writers seal content (a tenant may opt out)."""
        cipher = self.cfg.cipher
        return cipher is not None and bool(getattr(cipher, "enabled", True))

    def retire(self) -> Retirement:
        """Complete every deletion of the tenant so far (:meth:`KeyStore.retire`)."""
        done = self.store.retire(self.tenant, grace_s=self.retire_grace_s)
        log.info("retired tenant key versions %s (current %d, %d data keys rewrapped)%s",
                 done.destroyed, done.version, done.rewrapped,
                 f"; still held here: {done.pending}" if done.pending else "")
        return done

    def purge_redis(self, session_id: str) -> tuple[int, int]:
        """Purge the session's content from Redis: views and states of every generation,
        its change streams, its session-index and tenant change-feed entries, its lease
        and the inline views its framework backends kept (``KeySpace.inline_views``).

        Kept (metadata, needed to fold the audit event in order): each row's admission
        state, watermark and meta, the fencing epoch, the writer's offset index and the
        data-key tombstones. Returns (keys and fields deleted, feed entries deleted).

        No SCAN: the keys are named from :class:`KeySpace` for every generation from 0 to
        the tenant's highest (:meth:`KeySpace.generations`), so the cost does not grow with
        the keyspace. Round trips: one for the generation counter and pointer, one for the
        session's keys (one slot: the rows' field names, the change streams and lease
        deleted), one to HDEL the rows' content fields (when there are any), one for the
        index entries and the first page of each generation's tenant feed, then one per
        further page (it also XDELs the page before), one for the last XDEL. The tenant
        feed is the one read of a whole structure left: its entries' ids are not recorded
        anywhere else (the session's own change stream gets other ids and is capped far
        shorter), so each feed is read in pages of ``feed_page`` entries (XRANGE with
        COUNT) and never held whole; it is capped (``feed_maxlen``), so that cost is
        bounded by the feed's cap, not by the keyspace.
        """
        r = self.redis
        ks = self.keys
        counter, pointer = r.mget([ks.generation_counter(), ks.generation()])
        gens = ks.generations(counter, pointer)
        deleted = 0
        rows = [ks.session_row(session_id, g) for g in gens]
        with r.pipeline(transaction=False) as pipe:  # the session's slot
            for key in rows:
                pipe.hkeys(key)
            pipe.smembers(ks.inline_views(session_id))
            for g in gens:
                pipe.delete(ks.session_changes(session_id, g))
            pipe.delete(ks.lease(session_id))
            out = pipe.execute()
        views = sorted(_text(v) for v in out[len(rows)])
        deleted += sum(int(n) for n in out[len(rows) + 1:])
        if views:  # the framework backends' inline views (ADR 0024): content, whole
            deleted += int(r.delete(*[k for v in views for k in (
                ks.inline_view(session_id, v), ks.inline_view_chunks(session_id, v))],
                ks.inline_views(session_id)))
        content = {key: [f for f in (_text(f) for f in names)
                         if f.startswith(SessionRow.CONTENT_PREFIXES)]
                   for key, names in zip(rows, out[:len(rows)], strict=True)}
        content = {key: fields for key, fields in content.items() if fields}
        if content:
            with r.pipeline(transaction=False) as pipe:
                for key, fields in content.items():
                    pipe.hdel(key, *fields)
                deleted += sum(int(n) for n in pipe.execute())
        page_size = self.feed_page
        feeds = [ks.tenant_changes(g) for g in gens]
        with r.pipeline(transaction=False) as pipe:  # the tenant's slot
            for g in gens:
                pipe.zrem(ks.sessions_index(g), session_id)
            for feed in feeds:
                pipe.xrange(feed, "-", "+", count=page_size)
            pages = dict(zip(feeds, pipe.execute()[len(gens):], strict=True))
        feed_deleted = 0
        # One page per feed in hand at a time: its entries of the session are XDELed in
        # the same round trip that reads the feed's next page (after the page's last id;
        # deleting that id does not move the cursor), so memory stays one page per feed.
        while pages:
            calls: list[tuple[str, str]] = []
            with r.pipeline(transaction=False) as pipe:
                for feed, page in pages.items():
                    ids = [_text(eid) for eid, fields in page
                           if _names_session(fields, session_id)]
                    if ids:
                        pipe.xdel(feed, *ids)
                        calls.append(("xdel", feed))
                    if len(page) >= page_size:
                        pipe.xrange(feed, "(" + _text(page[-1][0]), "+", count=page_size)
                        calls.append(("xrange", feed))
                out = pipe.execute() if calls else []
            pages = {}
            for (call, feed), result in zip(calls, out, strict=True):
                if call == "xdel":
                    feed_deleted += int(result)
                elif result:
                    pages[feed] = result
        return int(deleted), feed_deleted

    # -- holds -----------------------------------------------------------------------------
    def place_hold(self, session_id: str | None, *, reason: str,
                   principal: str | None = None) -> Hold:
        who = principal or self.principal
        hold = self.store.place_hold(self.tenant, session_id, reason=reason, principal=who)
        if session_id is not None:
            self._audit_hold(session_id, "placed", who, reason)
        return hold

    def release_hold(self, session_id: str | None, *, reason: str = "",
                     principal: str | None = None) -> Hold | None:
        who = principal or self.principal
        released = self.store.release_hold(self.tenant, session_id)
        if released is None:
            return None
        if session_id is not None:
            self._audit_hold(session_id, "released", who, reason)
        return released

    def _audit_hold(self, session_id: str, action: str, who: str, reason: str) -> None:
        with self.audit.session(session_id, principal=who) as session:
            session.record("session/hold", {"action": action, "principal": who,
                                            "reason": reason})

    # -- retention -------------------------------------------------------------------------
    def run_retention(self, *, dry_run: bool = False) -> RetentionReport:
        """Shred every class key older than its class's retention (holds are skipped),
        then retire (every deletion so far, this run's and earlier ones, completes)."""
        now = self._clock()
        items: list[RetentionItem] = []
        checked = 0
        due: dict[str, list[tuple[DataClass, int]]] = {}
        for session_id, cls, created in self.store.sessions(self.tenant):
            checked += 1
            limit = self.retention.get(cls.value)
            if limit is None or now - created <= limit:
                continue
            due.setdefault(session_id, []).append((cls, now - created))
        for session_id, classes in sorted(due.items()):
            hold = self.store.hold_on(self.tenant, session_id)
            if hold is not None:
                items += [RetentionItem(session_id, c.value, age, "held", hold.reason)
                          for c, age in classes]
                continue
            if dry_run:
                items += [RetentionItem(session_id, c.value, age, "would-shred")
                          for c, age in classes]
                continue
            reason = ", ".join(f"{c.value} older than {self.retention[c.value] // 86_400_000}d"
                               for c, _ in classes)
            self.delete(session_id, [c for c, _ in classes], reason=f"retention: {reason}",
                        scope="retention")
            items += [RetentionItem(session_id, c.value, age, "shredded") for c, age in classes]
        retired = None if dry_run else self.retire()
        return RetentionReport(dry_run, checked, items, retired)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _names_session(fields: Any, session_id: str) -> bool:
    import json

    raw = fields.get(CHANGE_FIELD) or fields.get(CHANGE_FIELD.encode())
    if raw is None:
        return False
    try:
        value = json.loads(raw)
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("session") == session_id
