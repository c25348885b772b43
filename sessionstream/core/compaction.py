"""Compaction: replace a run of the surface with a summary, never rewrite history (seed §4.10).

The pure core of compaction: a policy (:func:`should_compact`), range selection by
surface position (:func:`select_range`), tool-result pruning of the summarizer's input
(:func:`prune_message`), a deterministic offline summarizer (:class:`OfflineSummarizer`),
the quality gate (:func:`check_summary`) and the lifecycle (:func:`plan_compaction`, or
:func:`attempt_compaction` + :func:`commit_drafts` when summarizing and appending happen
at different times, as in the compaction agent)::

    compaction/start    {compaction_id, trigger, tokens, budget_tokens, reason}
    compaction/summary  {first_position, last_position, shadowed_seqs, tokens_before,
                         tokens_after, summarizer{provider, model, config}, pruned, kept}
    user/message        surface_op=replace, source_event_seqs = shadowed_seqs
    compaction/end      completed
  or
    compaction/start → compaction/end {outcome: failed | abandoned, reason}

The six questions of seed §4.10.1, answered by the events themselves:

1. *Why was it triggered?* ``compaction/start.trigger`` is ``pressure`` (surface tokens
   above ``pressure × budget``), ``overflow`` (above the budget, or a provider refused the
   context) or ``manual`` (an operator's command); ``tokens``, ``budget_tokens`` and
   ``reason`` carry the numbers behind it (:class:`Decision`).
2. *Which surface range?* Positions ``first_position..last_position`` of the surface as
   it was when the summary was committed — the oldest contiguous run that leaves the
   last ``keep_recent`` nodes and the open turn untouched, never splits a tool call from
   its result and never holds a call still waiting for one (:meth:`Surface.check_range`).
   Seq numbers alone could not say this: a summary node carries a later seq than the
   nodes after it.
3. *Which nodes, how many tokens?* ``shadowed_seqs`` names every shadowed node;
   ``tokens_before`` / ``tokens_after`` are the deterministic estimates of the run and of
   the summary message (``surface.token_estimate``).
4. *Which provider / model / config?* ``compaction/summary.summarizer``; the default is
   ``offline`` / ``extractive-v1``, deterministic, with its limits in ``config``.
5. *The surface after a failure or a partial commit?* Unchanged. Only the replace
   ``user/message`` changes the surface, and it is appended only after the summary
   passed the quality gate; a failed summary ends ``failed`` with the reason, a range
   that stopped being valid ends ``abandoned``, and a crash between start and end leaves
   an unmatched ``compaction/start`` that recovery closes as ``abandoned``. The session
   rules refuse ``completed`` without a replace.
6. *Messages arriving while summarizing?* Kept. The summary covers only the chosen run;
   events appended meanwhile come after it (or elsewhere on the surface) and the replace
   is checked at append time against the surface as it is then
   (:func:`commit_drafts`): if the run is still a contiguous run of current nodes it is
   replaced in place and everything else stays; if not, the attempt is abandoned.

Pruning vs summarizing (seed §4.10.2). The session rules allow a replace only as a
``user/message`` over a run that keeps calls and results together, so a single tool
result cannot be swapped for a pruned copy on the surface. Pruning therefore happens
in two model-agnostic places: at write time the producer spills a large result to the
attachment store and logs ``attachment{sha256, size, head, tail}`` instead
(``producers.attachments``); at compaction time :func:`prune_message` cuts every long
tool result to head + tail + a reference (its seq, or the attachment's sha256) before
the summarizer sees it. Semantic summarizing then works on the pruned history.

The quality gate (seed §4.10.3) refuses to commit a summary that drops an operation id
of a shadowed tool result, a user correction (a ``steering`` user message, kept word for
word) or an open task (a todo added before the run's end and not done), or that does not
make the surface smaller. The attempt then ends ``compaction/end`` ``failed`` with
``reason`` naming each loss.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sessionstream.core.catalog import COMPACTION_TRIGGERS
from sessionstream.core.errors import CompactionBusy, SummarizerError
from sessionstream.core.events import Draft, Event, SurfaceOp
from sessionstream.core.jsonvalue import JsonValue, thaw
from sessionstream.core.messages import Kind, Message, Role
from sessionstream.core.session import Session
from sessionstream.core.surface import message_tokens, token_estimate

#: Todo statuses that close a task (anything else is an open task a summary must keep).
CLOSED_TASK_STATUSES = frozenset({"done", "cancelled"})

#: ``compaction/end.reason`` prefixes (stable, for dashboards and tests).
REASON_QUALITY = "quality gate"
REASON_NO_RANGE = "no compactable range"
REASON_SUMMARIZER = "summarizer failed"
REASON_RANGE_CHANGED = "range changed before commit"


# -- policy -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Budget:
    """How much surface a model gets and how compaction answers to it."""

    tokens: int = 32_000  # the context budget for messages (estimate, see surface.py)
    pressure: float = 0.8  # compact above this fraction of the budget
    keep_recent: int = 4  # surface nodes at the end that are never shadowed
    min_nodes: int = 2  # a run shorter than this is not worth a summary
    prune_chars: int = 600  # tool results longer than this reach the summarizer pruned

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError(f"budget tokens must be positive, got {self.tokens}")
        if not 0 < self.pressure <= 1:
            raise ValueError(f"pressure must be in (0, 1], got {self.pressure}")
        if self.keep_recent < 0 or self.min_nodes < 1 or self.prune_chars < 32:
            raise ValueError("keep_recent >= 0, min_nodes >= 1 and prune_chars >= 32")


#: The default budget (a module-level value: a frozen dataclass is safe to share).
DEFAULT_BUDGET = Budget()


@dataclass(frozen=True)
class Decision:
    """Whether to compact now, and why, with the numbers."""

    compact: bool
    trigger: str | None  # pressure | overflow | manual (None: no compaction)
    tokens: int  # estimated surface tokens now
    budget_tokens: int
    threshold_tokens: int  # the pressure threshold
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "compact": self.compact, "trigger": self.trigger, "tokens": self.tokens,
            "budget_tokens": self.budget_tokens, "threshold_tokens": self.threshold_tokens,
            "reason": self.reason,
        }


def should_compact(
    messages: Sequence[Message],
    budget_tokens: int,
    *,
    trigger: str | None = None,
    pressure: float = 0.8,
) -> Decision:
    """Decide from the surface's token estimate; an explicit ``trigger`` always compacts.

    ``trigger=None`` is the automatic policy: ``overflow`` above the budget,
    ``pressure`` above ``pressure × budget``, else no compaction. ``manual`` (an
    operator) or ``overflow`` (a provider refused the context) force an attempt.
    """
    if trigger is not None and trigger not in COMPACTION_TRIGGERS:
        raise ValueError(f"trigger {trigger!r} is not one of {list(COMPACTION_TRIGGERS)}")
    tokens = token_estimate(messages)
    threshold = int(budget_tokens * pressure)
    numbers = f"{tokens} tokens, budget {budget_tokens}, pressure threshold {threshold}"
    if trigger is not None:
        return Decision(True, trigger, tokens, budget_tokens, threshold,
                        f"{trigger} requested ({numbers})")
    if tokens > budget_tokens:
        return Decision(True, "overflow", tokens, budget_tokens, threshold,
                        f"surface over budget ({numbers})")
    if tokens > threshold:
        return Decision(True, "pressure", tokens, budget_tokens, threshold,
                        f"surface above pressure threshold ({numbers})")
    return Decision(False, None, tokens, budget_tokens, threshold, f"no pressure ({numbers})")


# -- range selection ----------------------------------------------------------------------

@dataclass(frozen=True)
class Range:
    """A run of surface nodes by position, with the seqs naming them."""

    first_position: int
    last_position: int
    seqs: tuple[int, ...]
    tokens_before: int


def select_range(
    session: Session, *, keep_recent: int = 4, min_nodes: int = 2
) -> Range | str:
    """The oldest valid run of surface nodes to shadow, or why there is none.

    Starts at position 0 and takes the longest run that ends before the last
    ``keep_recent`` nodes and before the open turn's nodes, that does not split a
    tool call from its result and holds no call still waiting for one. A run that is
    a single earlier summary is not worth compacting again.
    """
    surface = session.surface
    nodes = surface.messages()
    limit = len(nodes) - keep_recent
    turn_seq = session.open_turn_seq
    if turn_seq is not None:
        for pos, node in enumerate(nodes[:max(limit, 0)]):
            if node.kind is not Kind.SUMMARY and node.seqs[0] >= turn_seq:
                limit = pos
                break
    if limit < min_nodes:
        return (f"{REASON_NO_RANGE}: {len(nodes)} surface nodes, {keep_recent} kept recent"
                + (", open turn kept" if turn_seq is not None else "")
                + f", at least {min_nodes} needed")
    last_problem = ""
    for last in range(limit - 1, min_nodes - 2, -1):
        seqs = surface.seqs_at(0, last)
        problem = surface.check_range(seqs)
        if problem is None:
            if len(seqs) == 1 and nodes[0].kind is Kind.SUMMARY:
                break
            return Range(0, last, seqs, token_estimate(nodes[: last + 1]))
        last_problem = last_problem or problem
    return f"{REASON_NO_RANGE}: {last_problem or 'only an earlier summary is old enough'}"


# -- what the summarizer sees -------------------------------------------------------------

@dataclass(frozen=True)
class ToolOutcome:
    """A tool call done in the shadowed history, with what the summary must keep."""

    call_id: str
    name: str
    arguments: JsonValue
    status: str
    operation_id: str | None
    preview: str  # pruned result content
    seq: int  # the tool/result


@dataclass(frozen=True)
class OpenTask:
    id: str
    text: str
    status: str


@dataclass(frozen=True)
class Facts:
    """The shadowed history, unfolded through earlier summaries to the original events."""

    goal: str | None
    requests: tuple[tuple[int, str], ...]  # (seq, text) of user messages
    corrections: tuple[tuple[int, str], ...]  # (seq, text) of steering user messages
    contexts: tuple[tuple[int, str], ...]  # (seq, pruned content) of context snapshots
    tools: tuple[ToolOutcome, ...]
    open_tasks: tuple[OpenTask, ...]
    conclusion: str | None  # the last assistant text
    source_seqs: tuple[int, ...]  # the original node events behind the run

    @property
    def operation_ids(self) -> tuple[str, ...]:
        return tuple(t.operation_id for t in self.tools if t.operation_id)


@dataclass(frozen=True)
class Pruned:
    """What pruning cut from the summarizer's input (evidence for compaction/summary)."""

    results: int = 0
    chars: int = 0


@dataclass(frozen=True)
class SummaryRequest:
    """Everything a summarizer gets: pruned messages, the facts to keep, the target."""

    messages: tuple[Message, ...]
    facts: Facts
    tokens_before: int
    pruned: Pruned = field(default_factory=Pruned)


class Summarizer(Protocol):
    """Turns a shadowed run into summary text; raises SummarizerError when it cannot."""

    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def config(self) -> Mapping[str, JsonValue]: ...

    def summarize(self, request: SummaryRequest) -> str: ...


def _text_of(content: JsonValue) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(thaw(content), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _cut(text: str, limit: int, ref: str) -> tuple[str, int]:
    """Head and tail of ``text`` around a marker naming ``ref``; (text, chars cut)."""
    if len(text) <= limit:
        return text, 0
    keep = max(limit // 2 - 16, 8)
    cut = len(text) - 2 * keep
    return f"{text[:keep]} …[pruned {cut} chars, full: {ref}]… {text[-keep:]}", cut


def prune_message(message: Message, limit: int = 600) -> tuple[Message, int]:
    """A tool result cut to head/tail + reference for the summarizer; (message, chars cut).

    Model-agnostic and exact: the head, the tail and a reference to the full content
    (the event's seq, or the spilled attachment's sha256). Other messages pass unchanged.
    """
    if message.kind is not Kind.TOOL_RESULT:
        return message, 0
    content = message.content
    if isinstance(content, Mapping) and "attachment" in content:
        att = content["attachment"]
        text = (f"{att.get('head', '')} …[attachment sha256:{att.get('sha256')} "
                f"{att.get('size')} bytes]… {att.get('tail', '')}")
        cut = max(int(att.get("size", 0)) - len(text), 0)
        text, more = _cut(text, limit, f"attachment sha256:{att.get('sha256')}")
        return _with_content(message, text), cut + more
    text, cut = _cut(_text_of(content), limit, f"seq {message.seqs[0]}")
    if not cut:
        return message, 0
    return _with_content(message, text), cut


def _with_content(message: Message, content: str) -> Message:
    return Message(message.role, message.kind, content, message.seqs, message.tool_calls,
                   message.call_id, message.status)


def _originals(session: Session, seq: int) -> Iterator[Event]:
    """The original node events behind a surface node (through earlier summaries)."""
    event = session.events[seq]
    if event.type == "user/message" and event.surface_op is SurfaceOp.REPLACE:
        for s in event.source_event_seqs:
            yield from _originals(session, s)
    else:
        yield event


def gather_facts(session: Session, seqs: Sequence[int], *, prune_chars: int = 600) -> Facts:
    """Unfold the run ``seqs`` to its original events and collect what must survive."""
    originals = [e for s in seqs for e in _originals(session, s)]
    results = {e.data["call_id"]: e for e in originals if e.type == "tool/result"}
    end = max(e.seq for e in originals)
    requests: list[tuple[int, str]] = []
    corrections: list[tuple[int, str]] = []
    contexts: list[tuple[int, str]] = []
    tools: list[ToolOutcome] = []
    conclusion: str | None = None
    for e in originals:
        data = e.data
        if e.type == "user/message":
            text = _text_of(data["content"])
            (corrections if data.get("steering") else requests).append((e.seq, text))
        elif e.type == "context/snapshot":
            contexts.append((e.seq, _cut(data["content"], 200, f"seq {e.seq}")[0]))
        elif e.type == "assistant/message":
            text = _text_of(data["content"])
            if text:
                conclusion = text
            for call in data.get("tool_calls", ()):
                res = results.get(call["call_id"])
                if res is None:  # abandoned (the turn ended failed): never on the surface
                    continue
                msg = Message(Role.TOOL, Kind.TOOL_RESULT,
                              res.data.get("content") if "content" in res.data
                              else {"attachment": res.data["attachment"]}
                              if "attachment" in res.data else None,
                              (res.seq,), call_id=call["call_id"], status=res.data["status"])
                preview = _text_of(prune_message(msg, prune_chars)[0].content)
                tools.append(ToolOutcome(
                    call["call_id"], call["name"], call["arguments"], res.data["status"],
                    res.data.get("operation_id"), preview, res.seq,
                ))
    goal: str | None = None
    todos: dict[str, OpenTask] = {}
    added: dict[str, int] = {}
    for e in session.events:
        if e.type == "goal/set" and e.seq <= end:
            goal = e.data["goal"]
        elif e.type == "todo/add":
            old = todos.get(e.data["id"])
            status = e.data.get("status") or (old.status if old else "pending")
            todos[e.data["id"]] = OpenTask(e.data["id"], e.data["text"], status)
            added.setdefault(e.data["id"], e.seq)
        elif e.type == "todo/update" and e.data["id"] in todos:
            old = todos[e.data["id"]]
            todos[e.data["id"]] = OpenTask(old.id, old.text, e.data["status"])
    open_tasks = tuple(
        t for t in todos.values() if t.status not in CLOSED_TASK_STATUSES and added[t.id] <= end
    )
    return Facts(goal, tuple(requests), tuple(corrections), tuple(contexts), tuple(tools),
                 open_tasks, conclusion, tuple(e.seq for e in originals))


def build_request(session: Session, rng: Range, *, prune_chars: int = 600) -> SummaryRequest:
    """The summarizer's input for ``rng``: pruned messages plus the facts to keep."""
    nodes = session.surface.messages()[rng.first_position : rng.last_position + 1]
    pruned: list[Message] = []
    results = chars = 0
    for node in nodes:
        msg, cut = prune_message(node, prune_chars)
        pruned.append(msg)
        if cut:
            results += 1
            chars += cut
    facts = gather_facts(session, rng.seqs, prune_chars=prune_chars)
    return SummaryRequest(tuple(pruned), facts, rng.tokens_before, Pruned(results, chars))


# -- the offline summarizer ---------------------------------------------------------------

def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class OfflineSummarizer:
    """Deterministic extractive summary: same history, same text, no model, no network.

    Keeps the goal, the first and the latest user requests, every user correction
    word for word, every tool call with its status and operation id, the open tasks
    and the last assistant conclusion; long texts are cut to ``line_chars``.
    """

    provider: str = "offline"
    model: str = "extractive-v1"
    line_chars: int = 160
    requests_kept: int = 3  # the first request plus this many of the latest
    preview_chars: int = 60

    @property
    def config(self) -> Mapping[str, JsonValue]:
        return {"line_chars": self.line_chars, "requests_kept": self.requests_kept,
                "preview_chars": self.preview_chars}

    def summarize(self, request: SummaryRequest) -> str:
        f = request.facts
        n = self.line_chars
        out = [f"[Summary of {len(request.messages)} earlier messages "
               f"(seqs {f.source_seqs[0]}..{f.source_seqs[-1]})]"]
        if f.goal:
            out.append(f"Goal: {_one_line(f.goal, n)}")
        if f.requests:
            reqs = list(f.requests)
            latest = reqs[1:][-self.requests_kept:] if self.requests_kept else []
            out.append("User requests:")
            out.append(f"- (seq {reqs[0][0]}) {_one_line(reqs[0][1], n)}")
            if len(reqs) > 1 + len(latest):
                out.append(f"- ({len(reqs) - 1 - len(latest)} more requests in between)")
            out += [f"- (seq {s}) {_one_line(t, n)}" for s, t in latest]
        if f.corrections:
            out.append("User corrections (verbatim, still in force):")
            out += [f"- (seq {s}) {' '.join(t.split())}" for s, t in f.corrections]
        if f.contexts:
            s, t = f.contexts[-1]
            out.append(f"Context (seq {s}): {_one_line(t, n)}")
        if f.tools:
            out.append("Tool calls done:")
            for tool in f.tools:
                op = f" op={tool.operation_id}" if tool.operation_id else ""
                args = _one_line(_text_of(tool.arguments), 40)
                out.append(f"- {tool.name}({args}) {tool.status}{op} [{tool.call_id}]: "
                           f"{_one_line(tool.preview, self.preview_chars)}")
        if f.open_tasks:
            out.append("Open tasks:")
            out += [f"- [{t.id}] {t.status}: {_one_line(t.text, n)}" for t in f.open_tasks]
        if f.conclusion:
            out.append(f"Last assistant conclusion: {_one_line(f.conclusion, 2 * n)}")
        return "\n".join(out)


# -- the quality gate ---------------------------------------------------------------------

_SPACE = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def check_summary(text: str, facts: Facts, tokens_before: int, tokens_after: int) -> list[str]:
    """What the summary loses (seed §4.10.3); an empty list means it may be committed."""
    problems: list[str] = []
    if not text.strip():
        return ["the summary is empty"]
    flat = _norm(text)
    lost_ops = [op for op in facts.operation_ids if op not in text]
    if lost_ops:
        problems.append(f"lost operation id(s) {', '.join(lost_ops)}")
    lost_corr = [str(seq) for seq, t in facts.corrections if _norm(t) not in flat]
    if lost_corr:
        problems.append(f"lost user correction(s) at seq {', '.join(lost_corr)}")
    lost_tasks = [t.id for t in facts.open_tasks if t.id not in text]
    if lost_tasks:
        problems.append(f"lost open task(s) {', '.join(lost_tasks)}")
    if tokens_after >= tokens_before:
        problems.append(f"does not reduce tokens ({tokens_before} before, {tokens_after} after)")
    return problems


# -- the lifecycle ------------------------------------------------------------------------

@dataclass(frozen=True)
class Attempt:
    """A summarized (or failed) attempt, not yet in the log."""

    compaction_id: str
    decision: Decision
    provider: str
    model: str
    config: Mapping[str, JsonValue]
    range: Range | None = None
    summary: str | None = None
    tokens_after: int | None = None
    pruned: Pruned = field(default_factory=Pruned)
    facts: Facts | None = None
    failure: str | None = None  # why it must end failed (None: commit it)

    def to_json(self) -> dict[str, Any]:
        r = self.range
        return {
            "compaction_id": self.compaction_id, "decision": self.decision.to_json(),
            "summarizer": {"provider": self.provider, "model": self.model,
                           "config": dict(self.config)},
            "range": None if r is None else {
                "first_position": r.first_position, "last_position": r.last_position,
                "shadowed_seqs": list(r.seqs), "tokens_before": r.tokens_before},
            "tokens_after": self.tokens_after, "failure": self.failure,
            "pruned": {"results": self.pruned.results, "chars": self.pruned.chars},
        }


def _as_budget(budget: Budget | int) -> Budget:
    return budget if isinstance(budget, Budget) else Budget(tokens=budget)


def attempt_compaction(
    session: Session,
    summarizer: Summarizer,
    *,
    trigger: str | None = None,
    budget: Budget | int = DEFAULT_BUDGET,
    compaction_id: str | None = None,
) -> Attempt | None:
    """Decide, pick the range, summarize and gate — without touching the session.

    None when the policy says no compaction is needed. Raises CompactionBusy if an
    attempt is already open (the compaction lock).
    """
    b = _as_budget(budget)
    open_ = session.open_compaction
    if open_ is not None:
        raise CompactionBusy(session.session_id, open_.compaction_id, open_.start_seq)
    decision = should_compact(session.derive_messages(), b.tokens, trigger=trigger,
                              pressure=b.pressure)
    if not decision.compact:
        return None
    cid = compaction_id or f"cmp-{session.ids()}"
    base = Attempt(cid, decision, summarizer.provider, summarizer.model,
                   dict(summarizer.config))
    rng = select_range(session, keep_recent=b.keep_recent, min_nodes=b.min_nodes)
    if isinstance(rng, str):
        return _replace(base, failure=rng)
    request = build_request(session, rng, prune_chars=b.prune_chars)
    try:
        text = summarizer.summarize(request)
    except SummarizerError as exc:
        return _replace(base, range=rng, pruned=request.pruned, facts=request.facts,
                        failure=f"{REASON_SUMMARIZER}: {exc}")
    after = message_tokens(Message(Role.USER, Kind.SUMMARY, text, (session.next_seq,)))
    problems = check_summary(text, request.facts, rng.tokens_before, after)
    failure = f"{REASON_QUALITY}: {'; '.join(problems)}" if problems else None
    return _replace(base, range=rng, summary=text, tokens_after=after, pruned=request.pruned,
                    facts=request.facts, failure=failure)


def _replace(attempt: Attempt, **changes: Any) -> Attempt:
    from dataclasses import replace

    return replace(attempt, **changes)


def commit_drafts(attempt: Attempt, session: Session) -> list[Draft]:
    """The lifecycle drafts for ``attempt``, checked against ``session`` as it is now.

    New events since the summary was made are kept: the run is looked up again by its
    seqs; if it is still a contiguous run of current surface nodes (check_range) it is
    replaced at its current positions, else the attempt ends ``abandoned``.
    """
    open_ = session.open_compaction
    if open_ is not None:
        raise CompactionBusy(session.session_id, open_.compaction_id, open_.start_seq)
    d = attempt.decision
    cid = attempt.compaction_id
    drafts = [Draft("compaction/start", {
        "compaction_id": cid, "trigger": d.trigger, "tokens": d.tokens,
        "budget_tokens": d.budget_tokens, "reason": d.reason,
    })]
    rng = attempt.range
    if attempt.failure is not None or rng is None or attempt.summary is None:
        drafts.append(Draft("compaction/end", {
            "compaction_id": cid, "outcome": "failed",
            "reason": attempt.failure or "no summary",
        }))
        return drafts
    surface = session.surface
    problem = surface.check_range(rng.seqs)
    if problem is None and session.open_turn_seq is not None:
        # the open turn's nodes are never shadowed (a turn may have started since)
        turn_seq = session.open_turn_seq
        if any(s >= turn_seq and session.events[s].surface_op is SurfaceOp.APPEND
               for s in rng.seqs):
            problem = "the run now reaches into the open turn"
    if problem is not None:
        drafts.append(Draft("compaction/end", {
            "compaction_id": cid, "outcome": "abandoned",
            "reason": f"{REASON_RANGE_CHANGED}: {problem}",
        }))
        return drafts
    first = surface.position_of(rng.seqs[0])
    assert first is not None
    surface_before = token_estimate(session.derive_messages())
    tokens_before = token_estimate(surface.messages()[first : first + len(rng.seqs)])
    assert attempt.tokens_after is not None
    facts = attempt.facts
    drafts += [
        Draft("compaction/summary", {
            "compaction_id": cid,
            "first_position": first,
            "last_position": first + len(rng.seqs) - 1,
            "shadowed_seqs": list(rng.seqs),
            "tokens_before": tokens_before,
            "tokens_after": attempt.tokens_after,
            "summarizer": {"provider": attempt.provider, "model": attempt.model,
                           "config": dict(attempt.config)},
            "surface_tokens_before": surface_before,
            "surface_tokens_after": surface_before - tokens_before + attempt.tokens_after,
            "pruned": {"results": attempt.pruned.results, "chars": attempt.pruned.chars},
            "kept": {
                "operation_ids": len(facts.operation_ids) if facts else 0,
                "corrections": len(facts.corrections) if facts else 0,
                "open_tasks": [t.id for t in facts.open_tasks] if facts else [],
            },
        }),
        Draft("user/message", {"content": attempt.summary}, surface_op=SurfaceOp.REPLACE,
              source_event_seqs=rng.seqs),
        Draft("compaction/end", {"compaction_id": cid, "outcome": "completed"}),
    ]
    return drafts


def plan_compaction(
    session: Session,
    summarizer: Summarizer | None = None,
    *,
    trigger: str | None = None,
    budget: Budget | int = DEFAULT_BUDGET,
) -> list[Draft]:
    """The full lifecycle drafts for one attempt on ``session`` (empty: not needed).

    start → summary → replace → end(completed), or start → end(failed, reason).
    """
    attempt = attempt_compaction(session, summarizer or OfflineSummarizer(), trigger=trigger,
                                 budget=budget)
    return [] if attempt is None else commit_drafts(attempt, session)


def compact_session(
    session: Session,
    summarizer: Summarizer | None = None,
    *,
    trigger: str | None = None,
    budget: Budget | int = DEFAULT_BUDGET,
) -> list[Event]:
    """Plan and append one attempt to ``session``; returns the events appended."""
    return [session.append(d) for d in plan_compaction(session, summarizer, trigger=trigger,
                                                       budget=budget)]
