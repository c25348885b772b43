"""A small harness loop: one model step at a time, recorded through the session's rules.

:class:`Harness` runs a step — assemble the request from ``derive_messages()``, build
the provider body, call the injected client, record the answer — then runs the tools
the model asked for: each ``tool/call`` (with an idempotency key) is flushed *before*
the tool runs, so a crash during a side effect leaves a provable open call, and each
``tool/result`` carries the tool's operation id. It writes through anything with
``append`` (a :class:`~sessionstream.core.session.Session` offline, a
``producers.writer.SessionWriter`` on the fleet); ``flush`` is called when the log
has one. The provider client is a port: ``create(body)`` returns the response body,
or an iterable of stream events when the body asks for a stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sessionstream.core.events import Draft, Event
from sessionstream.core.jsonvalue import JsonValue, canonical_dumps, thaw
from sessionstream.core.providers import build, check_api, stream_parser
from sessionstream.core.providers.common import Built
from sessionstream.core.providers.errors import StreamInterrupted, ToolResultError
from sessionstream.core.providers.output import ModelOutput
from sessionstream.core.recorder import parse, record
from sessionstream.core.request import (
    GLOBAL,
    PromptRegistry,
    Request,
    RequestHeader,
    ToolProvider,
    assemble,
    blocks_of,
    context_snapshot_ids,
    reasoning_of,
    replaced_seqs,
)
from sessionstream.core.session import Session


class ModelClient(Protocol):
    """The provider port: one request body in, a response body or stream events out."""

    def create(self, body: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class ToolContext:
    """What a tool gets besides its arguments: ids to make its side effect idempotent."""

    session_id: str
    call_id: str
    idempotency_key: str


@dataclass(frozen=True)
class ToolOutcome:
    """A tool's answer; ``operation_id`` names the side effect it performed (if any)."""

    content: JsonValue
    status: str = "ok"
    operation_id: str | None = None
    version: str | int | None = None


Tool = Callable[[Mapping[str, Any], ToolContext], "ToolOutcome | JsonValue"]


@dataclass(frozen=True)
class StepResult:
    output: ModelOutput
    built: Built
    events: tuple[Event, ...]

    @property
    def tool_calls(self) -> int:
        """The calls the step declared (answered calls whose arguments did not parse
        included: the model was told and takes another step)."""
        return sum(len(e.data.get("tool_calls", ())) for e in self.events
                   if e.type == "assistant/message")


@dataclass(frozen=True)
class TurnResult:
    reason: str  # the turn/end reason written
    steps: tuple[StepResult, ...]
    detail: str | None = None


def idempotency_key(session_id: str, call_id: str) -> str:
    """The same key for the same call, on every node and every retry."""
    return f"{session_id}/{call_id}"


@dataclass
class Harness:
    """Runs model steps and tools for one session; see the module docstring."""

    log: Any  # Session or SessionWriter: append(Draft), optional flush(timeout)
    client: ModelClient
    api: str
    header: RequestHeader
    registry: PromptRegistry = field(default_factory=PromptRegistry)
    scope: str | None = GLOBAL
    tools: Mapping[str, Tool] = field(default_factory=dict)
    providers: Sequence[ToolProvider] = ()
    variables: Mapping[str, Any] = field(default_factory=dict)
    stream: bool = False
    #: builder options of the API (``thinking`` for Anthropic, ``stateless`` for Responses)
    options: Mapping[str, Any] = field(default_factory=dict)
    flush_timeout: float = 30.0
    max_steps: int = 8

    def __post_init__(self) -> None:
        check_api(self.api)

    @property
    def session(self) -> Session:
        session = getattr(self.log, "session", self.log)
        assert isinstance(session, Session)
        return session

    def flush(self) -> None:
        flush = getattr(self.log, "flush", None)
        if flush is not None:
            flush(self.flush_timeout)

    def _append(self, draft: Draft) -> Event:
        event: Event = self.log.append(draft)
        return event

    # -- one request ----------------------------------------------------------------------
    def request(self) -> Request:
        """The request the next step sends (assembled from the session's surface)."""
        events = self.session.events
        return assemble(self.session.derive_messages(), self.registry, self.scope,
                        header=self.header, providers=self.providers,
                        variables=self.variables, snapshot_ids=context_snapshot_ids(events),
                        replaced=replaced_seqs(events), reasoning=reasoning_of(events),
                        blocks=blocks_of(events))

    def step(self, *, run_tools: bool = True) -> StepResult:
        """step/start, the model call and its record, the tools, step/end.

        With ``run_tools=False`` the step stays open after the assistant message: the
        caller runs the calls itself with :meth:`start_tool` / :meth:`record_result`
        and ends the step with :meth:`end_step`. A failing client or an incomplete
        stream raises with the step still open and nothing of the answer recorded
        (``turn`` ends the turn ``failed``).
        """
        start = len(self.session.events)
        self._append(Draft("step/start"))
        built = build(self.api, self.request(), stream=self.stream, **self.options)
        output = self._answer(built)
        record(self.log, output, self.header, session=self.session)
        message = self.session.events[-1]
        invalid = {w["call_id"] for w in message.data.get("withheld_tool_calls", ())
                   if w["reason"] == "invalid-arguments"}
        for call in message.data.get("tool_calls", ()):
            if call["call_id"] in invalid:  # told, never run (ADR 0010)
                self._answer_invalid(call["call_id"], call["name"])
            elif run_tools:
                self._run_tool(call["call_id"], call["name"], thaw(call["arguments"]))
        if run_tools:
            self.end_step()
        return StepResult(output, built, tuple(self.session.events[start:]))

    def _answer(self, built: Built) -> ModelOutput:
        """The client's answer parsed; a stream the transport broke off (the SDK's
        connection error, a read error mid-stream) is :class:`StreamInterrupted`."""
        raw = self.client.create(built.body)
        if isinstance(raw, Mapping):
            return parse(self.api, raw)
        parser = stream_parser(self.api)
        events = iter(raw)
        while True:
            try:
                event = next(events)
            except StopIteration:
                break
            except Exception as exc:  # the transport's own error type: not ours to import
                raise StreamInterrupted(self.api, f"{type(exc).__name__}: {exc}") from exc
            parser.feed(event)
        return parser.finish()

    def end_step(self) -> None:
        self._append(Draft("step/end"))

    def _declared(self, call_id: str) -> tuple[str, Any, bool]:
        """(name, arguments, started) of an unanswered call of the open step."""
        pending = {p.call_id: p for p in self.session.pending_calls}
        call = pending.get(call_id)
        if call is None:
            open_ids = ", ".join(sorted(pending)) or "none"
            raise ToolResultError(
                f"session {self.session.session_id}: no unanswered call {call_id!r} in the "
                f"open turn (unanswered: {open_ids}); nothing was recorded")
        declared = self.session.events[call.declared_seq]
        args = next(c["arguments"] for c in declared.data["tool_calls"]
                    if c["call_id"] == call_id)
        return call.name, thaw(args), call.executed_seq is not None

    def start_tool(self, call_id: str) -> ToolContext:
        """``tool/call`` for a declared call, flushed: run its side effect after this."""
        name, args, started = self._declared(call_id)
        if started:
            raise ToolResultError(f"call {call_id!r} was already started; record its result")
        key = idempotency_key(self.session.session_id, call_id)
        self._append(Draft("tool/call", {"call_id": call_id, "name": name,
                                         "arguments": args, "idempotency_key": key}))
        self.flush()  # durable before the side effect: a crash leaves a provable open call
        return ToolContext(self.session.session_id, call_id, key)

    def record_result(self, call_id: str, outcome: ToolOutcome | JsonValue) -> Event:
        """``tool/result`` of a started call (:class:`ToolResultError` for any other id)."""
        _name, _args, started = self._declared(call_id)
        if not started:
            raise ToolResultError(f"call {call_id!r} was never started: call start_tool "
                                  "before running it; nothing was recorded")
        result = outcome if isinstance(outcome, ToolOutcome) else ToolOutcome(outcome)
        content = result.content
        if content is not None and not isinstance(content, str | list | tuple | Mapping):
            content = canonical_dumps(content)  # a number or a boolean: its JSON text
        data: dict[str, Any] = {
            "call_id": call_id, "status": result.status, "content": content,
            "operation_id": result.operation_id or idempotency_key(self.session.session_id,
                                                                   call_id)}
        if result.version is not None:
            data["version"] = result.version
        return self._append(Draft("tool/result", data))

    def _answer_invalid(self, call_id: str, name: str) -> None:
        """A call whose arguments did not parse: not run; an error result tells the model."""
        self._append(Draft("tool/call", {"call_id": call_id, "name": name, "arguments": {},
                                         "idempotency_key": None,
                                         "skipped": "invalid-arguments"}))
        self._append(Draft("tool/result", {
            "call_id": call_id, "status": "error",
            "content": f"the arguments of this {name} call were not valid JSON, so it was "
                       "not run; call it again with a JSON object as its arguments"}))

    def _run_tool(self, call_id: str, name: str, arguments: Any) -> None:
        ctx = self.start_tool(call_id)
        tool = self.tools.get(name)
        if tool is None:
            outcome: ToolOutcome | JsonValue = ToolOutcome(
                f"no tool named {name!r} is available", status="error")
        else:
            try:
                outcome = tool(arguments, ctx)
            except Exception as exc:  # the model sees that the tool failed, not a crash
                outcome = ToolOutcome(f"{name} failed: {type(exc).__name__}: {exc}",
                                      status="error")
        self.record_result(call_id, outcome)

    # -- one turn -------------------------------------------------------------------------
    def turn(self, content: JsonValue, *, before: Iterable[Draft] = ()) -> TurnResult:
        """turn/start, the user message, steps until the model stops calling tools, turn/end.

        The turn ends ``completed``, ``refused`` (the model refused), or ``failed``
        (output cut at max_tokens, a tool call the provider could not return, the step
        limit, or an error — which is re-raised after the turn/end is written and flushed).
        """
        self._append(Draft("turn/start"))
        for draft in before:
            self._append(draft)
        self._append(Draft("user/message", {"content": content}))
        steps: list[StepResult] = []
        try:
            while True:
                if len(steps) >= self.max_steps:
                    return self._end("failed", steps, f"step limit {self.max_steps} reached")
                result = self.step()
                steps.append(result)
                out = result.output
                if result.tool_calls:
                    continue
                if out.stop_reason == "refusal":
                    return self._end("refused", steps, None)
                if out.truncated:
                    return self._end("failed", steps, "output cut at max_tokens")
                if out.lost_call:
                    return self._end("failed", steps, f"the model's tool call was not "
                                     f"usable ({out.provider_stop_reason}): the provider "
                                     "returned no call")
                return self._end("completed", steps, None)
        except Exception as exc:
            if self.session.open_turn is not None:
                self._end("failed", steps, f"{type(exc).__name__} during the step")
            raise

    def _end(self, reason: str, steps: list[StepResult], detail: str | None) -> TurnResult:
        data: dict[str, Any] = {"reason": reason}
        if detail:
            data["detail"] = detail
        self._append(Draft("turn/end", data))
        self.flush()
        return TurnResult(reason, tuple(steps), detail)
