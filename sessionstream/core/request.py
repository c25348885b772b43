"""Request assembly (seed §4.5, §4.6): everything a model request contains, with its source.

A request is system-prompt sections (ordered; a scoped section shadows a global one
of the same id; a ``complete`` section is exclusive), tool schemas from providers
(visible vs known), prompt variables, the session's surface messages (dynamic
context enters them as ``context/snapshot`` events) and the request header.
:func:`assemble` is deterministic: the same log and registrations give an equal
:class:`Request`, and :func:`explain` names the origin of every part.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sessionstream.core.errors import (
    ConflictingCompleteSections,
    DuplicateSection,
    HiddenTool,
    MissingPromptVariable,
    PendingToolCalls,
    RequestAssemblyError,
    UnknownTool,
)
from sessionstream.core.events import Draft, Event, SurfaceOp
from sessionstream.core.jsonvalue import JsonValue, freeze, thaw
from sessionstream.core.messages import Kind, Message
from sessionstream.core.surface import pending_calls

GLOBAL = None  # the scope of sections every agent sees

# ----------------------------------------------------------------------------- sections


@dataclass(frozen=True, slots=True)
class Section:
    """One system-prompt section; ``scope`` None is global, a name is an agent/preset scope."""

    id: str
    text: str
    order: int = 0
    scope: str | None = GLOBAL
    complete: bool = False


class PromptRegistry:
    """The registered system-prompt sections (seed §4.5.1)."""

    def __init__(self, sections: Iterable[Section] = ()) -> None:
        self._sections: dict[tuple[str, str | None], Section] = {}
        for s in sections:
            self.add(s)

    def add(self, section: Section) -> Section:
        key = (section.id, section.scope)
        if key in self._sections:
            raise DuplicateSection(section.id, section.scope)
        self._sections[key] = section
        return section

    def section(self, id: str, text: str, *, order: int = 0, scope: str | None = GLOBAL,
                complete: bool = False) -> Section:
        """Register a section (the seed's ``systemPrompt.section()``)."""
        return self.add(Section(id, text, order, scope, complete))

    def effective(self, scope: str | None) -> tuple[Section, ...]:
        """Sections in effect for ``scope``, ordered by (order, id).

        A section of ``scope`` shadows the global one with the same id; if any
        effective section is complete it is the only one, and two are an error.
        """
        chosen: dict[str, Section] = {}
        for (sid, sscope), s in self._sections.items():
            if sscope is GLOBAL and sid not in chosen:
                chosen[sid] = s
        if scope is not GLOBAL:
            for (sid, sscope), s in self._sections.items():
                if sscope == scope:
                    chosen[sid] = s
        sections = sorted(chosen.values(), key=lambda s: (s.order, s.id))
        complete = [s for s in sections if s.complete]
        if len(complete) > 1:
            raise ConflictingCompleteSections(scope, [s.id for s in complete])
        return tuple(complete) if complete else tuple(sections)


_VARIABLE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


def render(text: str, variables: Mapping[str, Any], section_id: str) -> tuple[str, tuple[str, ...]]:
    """Substitute ``{name}`` (``{{`` / ``}}`` are literal braces); returns (text, names used)."""
    used: list[str] = []

    def sub(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        name = match.group(1)
        if name not in variables:
            raise MissingPromptVariable(name, section_id)
        if name not in used:
            used.append(name)
        return str(variables[name])

    return _VARIABLE.sub(sub, text), tuple(used)


# -------------------------------------------------------------------------------- tools


@dataclass(frozen=True, slots=True)
class ToolSchema:
    name: str
    description: str = ""
    parameters: JsonValue = field(default_factory=lambda: freeze({"type": "object"}))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "parameters": thaw(self.parameters)}


@dataclass(frozen=True, slots=True)
class ToolSet:
    """What a provider returns for one scope: visible schemas and every name it knows."""

    visible: tuple[ToolSchema, ...]
    known: frozenset[str]


class ToolProvider(Protocol):
    """Returns, at each assembly, the tools visible in a scope and all names it knows."""

    @property
    def name(self) -> str: ...

    def tools(self, scope: str | None) -> ToolSet: ...


class StaticTools:
    """A tool provider over a fixed list; ``visibility`` maps scope → visible names.

    Without ``visibility`` every tool is visible everywhere; a scope missing from it
    falls back to the global (None) entry, and to nothing if that is missing too.
    """

    def __init__(self, name: str, schemas: Iterable[ToolSchema],
                 visibility: Mapping[str | None, Iterable[str]] | None = None) -> None:
        self._name = name
        self._schemas = {s.name: s for s in schemas}
        self._visibility = (
            None if visibility is None else {k: frozenset(v) for k, v in visibility.items()}
        )

    @property
    def name(self) -> str:
        return self._name

    def tools(self, scope: str | None) -> ToolSet:
        known = frozenset(self._schemas)
        if self._visibility is None:
            names: frozenset[str] = known
        else:
            names = self._visibility.get(scope, self._visibility.get(GLOBAL, frozenset()))
        return ToolSet(tuple(s for n, s in self._schemas.items() if n in names), known)


@dataclass(frozen=True, slots=True)
class ToolPart:
    provider: str
    schema: ToolSchema


def resolve_tools(providers: Sequence[ToolProvider], scope: str | None,
                  names: Sequence[str] | None = None) -> tuple[ToolPart, ...]:
    """The tool schemas for a request: ``names`` in that order, or every visible tool.

    A name no provider knows raises :class:`UnknownTool` (with the closest known
    name); a known name that is not visible in ``scope`` raises :class:`HiddenTool`.
    """
    visible: dict[str, ToolPart] = {}
    known: dict[str, str] = {}
    for provider in providers:
        toolset = provider.tools(scope)
        for n in sorted(toolset.known):
            known.setdefault(n, provider.name)
        for schema in toolset.visible:
            if schema.name in visible:
                raise RequestAssemblyError(
                    f"tool {schema.name!r} is offered by both {visible[schema.name].provider!r}"
                    f" and {provider.name!r}"
                )
            visible[schema.name] = ToolPart(provider.name, schema)
    if names is None:
        return tuple(visible[n] for n in sorted(visible))
    parts: list[ToolPart] = []
    for n in names:
        if n in visible:
            parts.append(visible[n])
        elif n in known:
            raise HiddenTool(n, known[n], scope)
        else:
            close = difflib.get_close_matches(n, sorted(known), n=1, cutoff=0.6)
            raise UnknownTool(n, close[0] if close else None)
    return tuple(parts)


# ------------------------------------------------------------------------------- header

HEADER_FIELDS = ("provider", "model", "reasoning_effort", "max_tokens")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """How a request is routed (seed §4.5.4), and which layer supplied each field."""

    provider: str
    model: str
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    sources: tuple[tuple[str, str], ...] = ()  # sorted (field, where its value came from)

    def source_of(self, name: str) -> str | None:
        return dict(self.sources).get(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "reasoning_effort": self.reasoning_effort,
            "max_tokens": self.max_tokens,
            "defaults_source": dict(self.sources),
        }

    def to_draft(self) -> Draft:
        """The ``request/header`` event that logs this routing before the request."""
        return Draft("request/header", self.to_json())


def resolve_header(*layers: tuple[str, Mapping[str, Any]]) -> RequestHeader:
    """Merge (source name, values) layers, first wins, e.g. ("call", …), ("agent", …),
    ("adapter-default", …); records which layer supplied each field."""
    values: dict[str, Any] = {}
    sources: list[tuple[str, str]] = []
    for name in HEADER_FIELDS:
        for source, layer in layers:
            if layer.get(name) is not None:
                values[name] = layer[name]
                sources.append((name, source))
                break
    for required in ("provider", "model"):
        if required not in values:
            raise RequestAssemblyError(f"no layer supplies the request header's {required!r}")
    return RequestHeader(sources=tuple(sorted(sources)), **values)


def header_from_event(event: Event) -> RequestHeader:
    """The header a ``request/header`` event logged."""
    d = event.data
    return RequestHeader(
        d["provider"], d["model"], d.get("reasoning_effort"), d.get("max_tokens"),
        tuple(sorted((d.get("defaults_source") or {}).items())),
    )


# ------------------------------------------------------------------------------ context


def snapshot_id_for(content: str) -> str:
    """A content-derived snapshot id, so rebuilding gives the same id."""
    return "ctx-" + hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]


def materialize_context(log: Iterable[Event | Message], content: str,
                        sources: Sequence[str] = (),
                        snapshot_id: str | None = None) -> Draft | None:
    """A ``context/snapshot`` Draft when ``content`` differs from the latest snapshot.

    ``log`` is the session's events (the latest snapshot in the log) or its surface
    messages (the latest snapshot the model still sees). Returns None when nothing
    changed, so resuming never swaps in today's context for what the model saw (§4.5.3).
    """
    latest: Any = None
    for item in log:
        if isinstance(item, Event):
            if item.type == "context/snapshot":
                latest = item.data["content"]
        elif item.kind is Kind.CONTEXT:
            latest = item.content
    if latest == content:
        return None
    data = {"snapshot_id": snapshot_id or snapshot_id_for(content), "content": content,
            "sources": list(sources)}
    return Draft("context/snapshot", data, surface_op=SurfaceOp.APPEND)


def context_snapshot_ids(events: Iterable[Event]) -> dict[int, str]:
    """seq → snapshot_id of every ``context/snapshot`` (for :func:`explain`)."""
    return {e.seq: e.data["snapshot_id"] for e in events if e.type == "context/snapshot"}


def reasoning_of(events: Iterable[Event]) -> dict[int, tuple[JsonValue, ...]]:
    """seq → the recorded reasoning (class ``reasoning``) of every ``assistant/message``
    that has some: what a builder replays to the API that produced it."""
    out: dict[int, tuple[JsonValue, ...]] = {}
    for e in events:
        if e.type == "assistant/message":
            items = e.data.get("reasoning")
            if items:
                out[e.seq] = tuple(items)
    return out


def blocks_of(events: Iterable[Event]) -> dict[int, tuple[str, ...]]:
    """seq → the block order (``assistant/message.blocks``: reasoning, text and calls as
    the API returned them, when not in that order) of every assistant message that has
    one: what a builder follows to send the turn back as received."""
    out: dict[int, tuple[str, ...]] = {}
    for e in events:
        if e.type == "assistant/message":
            order = e.data.get("blocks")
            if order:
                out[e.seq] = tuple(str(k) for k in order)
    return out


def replaced_seqs(events: Iterable[Event]) -> dict[int, tuple[int, ...]]:
    """seq → ``source_event_seqs`` of every replace event: what each summary shadows
    (for :func:`explain`)."""
    return {
        e.seq: tuple(e.source_event_seqs) for e in events if e.surface_op is SurfaceOp.REPLACE
    }


# ------------------------------------------------------------------------------ request


@dataclass(frozen=True, slots=True)
class SystemPart:
    section_id: str
    scope: str | None
    order: int
    complete: bool
    text: str  # after variable substitution
    variables: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Request:
    """A fully assembled model request; equal inputs give an equal Request."""

    scope: str | None
    header: RequestHeader
    system: tuple[SystemPart, ...]
    tools: tuple[ToolPart, ...]
    variables: tuple[tuple[str, str], ...]  # only the variables the sections used
    messages: tuple[Message, ...]
    snapshot_ids: tuple[tuple[int, str], ...] = ()  # seq → id of context snapshots
    replaced: tuple[tuple[int, tuple[int, ...]], ...] = ()  # summary seq → seqs it shadows
    #: assistant message seq → its recorded reasoning items (each names its ``api``)
    reasoning: tuple[tuple[int, tuple[JsonValue, ...]], ...] = ()
    #: assistant message seq → the order of its blocks, when not reasoning, text, calls
    blocks: tuple[tuple[int, tuple[str, ...]], ...] = ()

    def reasoning_for(self, seq: int) -> tuple[JsonValue, ...]:
        """The recorded reasoning of the assistant message from ``seq`` (may be empty)."""
        for s, items in self.reasoning:
            if s == seq:
                return items
        return ()

    def blocks_for(self, seq: int) -> tuple[str, ...]:
        """The recorded block order of the assistant message from ``seq`` (empty: the
        usual one — reasoning, then text, then calls)."""
        for s, order in self.blocks:
            if s == seq:
                return order
        return ()

    @property
    def system_prompt(self) -> str:
        return "\n\n".join(p.text for p in self.system)

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "header": self.header.to_json(),
            "system": [
                {"section": p.section_id, "scope": p.scope, "order": p.order,
                 "complete": p.complete, "text": p.text, "variables": list(p.variables)}
                for p in self.system
            ],
            "tools": [{"provider": t.provider, **t.schema.to_json()} for t in self.tools],
            "variables": dict(self.variables),
            "messages": [m.to_json() for m in self.messages],
        }


def assemble(
    messages: Sequence[Message],
    registry: PromptRegistry,
    scope: str | None = GLOBAL,
    *,
    header: RequestHeader,
    tools: Sequence[str] | None = None,
    providers: Sequence[ToolProvider] = (),
    variables: Mapping[str, Any] | None = None,
    snapshot_ids: Mapping[int, str] | None = None,
    replaced: Mapping[int, Sequence[int]] | None = None,
    reasoning: Mapping[int, Sequence[JsonValue]] | None = None,
    blocks: Mapping[int, Sequence[str]] | None = None,
) -> Request:
    """Assemble the request for the surface ``messages`` in ``scope``.

    Refuses with :class:`PendingToolCalls` while an assistant tool call on the
    surface has no result. ``tools`` None means every tool visible in ``scope``.
    ``snapshot_ids`` (:func:`context_snapshot_ids`) and ``replaced``
    (:func:`replaced_seqs`) only feed :func:`explain`; ``reasoning``
    (:func:`reasoning_of`) and ``blocks`` (:func:`blocks_of`) are kept for the assistant
    messages still on the surface (a compacted one's go with it).
    """
    pending = pending_calls(messages)
    if pending:
        raise PendingToolCalls(pending)
    variables = variables or {}
    system: list[SystemPart] = []
    used: dict[str, str] = {}
    for s in registry.effective(scope):
        text, names = render(s.text, variables, s.id)
        for n in names:
            used[n] = str(variables[n])
        system.append(SystemPart(s.id, s.scope, s.order, s.complete, text, names))
    ctx_seqs = {m.seqs[0] for m in messages if m.kind is Kind.CONTEXT}
    summary_seqs = {m.seqs[0] for m in messages if m.kind is Kind.SUMMARY}
    assistant_seqs = {m.seqs[0] for m in messages if m.kind is Kind.ASSISTANT}
    return Request(
        scope=scope,
        header=header,
        system=tuple(system),
        tools=resolve_tools(providers, scope, tools),
        variables=tuple(sorted(used.items())),
        messages=tuple(messages),
        snapshot_ids=tuple(sorted(
            (seq, sid) for seq, sid in (snapshot_ids or {}).items() if seq in ctx_seqs
        )),
        replaced=tuple(sorted(
            (seq, tuple(src)) for seq, src in (replaced or {}).items() if seq in summary_seqs
        )),
        reasoning=tuple(sorted(
            (seq, tuple(freeze(i) for i in items)) for seq, items in (reasoning or {}).items()
            if seq in assistant_seqs and items
        )),
        blocks=tuple(sorted(
            (seq, tuple(order)) for seq, order in (blocks or {}).items()
            if seq in assistant_seqs and order
        )),
    )


def explain(request: Request) -> list[dict[str, Any]]:
    """Where every part of ``request`` came from (seed §4.6), in request order."""
    parts: list[dict[str, Any]] = []
    for name in HEADER_FIELDS:
        value = getattr(request.header, name)
        if value is not None:
            parts.append({"part": "header", "field": name, "value": value,
                          "source": request.header.source_of(name) or "request/header"})
    for p in request.system:
        parts.append({"part": "system", "section": p.section_id,
                      "scope": p.scope if p.scope is not None else "global",
                      "order": p.order, "complete": p.complete,
                      "variables": list(p.variables)})
    sections_of: dict[str, list[str]] = {}
    for p in request.system:
        for n in p.variables:
            sections_of.setdefault(n, []).append(p.section_id)
    for name, _value in request.variables:
        parts.append({"part": "variable", "name": name, "sections": sections_of.get(name, [])})
    for t in request.tools:
        parts.append({"part": "tool", "name": t.schema.name, "provider": t.provider})
    snapshots = dict(request.snapshot_ids)
    replaced = dict(request.replaced)
    for i, m in enumerate(request.messages):
        entry: dict[str, Any] = {"part": "message", "index": i, "role": m.role.value,
                                 "kind": m.kind.value, "seqs": list(m.seqs)}
        if m.kind is Kind.CONTEXT:
            entry["snapshot_id"] = snapshots.get(m.seqs[0])
        if m.kind is Kind.SUMMARY:
            shadowed = replaced.get(m.seqs[0])
            entry["replaces"] = list(shadowed) if shadowed is not None else None
        if m.tool_calls:
            entry["tool_calls"] = [c.call_id for c in m.tool_calls]
        if m.call_id is not None:
            entry["call_id"] = m.call_id
        parts.append(entry)
    return parts
