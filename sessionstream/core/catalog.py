"""The event catalog: every event type, its data schema, scope and surface role.

Core types live in reserved namespaces (``session/``, ``turn/`` …). Domain plugins
register their own namespace (``todo/``, ``plan/``, ``goal/``, ``business/``) and
declare whether a reader that does not know a type may skip it (``ignorable``).
Schemas are a deliberately small language (:class:`F`, :class:`Obj`): required and
optional fields, JSON kinds, enums, nested objects and lists. Extra fields are
allowed (forward compatibility) and kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from sessionstream.core.errors import CatalogError, SchemaViolation, UnknownEventType
from sessionstream.core.events import SurfaceOp
from sessionstream.core.jsonvalue import FrozenList, FrozenMap, JsonValue

_KINDS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "num": (int, float),
    "bool": (bool,),
    "list": (list, FrozenList),
    "obj": (dict, FrozenMap),
    "null": (type(None),),
    "any": (object,),
}


@dataclass(frozen=True)
class F:
    """One field: accepted JSON kinds, whether required, enum, nested schema."""

    kind: str | tuple[str, ...]
    required: bool = True
    enum: tuple[Any, ...] | None = None
    obj: Obj | None = None  # schema of an object value
    items: F | None = None  # schema of each list item

    def kinds(self) -> tuple[str, ...]:
        return (self.kind,) if isinstance(self.kind, str) else self.kind

    @cached_property
    def _accept(self) -> tuple[tuple[type, ...] | None, bool]:
        """(types a value may be an instance of — None: any, whether a bool is accepted).

        A bool is an int to ``isinstance``; it only passes through a kind other than
        int/num. Computed once per field: the schema check runs on every event.
        """
        kinds = self.kinds()
        if "any" in kinds:
            return None, True
        types = tuple(t for k in kinds for t in _KINDS[k])
        bool_ok = any(isinstance(True, _KINDS[k]) and k not in ("int", "num") for k in kinds)
        return types, bool_ok


@dataclass(frozen=True)
class Obj:
    """An object schema: named fields; unknown extra fields are allowed."""

    fields: Mapping[str, F] = field(default_factory=dict)

    def check(self, event_type: str, value: JsonValue, path: str = "$") -> None:
        # type() first: the ABC check costs about as much as the rest for a small object.
        if type(value) is not FrozenMap and not isinstance(value, Mapping):
            raise SchemaViolation(event_type, path, "expected an object")
        for name, spec in self.fields.items():
            if name not in value:
                if spec.required:
                    raise SchemaViolation(event_type, f"{path}.{name}", "required field missing")
                continue
            item = value[name]
            types, bool_ok = spec._accept
            # Fast path: a scalar of an accepted kind needs no path string built.
            if (
                types is not None
                and spec.enum is None
                and spec.obj is None
                and spec.items is None
                and isinstance(item, types)
                and (bool_ok or type(item) is not bool)
            ):
                continue
            _check_field(event_type, spec, item, f"{path}.{name}")


def _check_field(event_type: str, spec: F, value: JsonValue, path: str) -> None:
    types, bool_ok = spec._accept
    if types is not None and (
        not isinstance(value, types) or (not bool_ok and isinstance(value, bool))
    ):
        raise SchemaViolation(
            event_type, path, f"expected {' or '.join(spec.kinds())}, got {type(value).__name__}"
        )
    if spec.enum is not None and value not in spec.enum:
        raise SchemaViolation(event_type, path, f"{value!r} is not one of {list(spec.enum)}")
    if spec.obj is not None and isinstance(value, Mapping):
        spec.obj.check(event_type, value, path)
    if spec.items is not None and isinstance(value, list | FrozenList):
        for i, item in enumerate(value):
            _check_field(event_type, spec.items, item, f"{path}[{i}]")


class Scope(StrEnum):
    """Where in the turn/step structure an event may appear."""

    ANYWHERE = "anywhere"
    TURN = "turn"  # inside an open turn
    STEP = "step"  # inside an open step of the open turn


@dataclass(frozen=True)
class EventType:
    name: str
    schema: Obj = field(default_factory=Obj)
    scope: Scope = Scope.ANYWHERE
    surface_ops: tuple[SurfaceOp, ...] = (SurfaceOp.NONE,)  # first is the default
    ignorable: bool = False
    description: str = ""

    @property
    def namespace(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def model_visible(self) -> bool:
        """Whether events of this type can become model messages."""
        return any(op is not SurfaceOp.NONE for op in self.surface_ops)


CORE_NAMESPACES = frozenset(
    {"session", "turn", "step", "user", "request", "assistant", "tool", "context", "compaction"}
)

TURN_END_REASONS = ("completed", "refused", "cancelled", "failed", "interrupted")
COMPACTION_OUTCOMES = ("completed", "failed", "abandoned")
COMPACTION_TRIGGERS = ("pressure", "overflow", "manual")
SEED_REASONS = ("resume", "fork", "replay")
DATA_CLASSES = ("raw", "surface", "business", "reasoning")  # sessionstream.core.sealed.DataClass
SHRED_SCOPES = ("delete", "retention")
HOLD_ACTIONS = ("placed", "released")

_ATTACHMENT = Obj(
    {
        "sha256": F("str"),
        "size": F("int"),
        "media_type": F("str"),
        "head": F("str"),
        "tail": F("str"),
    }
)
_TOOL_CALL = Obj({"call_id": F("str"), "name": F("str"), "arguments": F("obj")})
_USAGE = Obj({"input_tokens": F("int"), "output_tokens": F("int")})
_CONTENT = F(("str", "list"))
#: Fields of the provider format a message came from that the event does not model (a
#: Chat ``name``, Responses item ids and statuses), kept by an import so an export to the
#: same API sends them back: ``{"api", "fields": {…}, "calls": {call_id: {…}}}``.
_PROVIDER_FIELDS = F("obj", required=False)

_APPEND = (SurfaceOp.APPEND,)
_USER_OPS = (SurfaceOp.APPEND, SurfaceOp.REPLACE)

CORE_TYPES: tuple[EventType, ...] = (
    EventType(
        "session/start",
        Obj(
            {
                "format_version": F("int"),
                "tenant": F("str"),
                "lineage": F(
                    ("obj", "null"),
                    required=False,
                    obj=Obj(
                        {
                            "parent_session": F("str"),
                            "seed_length": F("int"),
                            "delegation_depth": F("int"),
                            "inherited_classes": F("list", required=False, items=F("str")),
                        }
                    ),
                ),
            }
        ),
        description="First event of every session: format version, tenant, lineage.",
    ),
    EventType(
        "session/end-seed",
        Obj({"reason": F("str", enum=SEED_REASONS), "seed_length": F("int")}),
        description="Boundary between seeded history and this lifecycle's live writes.",
    ),
    EventType(
        "session/shred",
        Obj(
            {
                "classes": F("list", items=F("str", enum=DATA_CLASSES)),
                "scope": F("str", enum=SHRED_SCOPES),
                "principal": F("str"),
                "reason": F("str"),
                "shredded_at": F("int"),
            }
        ),
        description="Audit: the session's data keys of these classes were destroyed "
        "(deletion or retention); their content reads as placeholders from here on.",
    ),
    EventType(
        "session/hold",
        Obj(
            {
                "action": F("str", enum=HOLD_ACTIONS),
                "principal": F("str"),
                "reason": F("str"),
            }
        ),
        description="Audit: a legal hold on the session was placed or released.",
    ),
    EventType("turn/start", Obj({}), description="Opens a turn (envelope turn_id)."),
    EventType(
        "turn/end",
        Obj({"reason": F("str", enum=TURN_END_REASONS), "detail": F("str", required=False)}),
        scope=Scope.TURN,
        description="Closes the open turn with its reason.",
    ),
    EventType("step/start", Obj({}), scope=Scope.TURN, description="Opens a step in the turn."),
    EventType("step/end", Obj({}), scope=Scope.STEP, description="Closes the open step."),
    EventType(
        "user/message",
        Obj({"content": _CONTENT, "steering": F("bool", required=False),
             "provider_fields": _PROVIDER_FIELDS}),
        surface_ops=_USER_OPS,
        description="A user message; with surface_op=replace, a compaction summary.",
    ),
    EventType(
        "request/header",
        Obj(
            {
                "provider": F("str"),
                "model": F("str"),
                "reasoning_effort": F(("str", "null"), required=False),
                "max_tokens": F(("int", "null"), required=False),
                "defaults_source": F("obj", required=False),
            }
        ),
        scope=Scope.STEP,
        description="How the next model request is routed; never a message.",
    ),
    EventType(
        "assistant/chunk",
        Obj({"text": F("str"), "index": F("int", required=False)}),
        scope=Scope.STEP,
        description="A streamed fragment; audit only, never a message.",
    ),
    EventType(
        "assistant/message",
        Obj(
            {
                "content": _CONTENT,
                "tool_calls": F("list", required=False, items=F("obj", obj=_TOOL_CALL)),
                "stop_reason": F("str", required=False),
                "usage": F("obj", required=False, obj=_USAGE),
                "provider": F("str", required=False),
                "model": F("str", required=False),
                "reasoning": F("list", required=False, items=F("obj")),
                "blocks": F("list", required=False,
                            items=F("str", enum=("reasoning", "text", "call"))),
                "provider_fields": _PROVIDER_FIELDS,
            }
        ),
        scope=Scope.STEP,
        surface_ops=_APPEND,
        description="The completed assistant message with its tool calls (and the "
        "model's reasoning as its API returned it, class reasoning; blocks: the order "
        "of its reasoning blocks, text parts and calls when it was not that one).",
    ),
    EventType(
        "tool/call",
        Obj(
            {
                "call_id": F("str"),
                "name": F("str"),
                "arguments": F("obj"),
                "idempotency_key": F(("str", "null"), required=False),
            }
        ),
        scope=Scope.STEP,
        description="The harness starts executing a tool call the assistant made.",
    ),
    EventType(
        "tool/result",
        Obj(
            {
                "call_id": F("str"),
                "status": F("str", enum=("ok", "error")),
                "content": F(("str", "list", "obj", "null"), required=False),
                "attachment": F("obj", required=False, obj=_ATTACHMENT),
                "operation_id": F(("str", "null"), required=False),
                "version": F(("str", "int", "null"), required=False),
                "provider_fields": _PROVIDER_FIELDS,
            }
        ),
        scope=Scope.STEP,
        surface_ops=_APPEND,
        description="What the tool returned (or an attachment reference for large output).",
    ),
    EventType(
        "context/snapshot",
        Obj({"snapshot_id": F("str"), "content": F("str"), "sources": F("list", required=False)}),
        surface_ops=_APPEND,
        description="Dynamic context materialized as a user-role message when it changes.",
    ),
    EventType(
        "compaction/start",
        Obj({"compaction_id": F("str"), "trigger": F("str", enum=COMPACTION_TRIGGERS)}),
        description="A compaction attempt begins (holds the compaction lock).",
    ),
    EventType(
        "compaction/summary",
        Obj(
            {
                "compaction_id": F("str"),
                "first_position": F("int"),
                "last_position": F("int"),
                "shadowed_seqs": F("list", items=F("int")),
                "tokens_before": F("int"),
                "tokens_after": F("int"),
                "summarizer": F(
                    "obj",
                    obj=Obj({"provider": F("str"), "model": F("str"), "config": F("obj")}),
                ),
            }
        ),
        description="Evidence: shadowed surface range, token estimates, summarizer.",
    ),
    EventType(
        "compaction/end",
        Obj(
            {
                "compaction_id": F("str"),
                "outcome": F("str", enum=COMPACTION_OUTCOMES),
                "reason": F("str", required=False),
            }
        ),
        description="The compaction attempt ends: completed, failed or abandoned.",
    ),
)

_TODO_ITEM = Obj({"id": F("str"), "text": F("str"), "status": F("str", required=False)})
TODO_STATUSES = ("pending", "in_progress", "done", "cancelled")
APPROVALS = ("pending", "approved", "rejected")

DOMAIN_TYPES: tuple[EventType, ...] = (
    EventType("todo/add", _TODO_ITEM, ignorable=True, description="Adds a todo item."),
    EventType(
        "todo/update",
        Obj({"id": F("str"), "status": F("str", enum=TODO_STATUSES)}),
        ignorable=True,
        description="Changes a todo item's status.",
    ),
    EventType(
        "plan/set",
        Obj({"steps": F("list", items=F("str")), "plan_hash": F("str", required=False)}),
        ignorable=True,
        description="Replaces the agent's plan.",
    ),
    EventType("goal/set", Obj({"goal": F("str")}), ignorable=True, description="Sets the goal."),
    EventType(
        "business/metric",
        Obj(
            {
                "id": F("str"),
                "definition_version": F("str"),
                "status": F("str", enum=("proposed", "confirmed")),
                "source_turn": F(("int", "str", "null"), required=False),
            }
        ),
        description="The metric the session commits to (invalidates plan and approval).",
    ),
    EventType(
        "business/filters",
        Obj({"filters": F("obj")}),
        description="Query filters (invalidates plan and approval).",
    ),
    EventType("business/time", Obj({"time": F("obj")}), description="Time range semantics."),
    EventType(
        "business/ambiguities",
        Obj({"ambiguities": F("list")}),
        description="Open ambiguities the user must resolve.",
    ),
    EventType(
        "business/plan",
        Obj({"plan_hash": F(("str", "null"))}),
        description="The query plan the approval refers to.",
    ),
    EventType(
        "business/approval",
        Obj({"approval": F("str", enum=APPROVALS)}),
        description="Approval of the current plan.",
    ),
)


class Catalog:
    """A registry of event types: the core ones plus plugin domains."""

    def __init__(self, types: Iterable[EventType] = ()) -> None:
        self._types: dict[str, EventType] = {}
        for t in types:
            self.register(t)

    def register(self, event_type: EventType) -> None:
        if "/" not in event_type.name:
            raise CatalogError(f"event type {event_type.name!r} needs a namespace ('ns/name')")
        if event_type.name in self._types:
            raise CatalogError(f"event type {event_type.name!r} is registered twice")
        self._types[event_type.name] = event_type

    def register_domain(self, event_type: EventType) -> None:
        """Register a plugin type; core namespaces are reserved."""
        if event_type.namespace in CORE_NAMESPACES:
            raise CatalogError(
                f"namespace {event_type.namespace!r} is reserved for core types; "
                "use your plugin's own namespace"
            )
        if event_type.model_visible:
            raise CatalogError(
                f"domain type {event_type.name!r} cannot enter the model surface; "
                "materialize it as a context/snapshot instead"
            )
        self.register(event_type)

    def get(self, name: str) -> EventType | None:
        return self._types.get(name)

    def require(self, name: str) -> EventType:
        t = self._types.get(name)
        if t is None:
            raise UnknownEventType(name)
        return t

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __iter__(self) -> Any:
        return iter(self._types.values())

    def validate(self, name: str, data: JsonValue) -> EventType:
        """Check data against the type's schema; returns the type."""
        t = self.require(name)
        t.schema.check(name, data)
        return t


def default_catalog() -> Catalog:
    """The core types plus the built-in todo/plan/goal/business domains."""
    cat = Catalog(CORE_TYPES)
    for t in DOMAIN_TYPES:
        cat.register_domain(t)
    return cat
