"""What a summarizer gets and the deterministic offline summarizer.

The offline summary is built in sections. The commitments (every user message word for
word, every tool call with its ids and status, the open tasks, the stated next steps)
are always written; what is not a commitment (result previews, call arguments, the
latest context, the last conclusion) is dropped, in that order, until the summary is at
most ``target_ratio`` of the run it replaces. User messages are never cut.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sessionstream.core.compaction.facts import CallOutcome, Facts, gather_facts
from sessionstream.core.compaction.pruning import Pruned, prune_message, text_of
from sessionstream.core.compaction.ranges import Range
from sessionstream.core.jsonvalue import JsonValue
from sessionstream.core.messages import Kind, Message, Role
from sessionstream.core.session import Session
from sessionstream.core.surface import message_tokens


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


def build_request(session: Session, rng: Range, *, prune_chars: int = 600) -> SummaryRequest:
    """The summarizer's input for ``rng``: pruned messages plus the facts to keep."""
    nodes = session.surface.messages()[rng.first_position : rng.last_position + 1]
    pruned: list[Message] = []
    results = chars = 0
    for node in nodes:
        msg, removed = prune_message(node, prune_chars)
        pruned.append(msg)
        if removed:
            results += 1
            chars += removed
    facts = gather_facts(session, rng.seqs, prune_chars=prune_chars)
    return SummaryRequest(tuple(pruned), facts, rng.tokens_before, Pruned(results, chars))


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    head = flat[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip() + "…"


def _unmarked(text: str) -> str:
    """The head of a pruned text, without the pruning marker (cut lines never split it)."""
    return text.split(" …[pruned ", 1)[0]


def verbatim(text: str) -> str:
    """``text`` on one line, every word kept."""
    return " ".join(text.split())


def tokens_of(text: str) -> int:
    """The estimate the gate uses for a summary message."""
    return message_tokens(Message(Role.USER, Kind.SUMMARY, text, (0,)))


@dataclass(frozen=True)
class OfflineSummarizer:
    """Deterministic extractive summary: same history, same text, no model, no network."""

    provider: str = "offline"
    model: str = "extractive-v2"
    line_chars: int = 160
    preview_chars: int = 60
    args_chars: int = 60
    target_ratio: float = 0.5  # drop optional sections until the summary is this small

    @property
    def config(self) -> Mapping[str, JsonValue]:
        return {"line_chars": self.line_chars, "preview_chars": self.preview_chars,
                "args_chars": self.args_chars, "target_ratio": self.target_ratio}

    def summarize(self, request: SummaryRequest) -> str:
        text = ""
        for level in range(4):  # 0: everything … 3: commitments only
            text = self.render(request.facts, level)
            if tokens_of(text) <= request.tokens_before * self.target_ratio:
                break
        return text

    def _tool_line(self, t: CallOutcome, level: int) -> str:
        parts = [f"- [seq {t.seq}] call={t.call_id} tool={t.name} status={t.status}"]
        if t.operation_id:
            parts.append(f"op={t.operation_id}")
        if t.idempotency_key:
            parts.append(f"idempotency_key={t.idempotency_key}")
        line = " ".join(parts)
        if level < 2 and isinstance(t.arguments, Mapping) and t.arguments:
            args = ", ".join(f"{k}={text_of(v)}" for k, v in sorted(t.arguments.items()))
            line += f" args: {one_line(args, self.args_chars)}"
        if level < 1 and t.preview:
            line += f" -> {one_line(_unmarked(t.preview), self.preview_chars)}"
        return line

    def render(self, f: Facts, level: int = 0) -> str:
        """The summary at one level of detail (0: all sections, 3: commitments only)."""
        n = self.line_chars
        first, last = f.source_seqs[0], f.source_seqs[-1]
        out = [f"Summary of the earlier conversation [seqs {first}..{last}] "
               "(the original events stay in the log)."]
        if f.goal:
            out.append(f"Goal: {verbatim(f.goal)}")
        corrections = {s for s, _ in f.corrections}
        if f.user_messages:
            out.append("User messages, word for word (corrections and constraints stay "
                       "in force):")
            out += [f"- [seq {s}] {'(correction) ' if s in corrections else ''}{verbatim(t)}"
                    for s, t in f.user_messages]
        if f.tools:
            out.append("Tool calls (call, tool, status, operation id, idempotency key):")
            out += [self._tool_line(t, level) for t in f.tools]
        if f.open_tasks:
            out.append("Open tasks:")
            out += [f"- [{t.id}] {t.status}: {verbatim(t.text)}" for t in f.open_tasks]
        if f.next_steps:
            out.append("Next steps and plans the assistant stated, word for word:")
            out += [f"- [seq {s}] {t}" for s, t in f.next_steps]
        if level < 2 and f.contexts:
            s, t = f.contexts[-1]
            out.append(f"Context [seq {s}]: {one_line(_unmarked(t), n)}")
        if level < 3 and f.conclusion:
            out.append(f"Last assistant conclusion: {one_line(f.conclusion, 2 * n)}")
        return "\n".join(out)
