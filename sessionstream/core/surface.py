"""The message surface: the model-visible projection of a session log (seed §4.4).

Only model-relevant events become nodes: ``user/message`` (append → USER, replace →
SUMMARY), ``context/snapshot`` (CONTEXT, user role), ``assistant/message`` (with its
tool calls) and ``tool/result``. Chunks, headers, boundaries, domain and
``compaction/*`` events never do. Each node is identified by the seq of the event
that created it (``message.seqs[0]``); a compaction shadows a contiguous run of
nodes, named by those seqs, and puts its summary at the run's position.

:class:`Surface` is incremental: an append is O(1) amortized and
:meth:`Surface.messages` hands out an immutable :class:`Messages` view in O(1) —
the backing list is append-only while views exist, and is copied (copy-on-write)
only when a replace or an abandoned tool call rewrites an earlier node.

The same :class:`Surface` serves the session (which drives it with ``append`` /
``replace`` / ``drop_calls`` after its rules passed) and the ``surface`` projection
unit (which drives it event by event with :meth:`Surface.apply` and keeps its
state as :meth:`Surface.messages` between batches, see :meth:`Surface.from_messages`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from sessionstream.core.events import Event, SurfaceOp
from sessionstream.core.jsonvalue import FrozenMap
from sessionstream.core.messages import Kind, Message, Role, ToolCall

#: Characters per token of the deterministic estimate (a common rule of thumb for
#: English and code; good enough to pick compaction ranges and draw dashboards).
CHARS_PER_TOKEN = 4

#: Turn end reasons that abandon unanswered tool calls (they leave the surface).
ABANDONING_REASONS = frozenset({"failed", "cancelled", "interrupted"})


class Messages(Sequence[Message]):
    """An immutable sequence of frozen messages: what ``derive_messages()`` returns.

    A fixed-length view over the surface's backing list, so handing it out costs
    O(1) instead of copying the whole history on every model request. It compares
    equal to any sequence (tuple, list, view) with the same messages.
    """

    __slots__ = ("_items", "_len")

    def __init__(self, items: Sequence[Message] = (), length: int | None = None) -> None:
        self._items = items
        self._len = len(items) if length is None else length

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...

    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self._items[i] for i in range(*index.indices(self._len)))
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("message index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[Message]:
        items = self._items
        for i in range(self._len):
            yield items[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        if len(other) != self._len:
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Iterable[Message]) -> tuple[Message, ...]:
        return (*self, *other)

    def __repr__(self) -> str:
        return f"Messages({list(self)!r})"

    def to_json(self) -> list[dict[str, Any]]:
        return [m.to_json() for m in self]


def message_for(event: Event) -> Message | None:
    """The surface node an event creates, or None if it is not model-visible."""
    op = event.surface_op
    if op is SurfaceOp.NONE:
        return None
    data = event.data
    t = event.type
    seqs = (event.seq,)
    if t == "user/message":
        kind = Kind.SUMMARY if op is SurfaceOp.REPLACE else Kind.USER
        return Message(Role.USER, kind, data["content"], seqs)
    if t == "assistant/message":
        calls = tuple(
            ToolCall(c["call_id"], c["name"], c["arguments"]) for c in data.get("tool_calls", ())
        )
        return Message(Role.ASSISTANT, Kind.ASSISTANT, data["content"], seqs, tool_calls=calls)
    if t == "tool/result":
        if "content" in data:
            content = data["content"]
        elif "attachment" in data:
            content = FrozenMap({"attachment": data["attachment"]})
        else:
            content = None
        return Message(
            Role.TOOL, Kind.TOOL_RESULT, content, seqs, call_id=data["call_id"],
            status=data["status"],
        )
    if t == "context/snapshot":
        return Message(Role.USER, Kind.CONTEXT, data["content"], seqs)
    return None


def message_tokens(message: Message) -> int:
    """Deterministic token estimate of one message (~4 characters per token)."""
    return math.ceil(len(message.json_text()) / CHARS_PER_TOKEN)


def token_estimate(messages: Iterable[Message]) -> int:
    """Deterministic token estimate of a message list (compaction, dashboards)."""
    return sum(message_tokens(m) for m in messages)


def pending_calls(messages: Iterable[Message]) -> list[tuple[str, int]]:
    """(call_id, seq) of assistant tool calls on a surface with no tool result on it."""
    messages = tuple(messages)
    answered = {m.call_id for m in messages if m.call_id is not None}
    return [
        (c.call_id, m.seqs[0])
        for m in messages
        for c in m.tool_calls
        if c.call_id not in answered
    ]


@dataclass(frozen=True, slots=True)
class SurfaceChange:
    """What one surface operation did: the nodes it took out and the ones it put in.

    Lets a reader keep an aggregate (the token estimate) incrementally:
    ``total - token_estimate(removed) + token_estimate(added)``.
    """

    removed: tuple[Message, ...]
    added: tuple[Message, ...]


class SurfaceMark:
    """An open savepoint of a :class:`Surface` (see :meth:`Surface.mark`)."""

    __slots__ = ("copy", "edits", "length", "revision", "unanswered")

    def __init__(self, length: int, revision: int, edits: int,
                 unanswered: dict[str, None]) -> None:
        self.length = length
        self.revision = revision
        self.edits = edits
        self.unanswered = unanswered
        #: The surface's nodes and indexes as they were at the mark, once a rewrite
        #: needed them.
        self.copy: tuple[list[Message], dict[int, int], dict[str, int],
                         dict[str, int]] | None = None


class Surface:
    """The current surface of one session, maintained incrementally.

    :class:`~sessionstream.core.session.Session` drives it after its rules passed;
    it trusts its input (no validation beyond :meth:`check_range`).
    """

    def __init__(self) -> None:
        self._nodes: list[Message] = []
        self._pos: dict[int, int] = {}  # node seq -> position
        self._call_node: dict[str, int] = {}  # call_id -> seq of the assistant node
        self._result_node: dict[str, int] = {}  # call_id -> seq of the tool result node
        self._unanswered: dict[str, None] = {}  # calls on the surface with no result yet
        self._view: Messages | None = None
        self._shared = False  # a view over _nodes is out: copy before rewriting
        self._revision = 0  # bumped before every change (see revision)
        # (revision, lowest position rewritten) of each change that is not an append
        self._edits: list[tuple[int, int]] = []
        self._mark: SurfaceMark | None = None  # an open savepoint (Session.savepoint)

    @classmethod
    def from_messages(cls, messages: Iterable[Message]) -> Surface:
        """A surface holding ``messages`` (a :meth:`messages` view or its JSON, loaded).

        O(n): rebuilds the indexes; the projection unit uses it after ``load`` and
        when it must branch from an older state.
        """
        surface = cls()
        for message in messages:
            surface.append(message)
        surface._revision = 0
        return surface

    # -- driving it event by event (the projection unit) ---------------------------------
    def apply(self, event: Event) -> SurfaceChange | None:
        """Fold one event of a log the session rules accepted; None: nothing changed.

        The same rules :class:`~sessionstream.core.session.Session` applies through
        :meth:`append`, :meth:`replace` and :meth:`drop_calls`: a model-visible
        append adds a node, a replace shadows its ``source_event_seqs``, and a turn
        ending failed/cancelled/interrupted abandons the calls still unanswered.
        Raises ValueError for a replace whose range is not on the surface.
        """
        if event.type == "turn/end":
            if event.data["reason"] not in ABANDONING_REASONS or not self._unanswered:
                return None
            return self.drop_calls(list(self._unanswered), event.seq)
        message = message_for(event)
        if message is None:
            return None
        if event.surface_op is SurfaceOp.REPLACE:
            seqs = event.source_event_seqs
            problem = self.check_range(seqs)
            if problem is not None:
                raise ValueError(f"replace at seq {event.seq}: {problem}")
            return self.replace(seqs, message)
        self.append(message)
        return SurfaceChange((), (message,))

    # -- reading -------------------------------------------------------------------------
    def messages(self) -> Messages:
        """The current surface as an immutable view (O(1))."""
        view = self._view
        if view is None or len(view) != len(self._nodes):
            view = self._view = Messages(self._nodes, len(self._nodes))
            self._shared = True
        return view

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def revision(self) -> int:
        """Changes whenever the surface does: a holder of an older :meth:`messages`
        view can tell the surface has moved on without it (and branch)."""
        return self._revision

    def unchanged_since(self, revision: int, length: int) -> int:
        """How many leading nodes of this surface's version at ``revision`` (which had
        ``length`` nodes) are still the same objects now: appends keep them all, a
        replace or an abandonment keeps those before its lowest position. O(edits since)."""
        low = length
        for rev, pos in reversed(self._edits):
            if rev <= revision:
                break
            low = min(low, pos)
        return low

    @property
    def unanswered(self) -> tuple[str, ...]:
        """Call ids of assistant tool calls on the surface with no result yet."""
        return tuple(self._unanswered)

    def node_seqs(self) -> tuple[int, ...]:
        """The identity seq of each node, by position."""
        return tuple(m.seqs[0] for m in self._nodes)

    def position_of(self, seq: int) -> int | None:
        """The position of the node created by event ``seq`` (None: not on the surface)."""
        return self._pos.get(seq)

    def seqs_at(self, first: int, last: int) -> tuple[int, ...]:
        """Identity seqs of the nodes at positions ``first..last`` (inclusive)."""
        return tuple(m.seqs[0] for m in self._nodes[first : last + 1])

    def check_range(self, seqs: Sequence[int]) -> str | None:
        """Why ``seqs`` cannot be shadowed (None: it can).

        They must name a non-empty contiguous run of current nodes, in order, that
        does not separate a tool call from its result (a summary that swallowed one
        half would leave an orphan on the surface).
        """
        if not seqs:
            return "the shadowed range is empty"
        first = self._pos.get(seqs[0])
        if first is None:
            return f"seq {seqs[0]} is not a current surface node"
        nodes = self._nodes
        if first + len(seqs) > len(nodes):
            return f"seqs {list(seqs)} run past the end of the surface"
        for i, seq in enumerate(seqs):
            if nodes[first + i].seqs[0] != seq:
                return (
                    f"seqs {list(seqs)} are not a contiguous run of surface nodes "
                    f"(position {first + i} holds seq {nodes[first + i].seqs[0]}, not {seq})"
                )
        inside = set(seqs)
        for seq in seqs:
            node = nodes[self._pos[seq]]
            for call in node.tool_calls:
                result = self._result_node.get(call.call_id)
                if result is None:
                    return f"tool call {call.call_id} (seq {seq}) has no result yet"
                if result not in inside:
                    return (
                        f"tool call {call.call_id} is shadowed but its result (seq {result}) "
                        "is not"
                    )
            if node.call_id is not None:
                owner = self._call_node.get(node.call_id)
                if owner is not None and owner not in inside:
                    return (
                        f"tool result {node.call_id} is shadowed but its call (seq {owner}) is not"
                    )
        return None

    # -- savepoints (Session.savepoint: a refused batch leaves the surface as it was) -----
    def mark(self) -> SurfaceMark:
        """Open a savepoint: :meth:`rollback` puts the surface back as it is now. Appends
        cost nothing more (they are undone from the nodes themselves); the first replace
        or abandonment after the mark copies the surface once (O(n), rare)."""
        if self._mark is not None:
            raise RuntimeError("a surface savepoint is already open")
        self._mark = SurfaceMark(len(self._nodes), self._revision, len(self._edits),
                                 dict(self._unanswered))
        return self._mark

    def release(self, mark: SurfaceMark) -> None:
        """Close the savepoint ``mark`` and keep what changed since."""
        if self._mark is mark:
            self._mark = None

    def rollback(self, mark: SurfaceMark) -> None:
        """Undo everything since ``mark`` (and close it)."""
        if self._mark is not mark:
            raise RuntimeError("rollback of a surface savepoint that is not open")
        self._mark = None
        if mark.copy is not None:
            (self._nodes, self._pos, self._call_node, self._result_node) = mark.copy
        else:
            _forget(self._nodes[mark.length:], self._pos, self._call_node, self._result_node)
            if self._shared:  # a view may hold this list with its length: keep it intact
                self._nodes = self._nodes[:mark.length]
            else:
                del self._nodes[mark.length:]
        self._unanswered = mark.unanswered
        self._view = None
        self._shared = False
        self._revision = mark.revision
        del self._edits[mark.edits:]

    def _before_rewrite(self) -> None:
        """A replace or an abandonment under an open savepoint: keep the surface as it
        was at the mark (the appends since undone on the copy) to go back to."""
        mark = self._mark
        if mark is not None and mark.copy is None:
            pos, call_node, result_node = dict(self._pos), dict(self._call_node), \
                dict(self._result_node)
            _forget(self._nodes[mark.length:], pos, call_node, result_node)
            mark.copy = (self._nodes[:mark.length], pos, call_node, result_node)

    # -- writing (called by Session after its rules passed) ------------------------------
    def append(self, message: Message) -> None:
        """Add a node at the end: O(1)."""
        self._revision += 1
        seq = message.seqs[0]
        self._pos[seq] = len(self._nodes)
        self._nodes.append(message)
        for call in message.tool_calls:
            self._call_node[call.call_id] = seq
            self._unanswered[call.call_id] = None
        if message.call_id is not None:
            self._result_node[message.call_id] = seq
            self._unanswered.pop(message.call_id, None)

    def replace(self, seqs: Sequence[int], summary: Message) -> SurfaceChange:
        """Shadow the run of nodes ``seqs`` (checked) with ``summary`` at its position."""
        self._before_rewrite()
        self._revision += 1
        first = self._pos[seqs[0]]
        self._edits.append((self._revision, first))
        nodes = self._writable()
        removed = tuple(nodes[first : first + len(seqs)])
        for node in removed:
            for call in node.tool_calls:
                self._call_node.pop(call.call_id, None)
                self._unanswered.pop(call.call_id, None)
            if node.call_id is not None:
                self._result_node.pop(node.call_id, None)
            del self._pos[node.seqs[0]]
        nodes[first : first + len(seqs)] = [summary]
        self._reindex(first)
        return SurfaceChange(removed, (summary,))

    def drop_calls(self, call_ids: Iterable[str], cause_seq: int) -> SurfaceChange | None:
        """Remove abandoned tool calls from their assistant nodes (turn ended failed…).

        The node keeps its content and gains ``cause_seq`` in its seqs (so the
        change is explainable); a node left with no content and no calls is dropped.
        Returns None when none of ``call_ids`` is on the surface.
        """
        self._before_rewrite()
        by_node: dict[int, set[str]] = {}
        for call_id in call_ids:
            self._unanswered.pop(call_id, None)
            owner = self._call_node.pop(call_id, None)
            if owner is not None:
                by_node.setdefault(owner, set()).add(call_id)
        if not by_node:
            return None
        self._revision += 1
        self._edits.append((self._revision, min(self._pos[o] for o in by_node)))
        nodes = self._writable()
        lowest = len(nodes)
        removed: list[Message] = []
        added: list[Message] = []
        for owner, dropped in by_node.items():
            pos = self._pos[owner]
            node = nodes[pos]
            removed.append(node)
            kept = abandon_calls(node, dropped, cause_seq)
            if kept is None:
                del self._pos[owner]
                nodes[pos] = _DROPPED
                lowest = min(lowest, pos)
            else:
                nodes[pos] = kept
                added.append(kept)
        if lowest < len(nodes):
            nodes[:] = [n for n in nodes if n is not _DROPPED]
            self._reindex(lowest)
        return SurfaceChange(tuple(removed), tuple(added))

    def _writable(self) -> list[Message]:
        if self._shared:
            self._nodes = list(self._nodes)
            self._shared = False
            self._view = None
        return self._nodes

    def _reindex(self, start: int) -> None:
        pos = self._pos
        for i in range(start, len(self._nodes)):
            pos[self._nodes[i].seqs[0]] = i


_DROPPED = Message(Role.ASSISTANT, Kind.ASSISTANT, None, (-1,))


def _forget(appended: Sequence[Message], pos: dict[int, int], call_node: dict[str, int],
            result_node: dict[str, int]) -> None:
    """Take nodes that were appended out of the indexes (a savepoint's undo)."""
    for node in appended:
        del pos[node.seqs[0]]
        for call in node.tool_calls:
            call_node.pop(call.call_id, None)
        if node.call_id is not None:
            result_node.pop(node.call_id, None)


def abandon_calls(node: Message, dropped: Iterable[str], cause_seq: int) -> Message | None:
    """``node`` without its abandoned tool calls ``dropped`` (None: nothing is left of it).

    The rewritten node gains ``cause_seq`` (the turn/end) in its seqs.
    """
    gone = set(dropped)
    calls = tuple(c for c in node.tool_calls if c.call_id not in gone)
    if not calls and _is_empty(node.content):
        return None
    return Message(node.role, node.kind, node.content, (*node.seqs, cause_seq), tool_calls=calls)


def _is_empty(content: object) -> bool:
    return content is None or content == "" or (
        isinstance(content, Sequence | Mapping) and len(content) == 0
    )


def derive_from_scratch(events: Iterable[Event]) -> tuple[Message, ...]:
    """A plain, non-incremental derivation of the surface: the reference for tests.

    Folds the log with list splices and no indexes. Assumes a log the session
    rules accepted (it does not validate).
    """
    nodes: list[Message] = []
    pending: dict[str, dict[str, str]] = {}  # turn_id -> {call_id: state}
    for event in events:
        t = event.type
        if t == "assistant/message":
            for c in event.data.get("tool_calls", ()):
                pending.setdefault(event.turn_id or "", {})[c["call_id"]] = "declared"
        elif t == "tool/result":
            pending.get(event.turn_id or "", {}).pop(event.data["call_id"], None)
        elif t == "turn/end":
            open_calls = pending.pop(event.turn_id or "", {})
            if event.data["reason"] in ABANDONING_REASONS and open_calls:
                kept: list[Message] = []
                for node in nodes:
                    if any(c.call_id in open_calls for c in node.tool_calls):
                        rewritten = abandon_calls(node, open_calls, event.seq)
                        if rewritten is None:
                            continue
                        node = rewritten
                    kept.append(node)
                nodes = kept
        message = message_for(event)
        if message is None:
            continue
        if event.surface_op is SurfaceOp.REPLACE:
            ids = [n.seqs[0] for n in nodes]
            first = ids.index(event.source_event_seqs[0])
            nodes[first : first + len(event.source_event_seqs)] = [message]
        else:
            nodes.append(message)
    return tuple(nodes)
