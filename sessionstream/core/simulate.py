"""Deterministic session generators: the fleet simulator, benches and property tests.

:func:`simulate_session` writes the seed's lab — a two-step tool task per turn —
with todo/plan events, occasional user steering, context snapshots, failed turns
and (optionally) compactions, all driven by one ``random.Random``: same seed, same
log, byte for byte. :func:`random_walk` drives a session through *any* valid next
event (the property tests' generator): it only ever appends what the rules allow.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

from sessionstream.core.events import CountingClock, Event, Writer
from sessionstream.core.providers import build
from sessionstream.core.providers.common import SIMULATED_APIS
from sessionstream.core.providers.scripted import Reply, ScriptedClient
from sessionstream.core.recorder import parse, record
from sessionstream.core.request import PromptRegistry, RequestHeader, Section, assemble
from sessionstream.core.session import LOCAL_WRITER, Session
from sessionstream.core.surface import token_estimate

Choose = Callable[[int], int]
"""Picks an index in ``range(n)``: ``rng.randrange`` or a Hypothesis draw."""

_TOOLS = ("read_file", "search", "run_query", "send_invoice", "list_dir")
_WORDS = (
    "outpatient", "tests", "year", "over", "metric", "filter", "plan", "invoice", "result",
    "rows", "summary", "check", "compare", "definition", "approve", "pending", "query",
)


def rng_ids(rng: random.Random) -> Callable[[], str]:
    """uuid4-shaped ids drawn from ``rng`` (deterministic)."""

    def ids() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    return ids


def _text(choose: Choose, words: int) -> str:
    return " ".join(_WORDS[choose(len(_WORDS))] for _ in range(words))


def simulate_session(
    rng: random.Random,
    session_id: str,
    *,
    turns: int,
    chunks: tuple[int, int] = (2, 6),
    steering: float = 0.15,
    failures: float = 0.05,
    compact_every: int | None = None,
    tenant: str = "default",
    writer: Writer = LOCAL_WRITER,
    start_time: int = 1_767_225_600_000,
) -> list[Event]:
    """A realistic session of ``turns`` two-step tool tasks (seed §4.1 lab), deterministic.

    Per turn: turn/start, step/start, user/message, request/header,
    assistant/chunk×N, assistant/message with a tool call, tool/call, tool/result,
    (each model step built as a provider body and answered by a scripted model through
    the recorder, rotating over the three provider APIs),
    step/end, step/start, request/header, chunks, assistant/message, step/end,
    turn/end — plus todo/plan events, steering between steps with probability
    ``steering``, a crash-like failed turn after tool/call with probability
    ``failures``, and a compaction after every ``compact_every`` turns.
    """
    session = Session.create(
        session_id, tenant=tenant, clock=CountingClock(start_time), ids=rng_ids(rng),
        writer=writer,
    )
    choose: Choose = rng.randrange
    for turn in range(turns):
        if turn % 5 == 0:
            session.append("context/snapshot", {
                "snapshot_id": f"ctx-{turn}", "content": f"workspace: {_text(choose, 6)}",
            })
        session.append("turn/start")
        session.append("todo/add", {"id": f"t{turn}", "text": _text(choose, 4)})
        session.append("step/start")
        session.append("user/message", {"content": _text(choose, 4 + rng.randrange(12))})
        _model_step(session, rng, chunks, tool=True)
        pending = session.pending_calls
        if pending and rng.random() < failures:
            session.append("turn/end", {"reason": rng.choice(("failed", "cancelled"))})
            continue
        for call in pending:
            session.append("tool/result", {
                "call_id": call.call_id, "status": "ok",
                "content": _text(choose, 8 + rng.randrange(40)),
                "operation_id": f"op-{rng.getrandbits(32):08x}", "version": 1,
            })
        session.append("step/end")
        if rng.random() < steering:
            session.append("user/message", {"content": _text(choose, 5), "steering": True})
        if rng.random() < 0.3:
            session.append("plan/set", {"steps": [_text(choose, 3) for _ in range(3)]})
        session.append("step/start")
        _model_step(session, rng, chunks, tool=False)
        session.append("step/end")
        session.append("todo/update", {"id": f"t{turn}", "status": "done"})
        session.append("turn/end", {"reason": "completed"})
        if compact_every and (turn + 1) % compact_every == 0:
            compact(session, rng.randrange)
    return list(session.events)


#: Surfaces up to this many messages get their provider body built every step; longer
#: simulated sessions (benchmarks) skip the O(surface) build and only record.
BUILD_LIMIT = 256

#: How the simulated model step is routed (the header every request carries).
SIM_HEADER = RequestHeader("sim", "sim-1", "medium", 4096, (("max_tokens", "deployment"),))


def _model_step(
    session: Session, rng: random.Random, chunks: tuple[int, int], *, tool: bool
) -> None:
    """One model step on the real path: the request is assembled from the surface and
    built as a provider body, a scripted model answers it as that API's stream, and
    the recorder writes request/header, the chunks and assistant/message."""
    choose: Choose = rng.randrange
    texts = [_text(choose, 3) for _ in range(rng.randint(*chunks))]
    calls = []
    if tool:
        name = rng.choice(_TOOLS)
        calls.append((f"call-{rng.getrandbits(48):012x}", name, {"q": _text(choose, 2)}))
    reply = Reply(" ".join(texts), calls, input_tokens=100 + rng.randrange(900),
                  output_tokens=10 + len(texts), model=SIM_HEADER.model,
                  response_id=f"resp-{session.next_seq}")
    api = SIMULATED_APIS[session.next_seq % len(SIMULATED_APIS)]
    client = ScriptedClient(api, [reply])
    messages = session.derive_messages()
    if len(messages) <= BUILD_LIMIT:
        request = assemble(messages, _REGISTRY, header=SIM_HEADER)
        body: dict[str, object] = build(api, request, stream=True).body
    else:  # building is O(surface): long benchmark sessions only record
        body = {"stream": True}
    output = parse(api, client.create(body))
    record(session, output, SIM_HEADER, session=session)
    for c in session.events[-1].data["tool_calls"]:
        session.append("tool/call", {**c, "idempotency_key": c["call_id"]})


_REGISTRY = PromptRegistry([Section("sim", "You are a simulated agent.")])


def compact(session: Session, choose: Choose, *, attempts: int = 8) -> bool:
    """Run one full compaction lifecycle over a random valid surface range.

    Picks a range by position (first..last), checks it does not split a call from
    its result, writes start → summary → replace → end(completed). Returns False
    (ending the attempt ``failed``) when no valid range was found.
    """
    surface = session.surface
    if session.open_compaction is not None or len(surface) < 2:
        return False
    cid = f"cmp-{session.next_seq}"
    session.append("compaction/start", {"compaction_id": cid, "trigger": "pressure"})
    for _ in range(attempts):
        first = choose(len(surface))
        last = first + choose(len(surface) - first)
        seqs = surface.seqs_at(first, last)
        if surface.check_range(seqs) is None:
            break
    else:
        session.append("compaction/end", {"compaction_id": cid, "outcome": "failed",
                                          "reason": "no valid range"})
        return False
    before = token_estimate(session.derive_messages()[first : last + 1])
    text = f"summary of {len(seqs)} messages (seqs {seqs[0]}..{seqs[-1]})"
    session.append("compaction/summary", {
        "compaction_id": cid, "first_position": first, "last_position": last,
        "shadowed_seqs": list(seqs), "tokens_before": before,
        "tokens_after": max(1, len(text) // 4),
        "summarizer": {"provider": "offline", "model": "extractive", "config": {}},
    })
    session.append("user/message", {"content": text}, surface_op="replace",
                   source_event_seqs=seqs)
    session.append("compaction/end", {"compaction_id": cid, "outcome": "completed"})
    return True


def random_walk(session: Session, choose: Choose, steps: int) -> Session:
    """Append ``steps`` events, each drawn among the events valid right now.

    Explores interleavings the lab never writes: steering mid-step, several
    calls per message, results out of order, turns ending failed with calls
    pending, compactions opened inside turns and across them, and todo/plan/goal
    and business/* events anywhere.
    """
    for _ in range(steps):
        options = _options(session, choose)
        options[choose(len(options))]()
    return session


def _options(s: Session, choose: Choose) -> list[Callable[[], object]]:
    opts: list[Callable[[], object]] = []
    a = s.append
    n = s.next_seq
    steer = s.open_turn is not None
    opts.append(lambda: a("user/message", {"content": f"u{n}", "steering": steer}))
    opts.append(lambda: a("todo/add", {"id": f"t{n}", "text": "x"}))
    opts.append(lambda: a(*_domain_event(n, choose)))
    if s.open_turn is None:
        opts.append(lambda: a("turn/start"))
        opts.append(lambda: a("context/snapshot", {"snapshot_id": f"c{n}", "content": f"ctx{n}"}))
    else:
        abandon = ("failed", "cancelled", "interrupted")[n % 3]
        opts.append(lambda: a("turn/end", {"reason": abandon}))
        if s.open_step is None:
            opts.append(lambda: a("step/start"))
            if not s.pending_calls:
                opts.append(lambda: a("turn/end", {"reason": ("completed", "refused")[n % 2]}))
        else:
            opts.append(lambda: a("step/end"))
            opts.append(lambda: a("assistant/chunk", {"text": "c"}))
            pending = s.pending_calls
            if not pending:
                opts.append(lambda: a("request/header", {"provider": "p", "model": "m"}))
                k = choose(3)
                calls = [
                    {"call_id": f"c{n}-{i}", "name": _TOOLS[i], "arguments": {"i": i}}
                    for i in range(k)
                ]
                content = "" if k and choose(2) else f"a{n}"
                message: dict[str, Any] = {"content": content, "tool_calls": calls}
                if n % 3 == 0:  # a reasoning model's thinking (class reasoning), no draw
                    message["reasoning"] = [{"api": "anthropic", "type": "thinking",
                                             "thinking": f"t{n}", "signature": f"sig{n}"}]
                opts.append(lambda: a("assistant/message", message))
            for call in pending:
                if call.executed_seq is None:
                    c = call
                    opts.append(lambda c=c: a("tool/call", {  # type: ignore[misc]
                        "call_id": c.call_id, "name": c.name, "arguments": {}}))
                else:
                    c = call
                    opts.append(lambda c=c: a("tool/result", {  # type: ignore[misc]
                        "call_id": c.call_id, "status": ("ok", "error")[n % 2],
                        "content": f"r{n}"}))
    compaction = s.open_compaction
    if compaction is None:
        if len(s.surface) >= 1:
            opts.append(lambda: _compaction_start(s))
    elif compaction.shadowed_seqs is None:
        opts.append(lambda: _compaction_summary(s, choose))
    elif compaction.replace_seq is None:
        opts.append(lambda: _compaction_replace(s))
    else:
        opts.append(lambda: a("compaction/end", {"compaction_id": compaction.compaction_id,
                                                 "outcome": "completed"}))
    return opts


def _domain_event(n: int, choose: Choose) -> tuple[str, dict[str, object]]:
    """One todo/plan/goal or business/* event (they may appear anywhere)."""
    tid = f"t{choose(4)}"
    events: tuple[tuple[str, dict[str, object]], ...] = (
        ("todo/update", {"id": tid, "status": ("pending", "in_progress", "done")[n % 3]}),
        ("plan/set", {"steps": ["a", "b"][: 1 + n % 2]}),
        ("goal/set", {"goal": f"g{n % 2}"}),
        ("business/metric", {"id": ("m_a", "m_b")[n % 2], "definition_version": "2026-07",
                             "status": ("proposed", "confirmed")[n % 2]}),
        ("business/filters", {"filters": {"patient_type": ("outpatient", "inpatient")[n % 2]}}),
        ("business/time", {"time": {"calendar": "natural_year"}}),
        ("business/ambiguities", {"ambiguities": [f"a{n}"][: n % 2]}),
        ("business/plan", {"plan_hash": f"h{n % 5}"}),
        ("business/approval", {"approval": ("approved", "rejected", "pending")[n % 3]}),
    )
    return events[choose(len(events))]


def _compaction_start(s: Session) -> None:
    s.append("compaction/start", {"compaction_id": f"k{s.next_seq}", "trigger": "manual"})


def _compaction_summary(s: Session, choose: Choose) -> None:
    c = s.open_compaction
    assert c is not None
    surface = s.surface
    if len(surface):
        first = choose(len(surface))
        last = first + choose(len(surface) - first)
        seqs = surface.seqs_at(first, last)
        if surface.check_range(seqs) is None:
            s.append("compaction/summary", {
                "compaction_id": c.compaction_id, "first_position": first,
                "last_position": last, "shadowed_seqs": list(seqs), "tokens_before": 10,
                "tokens_after": 2, "summarizer": {"provider": "p", "model": "m", "config": {}},
            })
            return
    s.append("compaction/end", {"compaction_id": c.compaction_id, "outcome": "failed"})


def _compaction_replace(s: Session) -> None:
    c = s.open_compaction
    assert c is not None and c.shadowed_seqs is not None
    if s.surface.check_range(c.shadowed_seqs) is None:
        s.append("user/message", {"content": f"summary {c.compaction_id}"},
                 surface_op="replace", source_event_seqs=c.shadowed_seqs)
    else:  # the range changed under us (an abandoned call dropped a node): give up
        s.append("compaction/end", {"compaction_id": c.compaction_id, "outcome": "abandoned"})
