"""What the provider builders share: the built body with its origins, content
rendering, and the grouping of tool results into call rounds.

A :class:`Built` body is plain JSON (what the provider's SDK or HTTP API takes) plus,
for every part of it, the JSON pointer where it sits and the source it came from
(header field and its layer, system section, tool provider, surface message seqs), and
the notes: what the format could not carry as is (a tool status turned into text, a
non-string result serialised, an empty message omitted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sessionstream.core.jsonvalue import JsonValue, canonical_dumps, thaw
from sessionstream.core.messages import Kind, Message, Role
from sessionstream.core.providers.errors import ProviderMappingError
from sessionstream.core.providers.output import BLOCK_KINDS
from sessionstream.core.request import Request, SystemPart

#: The provider request/response formats this build maps (``--provider`` values).
APIS = ("openai-chat", "openai-responses", "anthropic", "gemini")
#: The APIs the simulators rotate over (their seeded sessions and the committed fixtures
#: were generated with these three; Gemini has its own tests).
SIMULATED_APIS = ("openai-chat", "openai-responses", "anthropic")

#: A tool result with status ``error`` for a format without an error flag (OpenAI):
#: its text starts with this marker; importers read it back as status ``error``.
ERROR_PREFIX = "ERROR: "


@dataclass(frozen=True)
class Origin:
    """Where one part of a built body came from."""

    path: str  # JSON pointer into the body, e.g. /messages/3/content/0
    source: Mapping[str, Any]  # part (header|system|tool|message|builder) and its details

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, **thaw(dict(self.source))}


@dataclass(frozen=True)
class Note:
    """Something the format could not carry as it is in the log (never dropped silently)."""

    path: str
    note: str
    seqs: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "note": self.note, "seqs": list(self.seqs)}


@dataclass(frozen=True)
class Built:
    """A provider request body and the map from its parts back to their sources."""

    api: str
    body: dict[str, Any]
    origins: tuple[Origin, ...] = ()
    notes: tuple[Note, ...] = ()

    def explain(self) -> list[dict[str, Any]]:
        return [o.to_json() for o in self.origins]


@dataclass
class Collector:
    """Accumulates origins and notes while a builder walks the request."""

    origins: list[Origin] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def origin(self, path: str, **source: Any) -> None:
        self.origins.append(Origin(path, source))

    def note(self, path: str, note: str, seqs: Sequence[int] = ()) -> None:
        self.notes.append(Note(path, note, tuple(seqs)))


def round_source(results: Sequence[Message]) -> dict[str, Any]:
    """The origin of the one message (Anthropic) or content (Gemini) that carries a call
    round's results: the results' call ids and seqs (each result has its own too)."""
    return {"part": "results", "call_ids": [m.call_id for m in results],
            "seqs": [s for m in results for s in m.seqs]}


def message_source(m: Message) -> dict[str, Any]:
    """The origin of a surface message: its kind, role and the seqs it came from."""
    out: dict[str, Any] = {"part": "message", "kind": m.kind.value, "seqs": list(m.seqs)}
    if m.call_id is not None:
        out["call_id"] = m.call_id
        out["status"] = m.status
    return out


# ------------------------------------------------------------------- header, system, tools


def header_part(request: Request, c: Collector, body: dict[str, Any], name: str,
                target: str) -> None:
    value = getattr(request.header, name)
    if value is None:
        return
    body[target] = value
    c.origin(f"/{target}", part="header", field=name,
             source=request.header.source_of(name) or "request/header")


def system_origin(request: Request) -> dict[str, Any]:
    return {"part": "system", "sections": [p.section_id for p in request.system],
            "variables": sorted({v for p in request.system for v in p.variables})}


def tools_of(request: Request, c: Collector, path: str, shape: str) -> list[dict[str, Any]]:
    """Tool schemas in one of the three shapes; records each tool's provider."""
    tools: list[dict[str, Any]] = []
    for i, t in enumerate(request.tools):
        s = t.schema
        params = thaw(s.parameters)
        if shape == "openai-chat":
            fn: dict[str, Any] = {"name": s.name, "parameters": params}
            if s.description:
                fn["description"] = s.description
            tools.append({"type": "function", "function": fn})
        elif shape == "openai-responses":
            tool: dict[str, Any] = {"type": "function", "name": s.name, "parameters": params,
                                    "strict": False}
            if s.description:
                tool["description"] = s.description
            tools.append(tool)
        else:
            atool: dict[str, Any] = {"name": s.name, "input_schema": params}
            if s.description:
                atool["description"] = s.description
            tools.append(atool)
        c.origin(f"{path}/{i}", part="tool", name=s.name, provider=t.provider)
    return tools


# --------------------------------------------------------------------------- content


@dataclass(frozen=True)
class TextPart:
    text: str
    serialised: bool = False  # True: not text in the log, rendered as JSON text


def attachment_text(att: Mapping[str, Any]) -> str:
    """A spilled tool result as the model sees it: head, a reference, tail."""
    return (f"{att.get('head', '')}\n…[{att.get('size')} bytes stored as attachment "
            f"sha256:{att.get('sha256')}]…\n{att.get('tail', '')}")


def _part_text(item: JsonValue) -> TextPart:
    if isinstance(item, str):
        return TextPart(item)
    if (isinstance(item, Mapping) and item.get("type") in ("text", "input_text", "output_text")
            and isinstance(item.get("text"), str)):
        return TextPart(item["text"])
    return TextPart(canonical_dumps(item), serialised=True)


def content_parts(content: JsonValue) -> list[TextPart]:
    """A message's content as text parts (a list content keeps its parts)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(content)]
    if isinstance(content, list | tuple):
        return [_part_text(item) for item in content]
    return [TextPart(canonical_dumps(content), serialised=True)]


def text_entries(m: Message, c: Collector, path: str, refusal: str) -> list[str | None]:
    """The text of each of ``m``'s content parts, None for a blank one (left out, with a
    note; ``refusal``: why the API needs it). A message without text (content ``""``, as
    a message of tool calls has) has no part, and nothing is noted; a serialised part
    is noted."""
    if m.content in ("", None):
        return []
    parts = content_parts(m.content)
    if any(p.serialised for p in parts):
        c.note(path, "non-text content part serialised as JSON text", m.seqs)
    if any(not p.text.strip() for p in parts):
        c.note(path, f"empty or whitespace-only text part omitted ({refusal})", m.seqs)
    return [p.text if p.text.strip() else None for p in parts]


def nonblank_texts(m: Message, c: Collector, path: str, refusal: str) -> list[str]:
    """The texts of ``m``'s content parts that are not blank (:func:`text_entries`)."""
    return [t for t in text_entries(m, c, path, refusal) if t is not None]


def nonblank_system(request: Request, c: Collector, path: str, refusal: str
                    ) -> list[SystemPart]:
    """The request's system sections with text; blank ones omitted with a note naming
    them (``refusal``: why the API needs it)."""
    blank = [p.section_id for p in request.system if not p.text.strip()]
    if blank:
        c.note(path, f"empty or whitespace-only system section(s) {', '.join(blank)} "
               f"omitted ({refusal})")
    return [p for p in request.system if p.text.strip()]


def content_text(content: JsonValue) -> tuple[str, bool]:
    """A message's content as one string; (text, whether anything was serialised)."""
    if isinstance(content, str):
        return content, False
    if content is None:
        return "", False
    parts = content_parts(content)
    if all(not p.serialised for p in parts):
        return "".join(p.text for p in parts), False
    return "".join(p.text for p in parts), True


def tool_result_text(m: Message) -> tuple[str, str | None]:
    """A tool result's content as one string, and a note when it was not a string.

    A string stays as it is; a spilled attachment becomes head + reference + tail;
    anything else (an object, a list, a number) is serialised as canonical JSON.
    """
    content = m.content
    if isinstance(content, str):
        return content, None
    if content is None:
        return "", None
    if isinstance(content, Mapping) and set(content) == {"attachment"}:
        return attachment_text(content["attachment"]), "spilled attachment rendered as head/tail"
    return canonical_dumps(content), "non-string tool result content serialised as JSON text"


def arguments_json(arguments: JsonValue) -> str:
    """Tool-call arguments as the JSON string OpenAI formats carry (canonical)."""
    return canonical_dumps(arguments)


# ---------------------------------------------------------------------------- rounds


@dataclass(frozen=True)
class Item:
    """One unit a builder renders: a user-role message, an assistant message, or the
    results of one assistant message's tool calls (a call round)."""

    kind: str  # "user" | "assistant" | "results"
    messages: tuple[Message, ...]
    moved: bool = False  # a user message that arrived during a call round, moved after it


def group(messages: Sequence[Message]) -> list[Item]:
    """Surface messages in provider order: each assistant message with tool calls is
    followed directly by all its results; a user-role message that arrived while the
    round was open (user steering) moves after the round's last result.

    Raises :class:`ProviderMappingError` for a tool result whose call is not on the
    surface, or a new assistant message while a round is still unanswered.
    """
    items: list[Item] = []
    round_msg: Message | None = None
    pending: set[str] = set()
    results: list[Message] = []
    deferred: list[Message] = []
    known: set[str] = set()

    def close() -> None:
        nonlocal round_msg
        if round_msg is not None:
            items.append(Item("results", tuple(results)))
            items.extend(Item("user", (d,), moved=True) for d in deferred)
            results.clear()
            deferred.clear()
            round_msg = None

    for m in messages:
        if m.kind is Kind.TOOL_RESULT:
            if m.call_id not in pending:
                where = "was already answered" if m.call_id in known else "is not on the surface"
                raise ProviderMappingError(
                    f"tool result seq {m.seqs[0]} answers call {m.call_id!r}, which {where}: "
                    "a provider rejects a result without its call")
            pending.discard(m.call_id)
            results.append(m)
            if not pending:
                close()
            continue
        if m.role is Role.ASSISTANT:
            if pending:
                raise ProviderMappingError(
                    f"assistant message seq {m.seqs[0]} follows calls without results: "
                    f"{sorted(pending)}")
            close()
            items.append(Item("assistant", (m,)))
            if m.tool_calls:
                round_msg = m
                pending = {c.call_id for c in m.tool_calls}
                known |= pending
            continue
        if pending:
            deferred.append(m)
        else:
            items.append(Item("user", (m,)))
    if pending:
        raise ProviderMappingError(
            f"tool calls without a result on the surface: {sorted(pending)}; "
            "a provider rejects them (record the results, or end the turn first)")
    return items


MOVED = "user message sent after the call round's results (it arrived during the round)"


# ------------------------------------------------------------------------- reasoning


def reasoning_parts(request: Request, m: Message, api: str, c: Collector, path: str
                    ) -> list[Mapping[str, Any]]:
    """The recorded reasoning of assistant message ``m`` that ``api`` can take back (its
    own); another API's reasoning is never sent and says so (a note)."""
    mine: list[Mapping[str, Any]] = []
    foreign: set[str] = set()
    for item in request.reasoning_for(m.seqs[0]):
        if isinstance(item, Mapping) and item.get("api") == api:
            mine.append(item)
        else:
            foreign.add(str(item.get("api")) if isinstance(item, Mapping) else "?")
    if foreign:
        c.note(path, f"reasoning of {', '.join(sorted(foreign))} not sent: only the API that "
               "produced it may see it", m.seqs)
    return mine


# ---------------------------------------------------------------------------- block order

T = TypeVar("T")


def arrange(order: Sequence[str], blocks: Mapping[str, Sequence[T | None]]
            ) -> list[tuple[str, T]]:
    """An assistant message's blocks (by kind: ``reasoning``, ``text``, ``call``) in its
    recorded ``order`` (``assistant/message.blocks``; empty: reasoning, then text, then
    calls). Each kind's blocks keep their own order and take the places ``order`` gives
    that kind; a place without a block (reasoning deleted or of another API) is skipped,
    and a block without a place (the log changed since: a shredded text) goes after, in
    the usual order. A None block (a blank text a builder leaves out) keeps its place and
    is left out. Returns (kind, block) pairs."""
    taken = dict.fromkeys(BLOCK_KINDS, 0)
    placed: list[tuple[str, T | None]] = []
    for kind in order:
        mine = blocks.get(kind, ())
        if kind in taken and taken[kind] < len(mine):
            placed.append((kind, mine[taken[kind]]))
            taken[kind] += 1
    for kind in BLOCK_KINDS:
        placed += [(kind, b) for b in blocks.get(kind, ())[taken[kind]:]]
    return [(kind, b) for kind, b in placed if b is not None]


def order_not_kept(request: Request, m: Message, c: Collector, path: str, why: str) -> None:
    """Note that an API without a place for it sends ``m``'s text before its calls although
    the model answered otherwise (``why``: what the format does)."""
    order = [k for k in request.blocks_for(m.seqs[0]) if k != "reasoning"]
    if order != sorted(order, key=BLOCK_KINDS.index):
        c.note(path, f"block order of the assistant message not kept: {why}", m.seqs)
