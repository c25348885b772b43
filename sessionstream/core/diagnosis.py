"""Diagnose one session from facts already read: a list of findings, in the seed's order.

Pure: :func:`diagnose` takes :class:`DiagnosisFacts` (the admitted events, the rejections, the
stored projection row, the code's state versions) and returns :class:`Finding` s,
walking seed §4.14's recommended order — durable raw events → surface → request
header / prompt assembly → projection watermark (client rendering is out of reach).
Findings carry ids, seqs, types and counts only, never message content, and name
the next command to run and the failure-matrix rows (:data:`MATRIX`) they bear on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sessionstream.core.catalog import Catalog, default_catalog
from sessionstream.core.errors import SessionStreamError
from sessionstream.core.events import FORMAT_VERSION, Event, SurfaceOp
from sessionstream.core.messages import Kind
from sessionstream.core.session import Session
from sessionstream.core.surface import pending_calls, token_estimate


class Status(StrEnum):
    OK = "ok"
    WARNING = "warning"
    PROBLEM = "problem"


class Layer(StrEnum):
    """The seed's recommended order: facts first, read models after."""

    RAW = "raw events"
    SURFACE = "surface"
    REQUEST = "request"
    PROJECTIONS = "projections"


#: Seed §4.14, the failure-diagnosis matrix: key → (symptom, root-cause candidates,
#: first evidence). docs/operations.md renders the same rows with commands.
MATRIX: Mapping[str, tuple[str, str, str]] = {
    "forgot-constraint": (
        "the model forgot a key constraint after resume",
        "dynamic context not persisted; compaction dropped it; scope changed",
        "surface, context/snapshot events, compaction evidence"),
    "ui-differs": (
        "the UI and the model history differ",
        "the client folds the log itself; the watermark lags; schema version mismatch",
        "projection as_of_seq, derive_messages()"),
    "tool-protocol": (
        "tool-call protocol error from the provider",
        "call/result filtered, order broken, crash tail not repaired",
        "surface pairing, session rules, turn/end reason"),
    "lost-after-restart": (
        "'message saved' but lost after a restart",
        "appended in memory only, no flush at the critical point",
        "flush and backend errors, rejections, the log tail"),
    "full-log-reads": (
        "the session list reads full logs",
        "no projection cache or cheap snapshot",
        "projection cache, watermark, state_version"),
    "repeats-operation": (
        "after compaction the agent repeats a finished operation",
        "the summary lost operation ids/results, or shadowed the wrong range",
        "summary, shadowed_seqs, external audit"),
    "fork-permissions": (
        "wrong permissions after a fork",
        "history copied, scope not recomposed for the new agent",
        "request header, agent preset, permission provider"),
    "side-effects-after-delete": (
        "external side effects remain after deleting the chat",
        "the session treated as a business transaction",
        "external operation ids and compensation state"),
    "old-log-unreadable": (
        "a new version cannot open an old log",
        "no upgrade path for the format version, unknown required events",
        "format_version, event catalog, migration tooling"),
}


@dataclass(frozen=True)
class Finding:
    """One check's outcome: what was looked at, what it shows, what to run next."""

    layer: Layer
    check: str  # stable id, e.g. "open-tail"
    status: Status
    summary: str  # one line: ids, seqs, types and counts, never content
    evidence: Mapping[str, Any] = field(default_factory=dict)
    next: str | None = None  # the command to run next
    symptoms: tuple[str, ...] = ()  # MATRIX keys this finding bears on

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer.value, "check": self.check, "status": self.status.value,
                "summary": self.summary, "evidence": dict(self.evidence), "next": self.next,
                "symptoms": list(self.symptoms)}


@dataclass(frozen=True)
class RejectedEvent:
    """An event the admission rule refused (or dropped), as readers saw it."""

    seq: int
    event_id: str
    writer_id: str
    epoch: int
    verdict: str  # stale_epoch | seq_gap | seq_conflict | history_conflict | duplicate
    offset: int | None = None


@dataclass(frozen=True)
class StoredProjection:
    """The projection row in Redis: watermark, unit state versions, quarantine."""

    generation: int
    as_of_seq: int
    state_versions: Mapping[str, int]  # unit key → stored state_version
    quarantine: Mapping[str, Any] | None = None
    in_session_index: bool = True  # listed by `sessionstream sessions`


@dataclass(frozen=True)
class DiagnosisFacts:
    """Everything the diagnosis looks at, read beforehand by an edge (or from a file).

    ``projections_checked`` False (offline): the projection layer is not checked.
    ``stored`` None while checked: no projection row exists for the session.
    """

    session_id: str
    events: Sequence[Event]
    rejections: Sequence[RejectedEvent] = ()
    corrupt_offsets: Sequence[int] = ()
    projections_checked: bool = False
    stored: StoredProjection | None = None
    code_versions: Mapping[str, int] = field(default_factory=dict)
    log_index: bool | None = None  # the writer's offset index exists (None: not looked at)
    lease_held: bool | None = None  # a writer holds the lease now (None: not looked at)
    source: str | None = None  # the JSONL file the events came from (None: live)
    #: sealed parts the reader could not open (privacy.Unopened): exact lost sources
    unopened: Sequence[Any] = ()

    @property
    def name(self) -> str:
        """How the next commands name the input: the FILE, else the session id."""
        return self.source if self.source is not None else self.session_id


def _cmd(facts: DiagnosisFacts, offline: str, view: str) -> str:
    """The next command: the offline one over the file, or the live view of the session."""
    if facts.source is not None:
        return f"sessionstream {offline} {facts.source}"
    return f"sessionstream views {facts.session_id} --view {view}"


def exit_code(findings: Sequence[Finding]) -> int:
    """0 when nothing is a problem, 1 otherwise (2, bad input, is the edge's)."""
    return 1 if any(f.status is Status.PROBLEM for f in findings) else 0


def implicated(findings: Sequence[Finding]) -> list[str]:
    """MATRIX keys named by warnings and problems, in matrix order."""
    hit = {s for f in findings if f.status is not Status.OK for s in f.symptoms}
    return [k for k in MATRIX if k in hit]


def diagnose(facts: DiagnosisFacts, catalog: Catalog | None = None) -> list[Finding]:
    """Every check, in the seed's order; later layers are skipped if the log is unusable."""
    cat = catalog or default_catalog()
    out = _raw(facts, cat)
    session = _session(facts, cat, out)
    if session is not None:
        out += _surface(facts, session)
        out += _request(facts, session)
    if facts.projections_checked:
        out += _projections(facts)
    return out


# -- raw events ---------------------------------------------------------------------------

def _raw(facts: DiagnosisFacts, cat: Catalog) -> list[Finding]:
    ev, out = facts.events, []
    seqs = [e.seq for e in ev]
    writers = sorted({(e.writer.id, e.writer.epoch) for e in ev}, key=lambda w: (w[1], w[0]))
    evidence: dict[str, Any] = {
        "events": len(ev), "last_seq": seqs[-1] if seqs else -1,
        "writers": [{"id": w, "epoch": n} for w, n in writers],
    }
    if seqs != list(range(len(seqs))):
        first_bad = next(i for i, s in enumerate(seqs) if s != i)
        out.append(Finding(Layer.RAW, "log-readback", Status.PROBLEM,
                           f"seqs are not contiguous from 0 (first break at position "
                           f"{first_bad}, seq {seqs[first_bad]})", evidence,
                           _cmd(facts, "log validate", "index"), ("lost-after-restart",)))
    else:
        out.append(Finding(Layer.RAW, "log-readback", Status.OK,
                           f"{len(ev)} admitted events, seq 0..{evidence['last_seq']}, "
                           f"{len(writers)} writer epoch(s)", evidence))
    if facts.corrupt_offsets:
        out.append(Finding(Layer.RAW, "corrupt-records", Status.PROBLEM,
                           f"{len(facts.corrupt_offsets)} undecodable record(s) under this key "
                           "(dead-lettered by the worker)",
                           {"offsets": list(facts.corrupt_offsets)},
                           "inspect the tenant's .dlq topic", ("old-log-unreadable",)))
    out.append(_rejections(facts))
    out.append(_formats(facts, cat))
    return out


def _rejections(facts: DiagnosisFacts) -> Finding:
    rej = [r for r in facts.rejections if r.verdict != "duplicate"]
    dup = len(facts.rejections) - len(rej)
    if not rej:
        return Finding(Layer.RAW, "rejections", Status.OK,
                       f"no rejected writes ({dup} duplicate redeliveries dropped)",
                       {"duplicates": dup})
    by = Counter(r.verdict for r in rej)
    evidence: dict[str, Any] = {
        "by_verdict": dict(sorted(by.items())), "duplicates": dup,
        "rejected": [{"seq": r.seq, "event_id": r.event_id, "writer": r.writer_id,
                      "epoch": r.epoch, "verdict": r.verdict, "offset": r.offset}
                     for r in rej[:20]],
    }
    parts = ", ".join(f"{n} {v}" for v, n in sorted(by.items()))
    writers = sorted({f"{r.writer_id}@{r.epoch}" for r in rej})
    # A gap means a writer's earlier event never reached the log: data it believed
    # written is missing. Stale epochs and conflicts are fencing doing its job; a
    # history conflict is a writer that lost a race (resume) and kept writing: its
    # flush() raised Fenced for those events, so nothing confirmed was lost.
    status = Status.PROBLEM if by.get("seq_gap") else Status.WARNING
    return Finding(Layer.RAW, "rejections", status,
                   f"{len(rej)} rejected write(s) ({parts}) from {', '.join(writers)}",
                   evidence, f"sessionstream views {facts.session_id} --view rejections",
                   ("lost-after-restart",))


def _formats(facts: DiagnosisFacts, cat: Catalog) -> Finding:
    ev = facts.events
    versions = Counter(e.format_version for e in ev)
    unknown = Counter(e.type for e in ev if e.type not in cat)
    required = sorted(t for t in unknown if any(e.type == t and not e.ignorable for e in ev))
    evidence: dict[str, Any] = {"format_versions": {str(k): n for k, n in sorted(versions.items())},
                "code_format_version": FORMAT_VERSION,
                "unknown_types": dict(sorted(unknown.items()))}
    newer = [v for v in versions if v > FORMAT_VERSION]
    if newer or required:
        what = (f"format_version {max(newer)} > {FORMAT_VERSION}" if newer
                else f"unknown required type(s) {', '.join(required)}")
        return Finding(Layer.RAW, "format", Status.PROBLEM,
                       f"this code cannot read the log: {what}", evidence,
                       "upgrade the reader (the event catalog), then `sessionstream replay`",
                       ("old-log-unreadable",))
    if unknown:
        return Finding(Layer.RAW, "format", Status.WARNING,
                       f"{sum(unknown.values())} event(s) of unknown ignorable type(s) skipped",
                       evidence, _cmd(facts, "log validate", "index"), ("old-log-unreadable",))
    return Finding(Layer.RAW, "format", Status.OK,
                   f"format_version {', '.join(map(str, sorted(versions)))}, every type known",
                   evidence)


def _session(facts: DiagnosisFacts, cat: Catalog, out: list[Finding]) -> Session | None:
    """Rebuild the session (every write-time rule); the open tail; recovery markers."""
    if not facts.events:
        return None
    try:
        session = Session.from_events(facts.events, catalog=cat)
    except SessionStreamError as exc:
        rule = getattr(exc, "rule", None)
        out.append(Finding(Layer.RAW, "session-rules", Status.PROBLEM,
                           f"the log breaks a session rule ({rule or type(exc).__name__} "
                           f"at seq {getattr(exc, 'seq', '?')}): surface and request not checked",
                           {"rule": rule, "seq": getattr(exc, "seq", None),
                            "error": type(exc).__name__},
                           _cmd(facts, "log validate", "index"), ("tool-protocol",)))
        return None
    out.append(Finding(Layer.RAW, "session-rules", Status.OK,
                       "the log satisfies every write-time session rule"))
    out.append(_open_tail(facts, session))
    out.append(_lifecycles(facts.events))
    return session


def _open_tail(facts: DiagnosisFacts, s: Session) -> Finding:
    comp = s.open_compaction
    evidence: dict[str, Any] = {"open_turn": s.open_turn, "open_turn_seq": s.open_turn_seq,
                "open_step": s.open_step,
                "pending_calls": [p.call_id for p in s.pending_calls],
                "open_compaction": comp.compaction_id if comp else None}
    if s.open_turn is None and comp is None:
        return Finding(Layer.RAW, "open-tail", Status.OK,
                       "no open turn, step, tool call or compaction at the tail", evidence)
    parts = []
    if s.open_turn is not None:
        parts.append(f"turn {s.open_turn} open since seq {s.open_turn_seq}")
    if s.open_step is not None:
        parts.append(f"step {s.open_step} open")
    if s.pending_calls:
        parts.append(f"{len(s.pending_calls)} tool call(s) without result "
                     f"({', '.join(p.call_id for p in s.pending_calls)})")
    if comp is not None:
        parts.append(f"compaction {comp.compaction_id} started, never ended")
    live = facts.lease_held is True
    # A writer holding the lease may just be mid-turn; without one the tail is a crash's.
    status = Status.WARNING if live else Status.PROBLEM
    how = ("a writer holds the lease: mid-turn is expected while it runs" if live
           else "crash tail not repaired")
    nxt = (f"sessionstream recover {facts.source}" if facts.source is not None
           else f"resume it: SessionWriter.open(cfg, {facts.session_id!r}) closes the tail")
    return Finding(Layer.RAW, "open-tail", status, f"{'; '.join(parts)} ({how})", evidence,
                   nxt, ("tool-protocol", "lost-after-restart"))


def _lifecycles(ev: Sequence[Event]) -> Finding:
    seeds = [e.seq for e in ev if e.type == "session/end-seed"]
    interrupted = [e.seq for e in ev
                   if e.type == "turn/end" and e.data.get("reason") == "interrupted"]
    outcomes = Counter(str(e.data.get("outcome")) for e in ev if e.type == "compaction/end")
    evidence: dict[str, Any] = {"end_seed_seqs": seeds, "interrupted_turn_end_seqs": interrupted,
                "compaction_outcomes": dict(sorted(outcomes.items()))}
    return Finding(Layer.RAW, "lifecycles", Status.OK,
                   f"{len(seeds)} resume/fork boundary(ies), {len(interrupted)} interrupted "
                   f"turn(s), {sum(outcomes.values())} ended compaction(s)", evidence)


# -- surface ------------------------------------------------------------------------------

def _surface(facts: DiagnosisFacts, s: Session) -> list[Finding]:
    messages = s.derive_messages()
    kinds = Counter(m.kind.value for m in messages)
    declared: dict[str, int] = {}
    answered: set[str] = set()
    orphans: list[str] = []
    for m in messages:
        for c in m.tool_calls:
            declared[c.call_id] = m.seqs[0]
        if m.kind is Kind.TOOL_RESULT and m.call_id is not None:
            if m.call_id not in declared:
                orphans.append(m.call_id)
            answered.add(m.call_id)
    pending = [cid for cid, _ in pending_calls(messages)]
    evidence: dict[str, Any] = {"messages": len(messages), "tokens": token_estimate(messages),
                "kinds": dict(sorted(kinds.items())), "tool_calls": len(declared),
                "orphan_results": orphans, "unanswered_calls": pending}
    out: list[Finding] = []
    if orphans or (pending and s.open_turn is None):
        out.append(Finding(Layer.SURFACE, "tool-pairing", Status.PROBLEM,
                           f"{len(orphans)} result(s) without call, {len(pending)} call(s) "
                           "without result on the surface", evidence,
                           _cmd(facts, "messages", "tools"), ("tool-protocol",)))
    elif pending:
        out.append(Finding(Layer.SURFACE, "tool-pairing", Status.WARNING,
                           f"{len(pending)} call(s) await a result in the open turn: no request "
                           "can be assembled until they are answered or the turn ends",
                           evidence, None, ("tool-protocol",)))
    else:
        out.append(Finding(Layer.SURFACE, "tool-pairing", Status.OK,
                           f"{len(messages)} messages (~{evidence['tokens']} tokens), every one "
                           f"of {len(declared)} tool call(s) paired", evidence))
    out.append(_compaction(facts, s))
    return out


def _compaction(facts: DiagnosisFacts, s: Session) -> Finding:
    from sessionstream.core.compaction import gather_facts  # imports the summarizer machinery

    ev = s.events
    summaries = [e for e in ev if e.type == "compaction/summary"]
    ends = {str(e.data.get("compaction_id")): e for e in ev if e.type == "compaction/end"}
    failed = [e for e in ends.values() if e.data.get("outcome") != "completed"]
    if not summaries:
        evidence: dict[str, Any] = {"failed_or_abandoned": [
            {"compaction_id": e.data.get("compaction_id"), "outcome": e.data.get("outcome"),
             "seq": e.seq} for e in failed]}
        return Finding(Layer.SURFACE, "compaction", Status.OK,
                       f"no committed compaction ({len(failed)} failed or abandoned attempt(s))",
                       evidence)
    last = summaries[-1]
    d = last.data
    cid = str(d.get("compaction_id"))
    shadowed = [int(x) for x in d.get("shadowed_seqs", ())]
    replace = next((e for e in ev if e.surface_op is SurfaceOp.REPLACE
                    and e.seq > last.seq and list(e.source_event_seqs) == shadowed), None)
    summarizer = d.get("summarizer") or {}
    end = ends.get(cid)
    evidence = {
        "compaction_id": cid, "summary_seq": last.seq,
        "replace_seq": replace.seq if replace else None,
        "outcome": end.data.get("outcome") if end else None,
        "shadowed": len(shadowed),
        "shadowed_range": [min(shadowed), max(shadowed)] if shadowed else None,
        "tokens_before": d.get("tokens_before"), "tokens_after": d.get("tokens_after"),
        "summarizer": {"provider": summarizer.get("provider"), "model": summarizer.get("model")},
        "compactions": len(summaries),
    }
    if replace is None:
        return Finding(Layer.SURFACE, "compaction", Status.WARNING,
                       f"compaction {cid}: summary at seq {last.seq} never replaced the "
                       "surface", evidence, None, ("repeats-operation",))
    lost: list[str] = []
    try:
        ops = gather_facts(s, shadowed).operation_ids
        content = replace.data.get("content")
        text = content if isinstance(content, str) else str(content)
        lost = [op for op in ops if op not in text]  # the quality gate's own test
        evidence["operation_ids_kept"] = len(ops) - len(lost)
        evidence["operation_ids_lost"] = lost
    except (SessionStreamError, KeyError, IndexError, ValueError) as exc:
        evidence["operation_ids_check"] = f"not possible: {type(exc).__name__}"
    head = (f"compaction {cid} shadows {len(shadowed)} node(s), tokens "
            f"{d.get('tokens_before')} → {d.get('tokens_after')}")
    if lost:
        return Finding(Layer.SURFACE, "compaction", Status.PROBLEM,
                       f"{head}; the summary lost operation id(s) {', '.join(lost)}", evidence,
                       _cmd(facts, "explain", "compaction"), ("repeats-operation",))
    return Finding(Layer.SURFACE, "compaction", Status.OK,
                   f"{head}; every operation id of the shadowed results kept", evidence)


# -- request ------------------------------------------------------------------------------

def _request(facts: DiagnosisFacts, s: Session) -> list[Finding]:
    ev = s.events
    headers = [e for e in ev if e.type == "request/header"]
    snaps = [e for e in ev if e.type == "context/snapshot"]
    messages = s.derive_messages()
    on_surface = [m.seqs[0] for m in messages if m.kind is Kind.CONTEXT]
    out: list[Finding] = []
    if not headers:
        out.append(Finding(Layer.REQUEST, "request-header", Status.WARNING,
                           "no request/header in the log: nothing records how a request is "
                           "routed", {"headers": 0}, None, ("fork-permissions",)))
    else:
        h = headers[-1]
        evidence: dict[str, Any] = {"headers": len(headers), "last_seq": h.seq,
                    "provider": h.data.get("provider"), "model": h.data.get("model")}
        out.append(Finding(Layer.REQUEST, "request-header", Status.OK,
                           f"last request/header at seq {h.seq} "
                           f"({h.data.get('provider')}/{h.data.get('model')})", evidence,
                           _cmd(facts, "explain", "surface")))
    out.append(_reconstructable(facts, s))
    evidence = {"snapshots": len(snaps), "on_surface_seqs": on_surface,
                "snapshot_ids": [e.data.get("snapshot_id") for e in snaps][-10:]}
    resumed = any(e.type == "session/end-seed" for e in ev)
    if not snaps and resumed:
        out.append(Finding(Layer.REQUEST, "context-snapshots", Status.WARNING,
                           "resumed or forked, but no context/snapshot is logged: dynamic "
                           "context the model saw before is not rebuildable", evidence,
                           _cmd(facts, "explain", "surface"), ("forgot-constraint",)))
    else:
        out.append(Finding(Layer.REQUEST, "context-snapshots", Status.OK,
                           f"{len(snaps)} context snapshot(s), {len(on_surface)} on the surface",
                           evidence))
    return out


def _reconstructable(facts: DiagnosisFacts, s: Session) -> Finding:
    """Seed §4.6.1: say which requests can no longer be rebuilt, and from what."""
    from sessionstream.core.privacy import reconstructability

    r = reconstructability(s.events, facts.unopened, s.catalog)
    not_ok = [seq for seq, ok in sorted(r.requests.items()) if not ok]
    by_class = Counter(x.data_class.value for x in r.lost)
    evidence: dict[str, Any] = {
        "fully_reconstructable": r.fully_reconstructable,
        "lost_by_class": dict(sorted(by_class.items())),
        "lost": [x.to_json() for x in r.lost[:50]],
        "not_reconstructable_requests": not_ok[:50], "shredded": [dict(a) for a in r.shredded]}
    if not r.lost:
        return Finding(Layer.REQUEST, "reconstructable", Status.OK,
                       f"every request ({len(r.requests)}) is fully reconstructable: no "
                       "content was deleted", evidence)
    classes = ", ".join(f"{k} {v}" for k, v in sorted(by_class.items()))
    return Finding(
        Layer.REQUEST, "reconstructable", Status.WARNING,
        f"{len(r.lost)} source(s) no longer readable ({classes}); {len(not_ok)} of "
        f"{len(r.requests)} request(s) not fully reconstructable (their surface rebuilds "
        "with placeholders)", evidence,
        _cmd(facts, "explain", "surface"), ("side-effects-after-delete",))


# -- projections --------------------------------------------------------------------------

def _projections(facts: DiagnosisFacts) -> list[Finding]:
    sid, st = facts.session_id, facts.stored
    last = facts.events[-1].seq if facts.events else -1
    if st is None:
        return [Finding(Layer.PROJECTIONS, "watermark", Status.PROBLEM,
                        f"no projections in Redis for a log at seq {last}", {"log_last_seq": last},
                        "is the worker running? `sessionstream worker`",
                        ("ui-differs", "full-log-reads"))]
    out: list[Finding] = []
    evidence: dict[str, Any] = {"as_of_seq": st.as_of_seq, "log_last_seq": last,
                                "generation": st.generation, "lag": last - st.as_of_seq}
    if st.as_of_seq == last:
        out.append(Finding(Layer.PROJECTIONS, "watermark", Status.OK,
                           f"projections at as_of_seq {st.as_of_seq} = the log's last seq "
                           f"(generation {st.generation})", evidence))
    elif st.as_of_seq < last:
        out.append(Finding(Layer.PROJECTIONS, "watermark", Status.WARNING,
                           f"projections lag the log by {last - st.as_of_seq} event(s) "
                           f"(as_of_seq {st.as_of_seq}, log {last})", evidence,
                           "check the worker and its consumer lag (`sessionstream worker`)",
                           ("ui-differs",)))
    else:
        out.append(Finding(Layer.PROJECTIONS, "watermark", Status.PROBLEM,
                           f"projections are ahead of the log (as_of_seq {st.as_of_seq} > "
                           f"{last}): another topic or tenant fed them?", evidence,
                           "sessionstream replay --no-switch", ("ui-differs",)))
    stale = {k: {"stored": st.state_versions.get(k), "code": v}
             for k, v in sorted(facts.code_versions.items()) if st.state_versions.get(k) != v}
    if stale:
        out.append(Finding(Layer.PROJECTIONS, "state-versions", Status.WARNING,
                           f"stale cache: unit(s) {', '.join(stale)} stored at another "
                           "state_version (rebuilt on the next event or by the worker's "
                           "convergence pass)", {"stale": stale}, "sessionstream replay",
                           ("ui-differs", "full-log-reads")))
    else:
        out.append(Finding(Layer.PROJECTIONS, "state-versions", Status.OK,
                           f"all {len(facts.code_versions)} unit(s) at the code's state_version",
                           {"units": dict(sorted(st.state_versions.items()))}))
    if st.quarantine:
        q = st.quarantine
        out.append(Finding(Layer.PROJECTIONS, "quarantine", Status.PROBLEM,
                           f"quarantined at seq {q.get('seq')} ({q.get('kind', 'unknown')}): "
                           "projections stopped there", {"quarantine": dict(q)},
                           "upgrade the worker's code, then `sessionstream replay`",
                           ("old-log-unreadable", "ui-differs")))
    else:
        out.append(Finding(Layer.PROJECTIONS, "quarantine", Status.OK, "not quarantined"))
    listed = st.in_session_index
    evidence = {"in_session_index": listed, "writer_log_index": facts.log_index}
    if not listed or facts.log_index is False:
        what = [] if listed else ["not in the session index (`sessionstream sessions`)"]
        if facts.log_index is False:
            what.append("no writer offset index (resume scans the whole partition)")
        out.append(Finding(Layer.PROJECTIONS, "indexes", Status.WARNING, "; ".join(what),
                           evidence, f"sessionstream views {sid}", ("full-log-reads",)))
    else:
        out.append(Finding(Layer.PROJECTIONS, "indexes", Status.OK,
                           "listed in the session index; writer offset index present", evidence))
    return out


__all__ = ["MATRIX", "DiagnosisFacts", "Finding", "Layer", "RejectedEvent", "Status",
           "StoredProjection", "diagnose", "exit_code", "implicated"]
