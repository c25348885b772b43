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

Each call is one write of the store (docs/adr/0024): ``add_items`` is one atomic batch
(a refused item stores none of the batch), made durable before it returns, and the
session is handed on, so the next request may run on any node. ``get_items`` reads the
inline view :data:`ITEMS_VIEW` (the items as the fold above gives them, kept by every
write): the last ``limit`` items cost one Redis call on the fleet, whoever wrote them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from agents.memory.session import SessionABC, _CompactionSnapshot
from agents.memory.session_settings import SessionSettings, resolve_session_limit

from sessionstream.core.compaction import Budget, Summarizer, plan_compaction
from sessionstream.core.errors import InvalidData
from sessionstream.core.events import Draft, Event, SurfaceOp
from sessionstream.core.jsonvalue import thaw
from sessionstream.core.privacy import DELETED_TEXT
from sessionstream.core.session import Session
from sessionstream.integrations.store import SessionHandle, SessionStore, plugin_type
from sessionstream.integrations.views import InlineView, ViewState

__all__ = ["EVENT_TYPES", "ITEMS_VIEW", "ItemsView", "SessionstreamSession", "items_of"]

ITEM = "openai-agents/item"
POP = "openai-agents/pop"
CLEAR = "openai-agents/clear"
SUFFIX = "openai-agents/replace-suffix"

_T = TypeVar("_T")

#: The plugin types of this adapter (registered with the store it is given).
EVENT_TYPES = (
    plugin_type(ITEM, description="An Agents SDK item with no core type (data.item)."),
    plugin_type(POP, description="Agents SDK pop_item(): the latest item is popped."),
    plugin_type(CLEAR, description="Agents SDK clear_session(): the items so far are cleared."),
    plugin_type(SUFFIX, description="The SDK's compaction replaced the items from position "
                "data.at with data.items (after dropping the first data.prune items)."),
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


class ItemsView(InlineView):
    """The SDK items a log holds now, as an inline view: every item event, minus what
    pops and clears took, with a compaction's summary in place of the items of the run it
    shadowed. Each entry is ``[seq, item]`` (the seq of the event the item came from)."""

    name = "openai-agents/items"

    def fold(self, state: ViewState, e: Event) -> None:
        t = e.type
        entries = state.entries
        if t == POP:
            if entries:
                state.pop()
        elif t == CLEAR:
            state.truncate(0)
        elif t == SUFFIX:
            at, prune = e.data.get("at"), e.data.get("prune", 0)
            new = e.data.get("items")
            if not isinstance(at, int) or not isinstance(new, Sequence) \
                    or isinstance(new, str):  # shredded content: the items are gone
                new = []
            state.splice(max(at, 0) if isinstance(at, int) else len(entries),
                         [[e.seq, i] for i in new])
            if isinstance(prune, int) and prune > 0:
                state.splice(0, entries[prune:])
        elif t == "user/message" and e.surface_op is SurfaceOp.REPLACE:
            shadowed = e.source_event_seqs
            lo, hi = min(shadowed), max(shadowed)
            at = next((i for i, x in enumerate(entries)
                       if lo <= x[0] <= hi), None)
            if at is None:
                return  # the run was popped or cleared already
            content = e.data.get("content")
            summary = {"role": "user", "content": content if isinstance(content, str)
                       else DELETED_TEXT}
            rest = [x for x in entries[at:]
                    if not lo <= x[0] <= hi]
            state.splice(at, [[e.seq, summary], *rest])
        elif t in _ITEM_TYPES and "item" in e.data:
            if t == "user/message" and e.surface_op is not SurfaceOp.APPEND:
                return
            raw = e.data["item"]  # kept frozen: a read thaws (copies) what it returns
            state.push([e.seq, raw if isinstance(raw, Mapping) else _placeholder(e)])


#: The inline view :meth:`SessionstreamSession.get_items` reads.
ITEMS_VIEW = ItemsView()


def items_of(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The SDK items a log holds now (:class:`ItemsView` over the whole log)."""
    return [thaw(x[1]) for x in ITEMS_VIEW.build(events).entries]


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


class _Plan:
    """SDK items as drafts, against the session's state as it will be: the rules each
    draft meets are predicted here (open turn and step, calls waiting, call ids used),
    so a batch the core would refuse at some item maps that item to a plugin record
    instead, and the store appends the whole batch in one atomic write."""

    def __init__(self, s: Session | None) -> None:
        self.turn = s is not None and s.open_turn is not None
        self.step = s is not None and s.open_step is not None
        #: call id -> executed (a tool/call was written) for the calls waiting for output
        self.waiting: dict[str, bool] = (
            {c.call_id: c.executed_seq is not None for c in s.pending_calls} if s else {})
        self._used = s.call_id_used if s is not None else None
        self._declared: set[str] = set()
        self.drafts: list[Draft] = []

    def _used_id(self, call_id: str) -> bool:
        return call_id in self._declared or (self._used is not None and self._used(call_id))

    def _close(self, reason: str) -> None:
        if not self.turn or (reason == "completed" and self.waiting):
            return
        if self.step and reason == "completed":
            self.drafts.append(Draft("step/end", {}))
        self.drafts.append(Draft("turn/end", {"reason": reason}))
        self.turn = self.step = False
        self.waiting.clear()  # abandoned: a later output for them is a plugin record

    def _open(self) -> None:
        if not self.turn:
            self.drafts.append(Draft("turn/start", {}))
            self.turn = True
        if not self.step:
            self.drafts.append(Draft("step/start", {}))
            self.step = True

    def add(self, item: Any) -> None:
        if not isinstance(item, Mapping):
            raise TypeError(f"an Agents SDK session item is a dict, got {type(item).__name__}")
        item = dict(item)
        kind = item.get("type", "message")
        role = item.get("role")
        if kind == "message" and role == "user" and isinstance(item.get("content"),
                                                                str | list):
            self._close("interrupted" if self.waiting else "completed")
            self.drafts.append(Draft("user/message", {"content": item["content"],
                                                      "item": item}))
        elif kind == "message" and role == "assistant":
            self._open()
            self.drafts.append(Draft("assistant/message", {
                "content": _text_of(item.get("content")), "item": item}))
        elif kind == "function_call" and isinstance(item.get("call_id"), str) \
                and isinstance(item.get("name"), str) and not self._used_id(item["call_id"]):
            call = {"call_id": item["call_id"], "name": item["name"],
                    "arguments": _arguments(item.get("arguments"))}
            self._open()
            self.drafts += [Draft("assistant/message", {"content": "", "tool_calls": [call],
                                                        "item": item}),
                            Draft("tool/call", call)]
            self._declared.add(call["call_id"])
            self.waiting[call["call_id"]] = True
        elif kind == "function_call_output" and isinstance(item.get("call_id"), str) \
                and self.waiting.get(item["call_id"]):
            output = item.get("output")
            self.drafts.append(Draft("tool/result", {
                "call_id": item["call_id"], "status": "ok",
                "content": output if isinstance(output, str | list | dict) else None,
                "item": item}))
            del self.waiting[item["call_id"]]
        else:
            self.drafts.append(Draft(ITEM, {"item": item}))

    def end_batch(self) -> list[Draft]:
        self._close("completed")
        return self.drafts


def _plan_items(items: Sequence[Any]) -> Callable[[Session | None], list[Draft]]:
    def plan(s: Session | None) -> list[Draft]:
        p = _Plan(s)
        for item in items:
            p.add(item)
        return p.end_batch()

    return plan


async def _settled(fn: Callable[..., _T], *args: Any) -> _T:
    """Run a write in a worker thread; a caller cancelled meanwhile waits for the write to
    settle (it cannot be called back half-way) and then sees the cancellation, so what it
    does next never races the write it gave up on (the SDK's own sessions do the same)."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task})  # (waiting cancels nothing of the write)
        if not task.cancelled():
            task.exception()  # the caller was cancelled: its outcome is not reported
        raise


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
        store.register(EVENT_TYPES, [ITEMS_VIEW])
        self.session_id = session_id
        self.store = store
        self.session_settings = session_settings or SessionSettings()
        self.summarizer = summarizer
        self.budget = budget or Budget()
        self._handle = store.open(session_id)

    @property
    def handle(self) -> SessionHandle:
        """The store handle (events, the core session, the items view)."""
        return self._handle

    # -- the Session protocol -----------------------------------------------------------
    # Each method takes the SDK's optional ``wrapper`` (its run context): a session whose
    # four history methods accept it is given it by the SDK's wrappers. The history is
    # the same for every run, so it is not used to read or write.
    async def get_items(self, limit: int | None = None, *,
                        wrapper: Any | None = None) -> list[Any]:
        """The items now (the latest ``limit``, chronological; ``session_settings.limit``
        when not given; 0: none; negative: all): the inline items view, one read."""
        n = resolve_session_limit(limit, self.session_settings)
        if n == 0:
            return []
        return await asyncio.to_thread(self._items, None if n is None or n < 0 else n)

    def _items(self, last: int | None) -> list[Any]:
        entries = self._handle.view(ITEMS_VIEW.name, last).entries
        return [x[1] for x in entries]

    async def add_items(self, items: list[Any], *, wrapper: Any | None = None) -> None:
        """Append the items (one event each, see the mapping) in one atomic write, made
        durable and admitted before it returns; an item the log cannot take (not JSON,
        …) raises and none of the batch is stored."""
        if not items:
            return
        await _settled(self._add_sync, list(items))

    def _add_sync(self, items: list[Any]) -> None:
        try:
            self._handle.write(_plan_items(items))
        except InvalidData as exc:  # the SDK's own sessions raise TypeError for this
            raise TypeError(f"session {self.session_id!r}: an item of the batch is not "
                            f"JSON the log can keep ({exc}); nothing of the batch was "
                            "stored") from exc

    async def pop_item(self, *, wrapper: Any | None = None) -> Any | None:
        """The latest item, popped by an appended ``openai-agents/pop`` (history kept)."""
        return await _settled(self._pop_sync, None)

    async def _pop_item_with_validation(
            self, validate: Callable[[Any], None] | None = None) -> Any | None:
        """``pop_item`` that removes the item only if ``validate(item)`` returns (the hook
        the SDK's ``EncryptedSession`` uses to authenticate an item before it pops it):
        a ``validate`` that raises leaves the session as it was."""
        return await _settled(self._pop_sync, validate)

    def _pop_sync(self, validate: Callable[[Any], None] | None) -> Any | None:
        h = self._handle
        popped: list[Any] = []

        def plan(s: Session | None) -> list[Draft]:
            if s is None:
                return []
            last = h.view(ITEMS_VIEW.name, 1).entries  # we hold the session: current
            if not last:
                return []
            item = last[0][1]
            if validate is not None:
                validate(item)
            popped.append(item)
            return [Draft(POP, {})]

        h.write(plan)
        return popped[0] if popped else None

    async def clear_session(self, *, wrapper: Any | None = None) -> None:
        """Clear the items by an appended ``openai-agents/clear`` (history kept)."""
        await _settled(self._clear_sync)

    def _clear_sync(self) -> None:
        self._handle.write(lambda s: [Draft(CLEAR, {})] if s is not None else [])

    # -- the SDK's compaction ---------------------------------------------------------
    async def _get_compaction_snapshot(
            self, limit: int, *,
            prune_prefix: Callable[[Any], bool] | None = None) -> _CompactionSnapshot | None:
        """The SDK's atomic compaction hook (what ``SQLiteSession`` gives
        ``OpenAIResponsesCompactionSession`` and ``EncryptedSession``): the last
        ``limit`` items, whether they are all of them, and ``replace_suffix(start,
        output)``, which replaces the items from ``start`` on with ``output`` in one
        write only if they are still the ones read (an item added meanwhile stays), and
        first drops the leading items ``prune_prefix`` accepts. The replacement is an
        ``openai-agents/replace-suffix`` event: history is kept."""
        snap = await asyncio.to_thread(self._handle.view, ITEMS_VIEW.name, limit)
        read = [(x[0], x[1]) for x in snap.entries]
        complete = snap.count <= len(read)

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            expected = read[start:]
            if not expected:
                return False
            return await _settled(self._replace_suffix, expected, list(output),
                                  prune_prefix)

        return _CompactionSnapshot([i for _, i in read], complete, replace_suffix)

    def _replace_suffix(self, expected: list[tuple[int, Any]], output: list[Any],
                        prune_prefix: Callable[[Any], bool] | None) -> bool:
        h = self._handle
        done: list[bool] = []

        def plan(s: Session | None) -> list[Draft]:
            if s is None:
                return []
            now = h.view(ITEMS_VIEW.name).entries  # we hold the session: current
            tail = [(x[0], x[1]) for x in now[len(now) - len(expected):]]
            if len(now) < len(expected) or tail != expected:
                return []  # the suffix changed since the snapshot: nothing replaced
            at = len(now) - len(expected)
            prune = 0
            if prune_prefix is not None:
                while prune < at and prune_prefix(now[prune][1]):
                    prune += 1
            done.append(True)
            return [Draft(SUFFIX, {"at": at, "prune": prune, "items": output})]

        try:
            h.write(plan)
        except InvalidData as exc:
            raise TypeError(f"session {self.session_id!r}: a compacted item is not JSON the "
                            f"log can keep ({exc}); nothing was replaced") from exc
        return bool(done)

    # -- compaction -------------------------------------------------------------------
    async def run_compaction(self, args: Mapping[str, Any] | None = None, *,
                             wrapper: Any | None = None) -> None:
        """The SDK's compaction hook: sessionstream's audited compaction when its policy
        (or ``args["force"]``) says so. The summary shadows a run of the surface; no
        event is removed (``compaction/start`` … ``compaction/end`` record the attempt,
        and ``compaction/start`` records the ``response_id``, ``compaction_mode`` and
        ``store`` the runner passed). ``compaction_mode="previous_response_id"`` needs a
        ``response_id`` (ValueError, as the SDK's own compaction session raises)."""
        args = dict(args or {})
        if args.get("compaction_mode") == "previous_response_id" \
                and not args.get("response_id"):
            raise ValueError("run_compaction with compaction_mode='previous_response_id' "
                             "needs a response_id")
        await _settled(self._compact_sync, args)

    def _compact_sync(self, args: Mapping[str, Any]) -> None:
        force = bool(args.get("force"))
        asked = {k: args[k] for k in ("response_id", "compaction_mode", "store")
                 if args.get(k) is not None}

        def plan(s: Session | None) -> list[Draft]:
            if s is None or s.open_compaction is not None:
                return []
            drafts = plan_compaction(s, self.summarizer,
                                     trigger="manual" if force else None, budget=self.budget)
            if drafts and asked:
                first = drafts[0]
                drafts[0] = Draft(first.type, {**first.data, "requested": asked},
                                  first.surface_op, first.source_event_seqs)
            return drafts

        self._handle.write(plan)

    def close(self) -> None:
        """Hand the session over (nothing is held between calls; a write that is still
        going on finishes first)."""
        self._handle.release()
