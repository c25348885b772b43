"""The OpenAI Agents SDK ``Session`` on sessionstream (extra ``sessionstream[openai-agents]``).

The one-line switch::

    session = SQLiteSession("conv-1")                                   # before
    session = SessionstreamSession("conv-1", FleetStore.from_settings())  # after

Every SDK item is one event of the session, so ``derive_messages()``, the projections,
the dashboard and ``explain`` read an SDK session like any other. The exact item rides
along in the event's ``item`` field (content: sealed at rest, shredded by ``sessionstream
delete``) and is what :meth:`SessionstreamSession.get_items` returns:

=================================  ==================================================
SDK item                           event (``data.item`` = the item)
=================================  ==================================================
message, role ``user``             ``user/message`` {content}
message, role ``assistant``        ``assistant/message`` {content: its text}, in a turn
``function_call``                  ``assistant/message`` {tool_calls: [the call]} and
                                   ``tool/call``, in a turn
``function_call_output``           ``tool/result`` {call_id, status ok, content}
anything else (reasoning, system,  ``openai-agents/item`` (a plugin type: kept,
a call the rules refuse…)          ignorable, never on the model surface)
``pop_item()``                     ``openai-agents/pop`` (the latest item is popped)
``clear_session()``                ``openai-agents/clear`` (the items so far are cleared)
=================================  ==================================================

Assistant-side items open a turn and a step (``turn/start``, ``step/start``); the turn
ends (``step/end``, ``turn/end`` completed) at the end of an ``add_items`` batch with no
call waiting for its output, or ``interrupted`` when a user message arrives while one
waits. Nothing is ever deleted: ``pop_item`` and ``clear_session`` append markers the
item fold honours, and :meth:`run_compaction` (the SDK's compaction hook, called by the
runner after each turn) runs sessionstream's audited compaction — a summary replaces a
run of the surface, the shadowed events stay in the log — so ``get_items`` then
returns the summary in place of the items of that run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings, resolve_session_limit

from sessionstream.core.compaction import Budget, Summarizer, plan_compaction
from sessionstream.core.errors import InvariantViolation, SchemaViolation
from sessionstream.core.events import Draft, Event, SurfaceOp
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.core.session import Session
from sessionstream.integrations.store import SessionHandle, SessionStore, plugin_type

__all__ = ["EVENT_TYPES", "SessionstreamSession", "items_of"]

ITEM = "openai-agents/item"
POP = "openai-agents/pop"
CLEAR = "openai-agents/clear"

#: The plugin types of this adapter (registered with the store it is given).
EVENT_TYPES = (
    plugin_type(ITEM, description="An Agents SDK item with no core type (data.item)."),
    plugin_type(POP, description="Agents SDK pop_item(): the latest item is popped."),
    plugin_type(CLEAR, description="Agents SDK clear_session(): the items so far are cleared."),
)

#: The events whose ``data.item`` is an SDK item (a user/message only when appended:
#: a replace is a compaction summary).
_ITEM_TYPES = frozenset({"user/message", "assistant/message", "tool/result", ITEM})


def _placeholder(event: Event) -> dict[str, Any]:
    """The item of an event whose content is unreadable (shredded): still a valid item,
    with the call ids kept (metadata), so calls and outputs stay paired."""
    d = event.data
    if event.type == "tool/result":
        return {"type": "function_call_output", "call_id": d["call_id"],
                "output": DELETED_TEXT}
    if event.type == "assistant/message" and d.get("tool_calls"):
        call = d["tool_calls"][0]
        return {"type": "function_call", "call_id": call["call_id"], "name": call["name"],
                "arguments": "{}"}
    role = "user" if event.type == "user/message" else "assistant"
    return {"role": role, "content": DELETED_TEXT}


def items_of(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The SDK items a log holds now: every item event, minus what pops and clears took,
    with a compaction's summary in place of the items of the run it shadowed."""
    items: list[tuple[int, dict[str, Any]]] = []
    for e in events:
        t = e.type
        if t == POP:
            if items:
                items.pop()
        elif t == CLEAR:
            items.clear()
        elif t == "user/message" and e.surface_op is SurfaceOp.REPLACE:
            shadowed = e.source_event_seqs
            lo, hi = min(shadowed), max(shadowed)
            at = next((i for i, (s, _) in enumerate(items) if lo <= s <= hi), None)
            if at is None:
                continue  # the run was popped or cleared already
            content = e.data.get("content")
            summary = {"role": "user", "content": content if isinstance(content, str)
                       else DELETED_TEXT}
            items = [*items[:at], (e.seq, summary),
                     *[(s, i) for s, i in items[at:] if not lo <= s <= hi]]
        elif t in _ITEM_TYPES and "item" in e.data:
            if t == "user/message" and e.surface_op is not SurfaceOp.APPEND:
                continue
            raw = e.data["item"]
            items.append((e.seq, thaw(raw) if isinstance(raw, Mapping) else _placeholder(e)))
    return [i for _, i in items]


def _text_of(content: Any) -> str | list[Any]:
    """An assistant message's text (the output_text parts joined), else the parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, Mapping)]
        if texts and all(isinstance(t, str) for t in texts):
            return "".join(texts)  # type: ignore[arg-type]
        return list(content)
    return ""


def _arguments(raw: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"raw": raw}


class _Writer:
    """Turns SDK items into drafts against the session as it is, one item at a time."""

    def __init__(self, handle: SessionHandle) -> None:
        self.h = handle
        self.s: Session | None = handle.session()

    def _append(self, drafts: list[Draft]) -> None:
        """Append through the handle (its rules refuse here, nothing appended), then
        follow in the mirror; a mirror that does not continue into what the handle
        wrote (another writer's events came in when the handle took the session) is
        read again, never taken for a refusal."""
        events = self.h.append_many(drafts)
        s = self.s
        if s is None or (events and events[0].seq != s.next_seq):
            self.s = self.h.session()
            return
        for e in events:
            s.admit(e)

    def _try(self, drafts: list[Draft]) -> bool:
        """Append the drafts in order; False at the first one the session's rules refuse
        (nothing of it appended; a turn or step opened for it stays open, harmlessly)."""
        for d in drafts:
            try:
                self._append([d])
            except (InvariantViolation, SchemaViolation):
                return False
        return True

    def _opening(self) -> list[Draft]:
        if self.s is not None and self.s.open_turn is not None:
            return [] if self.s.open_step is not None else [Draft("step/start", {})]
        return [Draft("turn/start", {}), Draft("step/start", {})]

    def _closing(self, reason: str) -> list[Draft]:
        s = self.s
        if s is None or s.open_turn is None:
            return []
        if reason == "completed" and s.pending_calls:
            return []
        step = [Draft("step/end", {})] if s.open_step is not None and reason == "completed" \
            else []
        return [*step, Draft("turn/end", {"reason": reason})]

    def add(self, item: Any) -> None:
        if not isinstance(item, Mapping):
            raise TypeError(f"an Agents SDK session item is a dict, got {type(item).__name__}")
        item = dict(item)
        kind = item.get("type", "message")
        role = item.get("role")
        drafts: list[Draft] | None = None
        if kind == "message" and role == "user" and isinstance(item.get("content"),
                                                                str | list):
            closing = self._closing("interrupted" if self.s is not None
                                    and self.s.pending_calls else "completed")
            if closing:
                self._append(closing)
            drafts = [Draft("user/message", {"content": item["content"], "item": item})]
        elif kind == "message" and role == "assistant":
            drafts = [*self._opening(), Draft("assistant/message", {
                "content": _text_of(item.get("content")), "item": item})]
        elif kind == "function_call" and isinstance(item.get("call_id"), str) \
                and isinstance(item.get("name"), str):
            call = {"call_id": item["call_id"], "name": item["name"],
                    "arguments": _arguments(item.get("arguments"))}
            drafts = [*self._opening(),
                      Draft("assistant/message", {"content": "", "tool_calls": [call],
                                                  "item": item}),
                      Draft("tool/call", call)]
        elif kind == "function_call_output" and isinstance(item.get("call_id"), str):
            output = item.get("output")
            drafts = [Draft("tool/result", {
                "call_id": item["call_id"], "status": "ok",
                "content": output if isinstance(output, str | list | dict) else None,
                "item": item})]
        if drafts is None or not self._try(drafts):
            self._append([Draft(ITEM, {"item": item})])

    def end_batch(self) -> None:
        closing = self._closing("completed")
        if closing:
            self._append(closing)


class SessionstreamSession(SessionABC):
    """An Agents SDK session whose history is a sessionstream session (see the module
    docstring for the mapping). ``store``: any
    :class:`~sessionstream.integrations.store.SessionStore` (memory, a JSONL directory, the
    fleet); its plugin types are registered here.

    ``summarizer`` and ``budget`` are what :meth:`run_compaction` compacts with (the
    offline summarizer and the default budget unless given).
    """

    def __init__(self, session_id: str, store: SessionStore, *,
                 session_settings: SessionSettings | None = None,
                 summarizer: Summarizer | None = None,
                 budget: Budget | None = None) -> None:
        store.register(EVENT_TYPES)
        self.session_id = session_id
        self.store = store
        self.session_settings = session_settings or SessionSettings()
        self.summarizer = summarizer
        self.budget = budget or Budget()
        self._handle = store.open(session_id)

    @property
    def handle(self) -> SessionHandle:
        """The store handle (events, the core session, flush)."""
        return self._handle

    # -- the Session protocol -----------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The items now (the latest ``limit``, chronological; ``session_settings.limit``
        when not given; 0: none; negative: all)."""
        n = resolve_session_limit(limit, self.session_settings)
        items = items_of(await asyncio.to_thread(self._handle.events))
        if n is None or n < 0:
            return items
        return items[-n:] if n > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        """Append the items (one event each, see the mapping) and flush: on return they
        are durable and admitted."""
        if not items:
            return
        await asyncio.to_thread(self._add_sync, list(items))

    def _add_sync(self, items: list[Any]) -> None:
        h = self._handle
        with h._lock:
            h.acquire()  # the session the items continue is the history (the fleet: leased)
            w = _Writer(h)
            for item in items:
                w.add(item)
            w.end_batch()
            h.flush()

    async def pop_item(self) -> Any | None:
        """The latest item, popped by an appended ``openai-agents/pop`` (history kept)."""
        return await asyncio.to_thread(self._pop_sync)

    def _pop_sync(self) -> Any | None:
        h = self._handle
        with h._lock:
            if not h.exists():
                return None
            h.acquire()  # the items read below are the history the marker follows
            items = items_of(h.events())
            if not items:
                return None
            h.append(POP, {})
            h.flush()
            return items[-1]

    async def clear_session(self) -> None:
        """Clear the items by an appended ``openai-agents/clear`` (history kept)."""
        await asyncio.to_thread(self._clear_sync)

    def _clear_sync(self) -> None:
        h = self._handle
        with h._lock:
            if not h.exists():
                return
            h.append(CLEAR, {})
            h.flush()

    # -- compaction -------------------------------------------------------------------
    async def run_compaction(self, args: Mapping[str, Any] | None = None) -> None:
        """The SDK's compaction hook: sessionstream's audited compaction when its policy
        (or ``args["force"]``) says so. The summary shadows a run of the surface; no
        event is removed (``compaction/start`` … ``compaction/end`` record the attempt)."""
        force = bool((args or {}).get("force"))
        await asyncio.to_thread(self._compact_sync, force)

    def _compact_sync(self, force: bool) -> None:
        h = self._handle
        with h._lock:
            if not h.exists():
                return
            h.acquire()
            session = h.session()
            if session is None or session.open_compaction is not None:
                return
            drafts = plan_compaction(session, self.summarizer,
                                     trigger="manual" if force else None, budget=self.budget)
            if drafts:
                h.append_many(drafts)
                h.flush()

    def close(self) -> None:
        """Flush and hand the session over (the fleet: release its lease)."""
        self._handle.release()
