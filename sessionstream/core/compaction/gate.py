"""The quality gate: a summary is committed only if it keeps every commitment (§4.10.3).

Checked per category (:data:`CATEGORIES`), each with what was kept and what was lost:

``tools``             every tool call's call id on a line with its tool name and status
``operation_ids``     every operation id of a shadowed tool result
``idempotency_keys``  every idempotency key on a line with its call id, tool and status
``user_messages``     every shadowed user message word for word (whitespace normalised):
                      corrections and constraints whatever their wording
``open_tasks``        every open todo's id and text
``next_steps``        every sentence of assistant text stating work to do or a plan

and then that the summary **adds no fact**: every word holding a digit (ids, numbers,
dates, versions) is a word of the span's source text, every quoted name ("…", `…`, '…')
appears in it, and every ``[seq N]`` / ``[seqs A..B]`` reference names a seq of the span.
An optional :class:`ExposureCheck` (the governance hook: "exposes no content of a data
class the surface may not carry") adds its own problems. Finally the summary must be
non-empty and smaller than the run it replaces.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sessionstream.core.compaction.facts import Facts, id_tokens

CATEGORIES = ("tools", "operation_ids", "idempotency_keys", "user_messages", "open_tasks",
              "next_steps")

#: How a loss of each category is named in ``compaction/end.reason``.
_LOST = {
    "tools": "tool call(s)",
    "operation_ids": "operation id(s)",
    "idempotency_keys": "idempotency key(s)",
    "user_messages": "user message(s) (corrections, constraints) at seq",
    "open_tasks": "open task(s)",
    "next_steps": "next step(s) stated at seq",
}

_SPACE = re.compile(r"\s+")
#: Annotations a summary may carry that are not facts of the history but point into it.
_SEQ_REF = re.compile(r"\[seqs? (\d+)(?:\.\.(\d+))?\]")
_MARKERS = re.compile(
    r"…\[pruned \d+ chars, full: (?:seq \d+|attachment sha256:[0-9a-f]+)\]…"
)
_QUOTED = re.compile(r'"([^"\n]{1,200})"|`([^`\n]{1,200})`|“([^”\n]{1,200})”|'
                     r"(?<![\w])'([^'\n]{1,200})'(?![\w])")


def norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


class ExposureCheck(Protocol):
    """Governance hook: what in a summary the surface may not carry (data classes).

    Returns one sentence per problem (empty: nothing exposed). The gate refuses the
    summary when any is returned; the default is no check.
    """

    def __call__(self, text: str, facts: Facts) -> Sequence[str]: ...


@dataclass(frozen=True)
class Category:
    """One kind of commitment: how many the run held, which the summary lost."""

    name: str
    total: int
    lost: tuple[str, ...]

    @property
    def kept(self) -> int:
        return self.total - len(self.lost)

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "kept": self.kept, "lost": list(self.lost)}


@dataclass(frozen=True)
class GateReport:
    """The gate's verdict on one summary, category by category."""

    categories: tuple[Category, ...]
    invented: tuple[str, ...]  # words/quotes/seq refs absent from the source
    exposed: tuple[str, ...]  # problems from the exposure check
    tokens_before: int
    tokens_after: int
    empty: bool = False

    def category(self, name: str) -> Category:
        return next(c for c in self.categories if c.name == name)

    @property
    def problems(self) -> list[str]:
        if self.empty:
            return ["the summary is empty"]
        out = [f"lost {_LOST[c.name]} {', '.join(c.lost)}" for c in self.categories if c.lost]
        if self.invented:
            out.append(f"adds facts absent from the shadowed events: {', '.join(self.invented)}")
        out += [f"exposes: {p}" for p in self.exposed]
        if self.tokens_after >= self.tokens_before:
            out.append(f"does not reduce tokens ({self.tokens_before} before, "
                       f"{self.tokens_after} after)")
        return out

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed,
                "categories": {c.name: c.to_json() for c in self.categories},
                "invented": list(self.invented), "exposed": list(self.exposed),
                "tokens_before": self.tokens_before, "tokens_after": self.tokens_after}


def _has_word(line: str, word: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", line) is not None


def _lines_with(lines: list[str], word: str) -> list[str]:
    return [line for line in lines if _has_word(line, word)]


def _on_one_line(lines: list[str], call_id: str, *words: str) -> bool:
    return any(all(_has_word(line, w) for w in words) for line in _lines_with(lines, call_id))


def invented_facts(text: str, facts: Facts) -> list[str]:
    """Words with digits, quoted names and seq references of ``text`` the source lacks."""
    ev = facts.evidence
    out: list[str] = []
    for m in _SEQ_REF.finditer(text):
        for g in m.groups():
            if g is not None and int(g) not in ev.seqs:
                out.append(f"[seq {g}]")
    bare = _MARKERS.sub(" ", _SEQ_REF.sub(" ", text))
    known = ev.tokens
    for tok in id_tokens(bare):
        if tok not in known and tok not in out:
            out.append(tok)
    source = ev.text
    for m in _QUOTED.finditer(bare):
        quoted = norm(next(g for g in m.groups() if g is not None))
        if quoted and quoted not in source and f'"{quoted}"' not in out:
            out.append(f'"{quoted}"')
    return out


def gate(text: str, facts: Facts, tokens_before: int, tokens_after: int, *,
         exposure: ExposureCheck | None = None) -> GateReport:
    """Check ``text`` against every category of commitment in ``facts``."""
    if not text.strip():
        return GateReport((), (), (), tokens_before, tokens_after, empty=True)
    flat = norm(text)
    lines = text.splitlines()
    tools = Category("tools", len(facts.tools), tuple(
        t.call_id for t in facts.tools if not _on_one_line(lines, t.call_id, t.name, t.status)))
    ops = Category("operation_ids", len(facts.operation_ids), tuple(
        op for op in facts.operation_ids if not _lines_with(lines, op)))
    keyed = [t for t in facts.tools if t.idempotency_key]
    keys = Category("idempotency_keys", len(keyed), tuple(
        str(t.idempotency_key) for t in keyed
        if not _on_one_line(lines, t.call_id, str(t.idempotency_key), t.name, t.status)))
    users = Category("user_messages", len(facts.user_messages), tuple(
        str(s) for s, t in facts.user_messages if norm(t) not in flat))
    tasks = Category("open_tasks", len(facts.open_tasks), tuple(
        t.id for t in facts.open_tasks if t.id not in text or norm(t.text) not in flat))
    steps = Category("next_steps", len(facts.next_steps), tuple(
        str(s) for s, t in facts.next_steps if norm(t) not in flat))
    exposed = tuple(exposure(text, facts)) if exposure is not None else ()
    return GateReport((tools, ops, keys, users, tasks, steps),
                      tuple(invented_facts(text, facts)), exposed, tokens_before, tokens_after)


def check_summary(text: str, facts: Facts, tokens_before: int, tokens_after: int, *,
                  exposure: ExposureCheck | None = None) -> list[str]:
    """What the summary loses or invents; an empty list means it may be committed."""
    return gate(text, facts, tokens_before, tokens_after, exposure=exposure).problems
