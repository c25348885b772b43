"""What a summary must keep, gathered from the shadowed history (seed §4.10.3).

The run is unfolded through earlier summaries to its original events, so facts survive
repeated compactions. The *span* of a run is every log event from its first original event
up to the next surface node: the tool calls written between the surface nodes belong to
the shadowed history too (a tool/call follows the assistant message that made it, and an
interrupted turn's call has no node at all). Goal and todos
come from the whole log up to the span's end.

Commitments, by category:

* **tools** — every tool call with its call id, tool name and status (``no-result`` when
  the log holds the call but no result: its side effect may have happened);
* **operation ids** of tool results and **idempotency keys** of tool calls;
* **user messages** — every shadowed user message, word for word, whatever its wording:
  corrections and constraints are not recognised by phrasing, they are all kept
  (:func:`looks_like_correction` only labels them for readers);
* **open tasks** — todo items added in the span and not done or cancelled now;
* **next steps** — every sentence of assistant text that states work still to do or a
  plan (:func:`commitments`, deliberately over-inclusive: a kept sentence that turns
  out to be done costs a few tokens, a dropped one loses a task).

:class:`Evidence` is the source text of the span, used by the gate to refuse a summary
that names an id, a number or a quoted name the history never contained.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from sessionstream.core.compaction.pruning import cut, prune_message, text_of
from sessionstream.core.events import Event, SurfaceOp
from sessionstream.core.jsonvalue import JsonValue
from sessionstream.core.messages import Kind, Message, Role
from sessionstream.core.session import Session

#: Todo statuses that close a task (anything else is an open task a summary must keep).
CLOSED_TASK_STATUSES = frozenset({"done", "cancelled"})

#: The status a summary gives a tool call the log holds without a result.
NO_RESULT = "no-result"

# -- classifiers --------------------------------------------------------------------------

#: Sentence starts/words that state remaining work or a plan in assistant text.
_COMMITMENT = re.compile(
    r"\b(?:next|then|after\s+that|afterwards|later|remaining|remain|remains|still|"
    r"need(?:s|ed)?|before\s+(?:i|we|you)\s+can|have\s+to|has\s+to|must|should|will|won't|i'll|we'll|i'd|"
    r"going\s+to|gonna|plan(?:s|ned|ning)?\s+to|the\s+plan\s+is|intend|todo|to-do|to\s+do|"
    r"follow[- ]?up|"
    r"pending|not\s+yet|yet|haven't|hasn't|hadn't|left|outstanding|open|unfinished|"
    r"blocked|waiting|wait\s+for|tbd|once|until|tomorrow|soon|on\s+my\s+list|"
    r"let\s+me|i\s+want\s+to|want\s+to|promise|owe|due|deadline|by\s+(?:monday|tuesday|"
    r"wednesday|thursday|friday|saturday|sunday|eod|end\s+of))\b",
    re.IGNORECASE,
)

#: Wording that usually marks a user correction or constraint (labels only: every user
#: message is kept verbatim whatever it says).
_CORRECTION = re.compile(
    r"(?:^\s*(?:no|nope|wait|stop)\b|\b(?:actually|instead|rather|wrong|mistake|correction|"
    r"not|don't|do\s+not|never|always|only|must|make\s+sure|no\s+longer|anymore|"
    r"shouldn't|can't|avoid|careful|keep|switch|use\b.*\bnot)\b)",
    re.IGNORECASE,
)

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|\[\s?[x ]?\s?\])\s*")


def sentences(text: str) -> list[str]:
    """``text`` split into sentences and list items, whitespace normalised."""
    out = []
    for part in _SENTENCE_END.split(text):
        part = " ".join(_BULLET.sub("", part).split())
        if part:
            out.append(part)
    return out


def commitments(text: str) -> list[str]:
    """The sentences of assistant ``text`` that state work still to do or a plan."""
    return [s for s in sentences(text) if _COMMITMENT.search(s)]


def looks_like_correction(text: str, steering: bool = False) -> bool:
    """Whether a user message reads as a correction or constraint (a label, not a filter)."""
    return steering or bool(_CORRECTION.search(text))


# -- the facts ----------------------------------------------------------------------------

@dataclass(frozen=True)
class CallOutcome:
    """A tool call done in the shadowed history, with what the summary must keep."""

    call_id: str
    name: str
    arguments: JsonValue
    status: str  # ok | error | … from the result, or NO_RESULT
    operation_id: str | None
    preview: str  # pruned result content
    seq: int  # the tool/result (the tool/call when there is no result)
    idempotency_key: str | None = None


@dataclass(frozen=True)
class OpenTask:
    id: str
    text: str
    status: str


@dataclass(frozen=True)
class Evidence:
    """The source text of a run's span, for the no-invented-facts check."""

    pieces: tuple[str, ...]
    seqs: frozenset[int]

    @cached_property
    def text(self) -> str:
        return " ".join(" ".join(p.split()) for p in self.pieces)

    @cached_property
    def tokens(self) -> frozenset[str]:
        out: set[str] = set()
        for piece in self.pieces:
            for tok in id_tokens(piece):
                out.add(tok)
                out.update(t for t in _SUBTOKEN.split(tok) if t)
        return frozenset(out)


_TOKEN = re.compile(r"\w[\w.:/@#+\-]*")
_SUBTOKEN = re.compile(r"[.:/@#+]")


def id_tokens(text: str) -> Iterator[str]:
    """Every word of ``text`` that holds a digit (ids, numbers, dates, versions)."""
    for m in _TOKEN.finditer(text):
        tok = m.group().rstrip(".:/@#+-")
        if any(c.isdigit() for c in tok):
            yield tok


@dataclass(frozen=True)
class Facts:
    """The shadowed history, unfolded through earlier summaries to the original events."""

    goal: str | None
    requests: tuple[tuple[int, str], ...]  # (seq, text) of user messages not read as corrections
    corrections: tuple[tuple[int, str], ...]  # (seq, text) of those read as corrections
    contexts: tuple[tuple[int, str], ...]  # (seq, pruned content) of context snapshots
    tools: tuple[CallOutcome, ...]
    open_tasks: tuple[OpenTask, ...]
    conclusion: str | None  # the last assistant text
    source_seqs: tuple[int, ...]  # the original node events behind the run
    next_steps: tuple[tuple[int, str], ...] = ()  # (seq, sentence) of assistant commitments
    evidence: Evidence = field(default_factory=lambda: Evidence((), frozenset()))

    @property
    def user_messages(self) -> tuple[tuple[int, str], ...]:
        """Every shadowed user message, in log order (each kept word for word)."""
        return tuple(sorted(self.requests + self.corrections))

    @property
    def operation_ids(self) -> tuple[str, ...]:
        return tuple(t.operation_id for t in self.tools if t.operation_id)

    @property
    def idempotency_keys(self) -> tuple[str, ...]:
        return tuple(t.idempotency_key for t in self.tools if t.idempotency_key)


def originals(session: Session, seq: int) -> Iterator[Event]:
    """The original node events behind a surface node (through earlier summaries)."""
    event = session.events[seq]
    if event.type == "user/message" and event.surface_op is SurfaceOp.REPLACE:
        for s in event.source_event_seqs:
            yield from originals(session, s)
    else:
        yield event


def _leaves(value: JsonValue) -> Iterator[str]:
    """Every string, number and key in a JSON value, as text."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield json.dumps(value)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield str(k)
            yield from _leaves(v)
    elif isinstance(value, Iterable):
        for v in value:
            yield from _leaves(v)


def evidence_of(events: Sequence[Event]) -> Evidence:
    """The text a summary of ``events`` may draw ids, numbers and quoted names from."""
    pieces: list[str] = []
    for e in events:
        pieces.extend(_leaves(e.data))
        pieces.append(text_of(e.data))
        if e.turn_id:
            pieces.append(e.turn_id)
    return Evidence(tuple(pieces), frozenset(e.seq for e in events))


def span_events(session: Session, first: int, end: int) -> list[Event]:
    """The log events of a run's span: seqs ``first..end``, without compaction's records."""
    return [e for e in session.events[first : end + 1]
            if not e.type.startswith("compaction/")
            and not (e.type == "user/message" and e.surface_op is SurfaceOp.REPLACE)]


def _span_end(session: Session, seqs: Sequence[int], last_node: int) -> int:
    """The last seq of the shadowed history: up to the first event of the next node.

    Events after the run's last node and before the next surface node (the tool/call of
    an interrupted turn, a todo, a turn/end) belong to the shadowed history. A run that
    is no longer on the surface ends at its last node.
    """
    surface = session.surface
    pos = surface.position_of(seqs[-1])
    if pos is None:
        return last_node
    nodes = surface.messages()
    if pos + 1 >= len(nodes):
        return len(session.events) - 1
    following = min(e.seq for e in originals(session, nodes[pos + 1].seqs[0]))
    return max(last_node, following - 1)


def gather_facts(session: Session, seqs: Sequence[int], *, prune_chars: int = 600) -> Facts:
    """Unfold the run ``seqs`` to its original events and collect what must survive."""
    nodes = [e for s in seqs for e in originals(session, s)]
    end = _span_end(session, seqs, max(e.seq for e in nodes))
    span = span_events(session, min(e.seq for e in nodes), end)
    results = {e.data["call_id"]: e for e in span if e.type == "tool/result"}
    keys = {e.data["call_id"]: e.data.get("idempotency_key") for e in span
            if e.type == "tool/call"}
    requests: list[tuple[int, str]] = []
    corrections: list[tuple[int, str]] = []
    contexts: list[tuple[int, str]] = []
    next_steps: list[tuple[int, str]] = []
    tools: list[CallOutcome] = []
    seen_calls: set[str] = set()
    conclusion: str | None = None
    for e in nodes:
        data = e.data
        if e.type == "user/message":
            text = text_of(data["content"])
            target = corrections if looks_like_correction(text, bool(data.get("steering"))) \
                else requests
            target.append((e.seq, text))
        elif e.type == "context/snapshot":
            contexts.append((e.seq, cut(text_of(data["content"]), 200, f"seq {e.seq}")[0]))
        elif e.type == "assistant/message":
            text = text_of(data["content"])
            if text:
                conclusion = text
                next_steps.extend((e.seq, s) for s in commitments(text))
            for call in data.get("tool_calls", ()):
                res = results.get(call["call_id"])
                if res is None:  # abandoned (the turn ended failed): never on the surface
                    continue
                seen_calls.add(call["call_id"])
                msg = Message(Role.TOOL, Kind.TOOL_RESULT,
                              res.data.get("content") if "content" in res.data
                              else {"attachment": res.data["attachment"]}
                              if "attachment" in res.data else None,
                              (res.seq,), call_id=call["call_id"], status=res.data["status"])
                preview = text_of(prune_message(msg, prune_chars)[0].content)
                tools.append(CallOutcome(
                    call["call_id"], call["name"], call["arguments"], res.data["status"],
                    res.data.get("operation_id"), preview, res.seq,
                    keys.get(call["call_id"]),
                ))
    # Calls the log holds in the span that no surface node shows with a result (a turn
    # that ended failed or interrupted): the side effect may have happened, keep them.
    for e in span:
        if e.type == "tool/call" and e.data["call_id"] not in seen_calls:
            seen_calls.add(e.data["call_id"])
            res = results.get(e.data["call_id"])
            tools.append(CallOutcome(
                e.data["call_id"], e.data["name"], e.data["arguments"],
                res.data["status"] if res is not None else NO_RESULT,
                res.data.get("operation_id") if res is not None else None, "",
                res.seq if res is not None else e.seq, e.data.get("idempotency_key"),
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
    # Goal and todos may be set before the run's first node; the summary may name them.
    state = [e for e in session.events[: span[0].seq if span else 0]
             if e.type.startswith(("goal/", "todo/"))]
    return Facts(goal, tuple(requests), tuple(corrections), tuple(contexts), tuple(tools),
                 open_tasks, conclusion, tuple(e.seq for e in nodes), tuple(next_steps),
                 evidence_of(state + span))
