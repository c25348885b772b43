"""The numbers behind the dashboard's session plots, folded from a session's log.

A projection keeps a session's state *now*; a plot needs its history: the context size
at every seq, each compaction's drop, each turn's tokens and time. :class:`SessionSeries`
folds a session's admitted events (in seq order, content opened) once, keeping:

- **context**: the surface's token estimate after every change of the surface, as
  ``(seq, tokens)`` — the same :class:`~sessionstream.core.surface.Surface` and
  :func:`~sessionstream.core.surface.token_estimate` as the ``surface`` projection, so
  the last point is the projection's ``token_estimate``; each ``replace`` is a *drop*
  (tokens before and after it, and the compaction it belongs to, with the estimates the
  compactor recorded in ``compaction/summary``);
- **compactions**: every attempt (start, end, outcome, trigger, its drop if any);
- **turns**: per turn its seqs, times, status, model requests and tokens (fresh input,
  cached input, output, reasoning; a cost when :class:`Prices` name the model), its steps
  (start, end, status, the model call inside) and its tool calls (call to result, status).

:meth:`SessionSeries.to_json` gives what a plot draws, bounded whatever the session's
length: the context series downsampled to ``points`` (per bucket of seqs its first,
lowest, highest and last point, and every drop kept exactly), the turns grouped into at
most ``bars`` bars, and one turn's waterfall. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.events import Event, SurfaceOp
from sessionstream.core.surface import Surface, token_estimate

#: Defaults of :meth:`SessionSeries.to_json`: enough points for a 1,000-pixel plot (a
#: point per two pixels) and a bar per turn up to 500 turns.
DEFAULT_POINTS = 600
DEFAULT_BARS = 500
MAX_POINTS = 100_000
MAX_BARS = 20_000


class PricesError(ValueError):
    """A price table that cannot be used; the message names the entry and the field."""


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of one model."""

    input: float
    output: float
    cached_input: float | None = None  # default: the input price
    cache_write: float | None = None  # Anthropic's cache creation; default: the input price


class Prices:
    """Prices by ``provider/model`` or by ``model`` alone (the first that matches)."""

    def __init__(self, table: Mapping[str, Price] | None = None) -> None:
        self.table = dict(table or {})

    @classmethod
    def parse(cls, data: Any, where: str = "prices") -> Prices:
        """From JSON: ``{"openai/gpt-4o": {"input": 2.5, "cached_input": 1.25,
        "output": 10}, …}`` (USD per million tokens)."""
        if not isinstance(data, Mapping):
            raise PricesError(f"{where}: expected an object of model -> prices, got "
                              f"{type(data).__name__}")
        table = {}
        for name, entry in data.items():
            if not isinstance(entry, Mapping):
                raise PricesError(f"{where}: {name!r} is not an object of prices")
            unknown = set(entry) - {"input", "output", "cached_input", "cache_write"}
            if unknown:
                raise PricesError(f"{where}: {name!r} has unknown field(s) "
                                  f"{', '.join(sorted(unknown))}")
            values = {}
            for key in ("input", "output", "cached_input", "cache_write"):
                value = entry.get(key)
                if value is None and key in ("input", "output"):
                    raise PricesError(f"{where}: {name!r} needs {key!r} (USD per million "
                                      "tokens)")
                if value is not None and (isinstance(value, bool)
                                          or not isinstance(value, int | float) or value < 0):
                    raise PricesError(f"{where}: {name!r}.{key} must be a number >= 0, "
                                      f"got {value!r}")
                values[key] = None if value is None else float(value)
            table[str(name)] = Price(values["input"] or 0.0, values["output"] or 0.0,
                                     values["cached_input"], values["cache_write"])
        return cls(table)

    def of(self, provider: str, model: str) -> Price | None:
        return self.table.get(f"{provider}/{model}") or self.table.get(model)

    def __bool__(self) -> bool:
        return bool(self.table)


@dataclass(slots=True)
class Tokens:
    """One model response's usage, split the way it is billed and drawn."""

    input: int = 0  # fresh input (cache writes included)
    cached: int = 0  # input read from a provider's cache
    output: int = 0  # output, reasoning included (as every recorder counts it)
    reasoning: int = 0  # the reasoning part of output
    cache_write: int = 0  # the part of ``input`` written to a cache (Anthropic)

    @classmethod
    def of_usage(cls, usage: Mapping[str, Any]) -> Tokens:
        """From an ``assistant/message.usage``: OpenAI and Gemini count cached tokens
        inside ``input_tokens`` (``cached_input_tokens``), Anthropic beside them
        (``cache_read_input_tokens``, ``cache_creation_input_tokens``)."""
        def n(key: str) -> int:
            v = usage.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0

        inside = min(n("cached_input_tokens"), n("input_tokens"))
        beside, write = n("cache_read_input_tokens"), n("cache_creation_input_tokens")
        return cls(input=n("input_tokens") - inside + write, cached=inside + beside,
                   output=n("output_tokens"),
                   reasoning=min(n("reasoning_tokens"), n("output_tokens")),
                   cache_write=write)

    def cost(self, price: Price) -> float:
        cached = price.input if price.cached_input is None else price.cached_input
        write = price.input if price.cache_write is None else price.cache_write
        fresh = self.input - self.cache_write
        return (fresh * price.input + self.cache_write * write + self.cached * cached
                + self.output * price.output) / 1_000_000


@dataclass(slots=True)
class Span:
    """A step, a model call or a tool call of a turn: times in epoch ms (end None: open)."""

    kind: str  # step | model | tool
    label: str
    start_seq: int
    start_ms: int
    end_seq: int | None = None
    end_ms: int | None = None
    status: str = "open"
    step: int | None = None  # the step (index in the turn) it ran in

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "label": self.label, "start_seq": self.start_seq,
                "end_seq": self.end_seq, "start_ms": self.start_ms, "end_ms": self.end_ms,
                "status": self.status, "step": self.step}


@dataclass(slots=True)
class Turn:
    index: int
    turn_id: str
    start_seq: int
    start_ms: int
    end_seq: int | None = None
    end_ms: int | None = None
    status: str = "open"
    last_ms: int = 0  # the time of its newest event (the end of an open turn, so far)
    requests: int = 0
    tokens: Tokens = field(default_factory=Tokens)
    cost: float = 0.0
    unpriced: int = 0  # responses with usage whose model has no price
    models: dict[str, None] = field(default_factory=dict)
    spans: list[Span] = field(default_factory=list)

    def bar(self, priced: bool) -> dict[str, Any]:
        """The turn as a bar of the per-turn plot (``cost`` None unless every response
        with usage had a price)."""
        t = self.tokens
        return {"turn": self.index, "turn_id": self.turn_id, "start_seq": self.start_seq,
                "end_seq": self.end_seq, "status": self.status, "start_ms": self.start_ms,
                "duration_ms": (self.end_ms or self.last_ms) - self.start_ms,
                "requests": self.requests, "input": t.input, "cached": t.cached,
                "output": t.output, "reasoning": t.reasoning,
                "cost": round(self.cost, 6) if priced and not self.unpriced else None,
                "steps": sum(1 for s in self.spans if s.kind == "step"),
                "tools": sum(1 for s in self.spans if s.kind == "tool"),
                "tool_errors": sum(1 for s in self.spans
                                   if s.kind == "tool" and s.status == "error")}


@dataclass(slots=True)
class Compaction:
    compaction_id: str
    start_seq: int
    trigger: str | None
    end_seq: int | None = None
    outcome: str | None = None  # None while open
    recorded_before: int | None = None  # compaction/summary's estimates
    recorded_after: int | None = None
    shadowed: int = 0
    drop_seq: int | None = None  # the replace that cut the surface
    before: int | None = None  # the surface's tokens just before it, and after
    after: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"compaction_id": self.compaction_id, "start_seq": self.start_seq,
                "end_seq": self.end_seq, "trigger": self.trigger, "outcome": self.outcome,
                "drop_seq": self.drop_seq, "before": self.before, "after": self.after,
                "recorded_before": self.recorded_before,
                "recorded_after": self.recorded_after, "shadowed": self.shadowed}


def _turn_key(event: Event) -> str:
    return event.turn_id if event.turn_id is not None else f"turn@{event.seq}"


class SessionSeries:
    """The plot series of one session; :meth:`add` its admitted events in seq order."""

    def __init__(self, prices: Prices | None = None) -> None:
        self.prices = prices or Prices()
        self._surface = Surface()
        self.tokens = 0
        #: (seq, tokens) after every change of the surface
        self.points: list[tuple[int, int]] = []
        #: every replace: seq, tokens before and after, the compaction id (or None)
        self.drops: list[dict[str, Any]] = []
        self.compactions: dict[str, Compaction] = {}
        self.turns: list[Turn] = []
        self.last_seq = -1
        self.first_ms: int | None = None
        self.last_ms: int | None = None
        self._open: Turn | None = None
        self._step: Span | None = None
        self._model: Span | None = None
        self._calls: dict[str, Span] = {}
        self._route: tuple[str, str] | None = None
        self._compacting: str | None = None  # the open compaction with a summary

    # -- folding -------------------------------------------------------------------------
    def add_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.add(event)

    def add(self, event: Event) -> None:
        """Fold one admitted event (content opened); events must come in seq order."""
        if event.seq <= self.last_seq:
            return  # already folded (a re-read of the same range)
        self.last_seq = event.seq
        self.first_ms = event.time if self.first_ms is None else self.first_ms
        self.last_ms = event.time
        self._context(event)
        self._lifecycle(event)

    def _context(self, event: Event) -> None:
        before = self.tokens
        change = self._surface.apply(event)
        if change is None:
            return
        self.tokens = before - token_estimate(change.removed) + token_estimate(change.added)
        self.points.append((event.seq, self.tokens))
        if event.surface_op is SurfaceOp.REPLACE:
            cid = self._compacting
            self.drops.append({"seq": event.seq, "before": before, "after": self.tokens,
                               "compaction_id": cid, "shadowed": len(change.removed)})
            attempt = self.compactions.get(cid) if cid is not None else None
            if attempt is not None:
                attempt.drop_seq, attempt.before, attempt.after = event.seq, before, self.tokens

    def _lifecycle(self, event: Event) -> None:
        t, data, ms = event.type, event.data, event.time
        turn = self._open
        if turn is not None:
            turn.last_ms = ms
        if t == "turn/start":
            turn = Turn(len(self.turns), _turn_key(event), event.seq, ms, last_ms=ms)
            self.turns.append(turn)
            self._open, self._step, self._model, self._calls = turn, None, None, {}
        elif t == "turn/end" and turn is not None:
            turn.end_seq, turn.end_ms, turn.status = event.seq, ms, str(data.get("reason"))
            for span in turn.spans:  # what the turn's end closed without its own end
                if span.end_ms is None:
                    span.end_seq, span.end_ms = event.seq, ms
                    span.status = "abandoned" if span.kind == "tool" else turn.status
            self._open = self._step = self._model = None
            self._calls = {}
        elif t == "step/start" and turn is not None:
            steps = sum(1 for s in turn.spans if s.kind == "step")
            self._step = Span("step", f"step {steps + 1}", event.seq, ms, step=steps)
            turn.spans.append(self._step)
        elif t == "step/end" and self._step is not None:
            self._step.end_seq, self._step.end_ms, self._step.status = event.seq, ms, "completed"
            self._step = None
        elif t == "request/header":
            self._route = (str(data["provider"]), str(data["model"]))
            if turn is not None:
                turn.requests += 1
                self._model = Span("model", f"{self._route[0]}/{self._route[1]}", event.seq,
                                   ms, step=self._step_index())
                turn.spans.append(self._model)
        elif t == "assistant/message" and turn is not None:
            self._answer(turn, event)
        elif t == "tool/call" and turn is not None:
            self._call(turn, event, str(data["call_id"]), str(data["name"]))
        elif t == "tool/result" and turn is not None:
            found = self._calls.get(str(data["call_id"]))
            # a result whose call event was never logged: from now
            done = found or self._call(turn, event, str(data["call_id"]), "?")
            done.end_seq, done.end_ms = event.seq, ms
            done.status = "error" if data.get("status") == "error" else "ok"
        elif t == "compaction/start":
            cid = str(data["compaction_id"])
            self.compactions[cid] = Compaction(cid, event.seq, data.get("trigger"))
        elif t == "compaction/summary":
            attempt = self.compactions.get(str(data["compaction_id"]))
            if attempt is not None:
                attempt.recorded_before = data.get("tokens_before")
                attempt.recorded_after = data.get("tokens_after")
                attempt.shadowed = len(data.get("shadowed_seqs") or ())
                self._compacting = attempt.compaction_id
        elif t == "compaction/end":
            attempt = self.compactions.get(str(data["compaction_id"]))
            if attempt is not None:
                attempt.end_seq, attempt.outcome = event.seq, str(data.get("outcome"))
            self._compacting = None

    def _step_index(self) -> int | None:
        return self._step.step if self._step is not None else None

    def _answer(self, turn: Turn, event: Event) -> None:
        data = event.data
        model = self._model
        if model is not None and model.end_ms is None:
            model.end_seq, model.end_ms = event.seq, event.time
            model.status = str(data.get("stop_reason") or "completed")
        route = self._route or ("unknown", "unknown")
        provider = str(data.get("provider") or route[0])
        name = str(data.get("model") or route[1])
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            tokens = Tokens.of_usage(usage)
            total = turn.tokens
            total.input += tokens.input
            total.cached += tokens.cached
            total.output += tokens.output
            total.reasoning += tokens.reasoning
            total.cache_write += tokens.cache_write
            turn.models[f"{provider}/{name}"] = None
            price = self.prices.of(provider, name)
            if price is None:
                turn.unpriced += 1
            else:
                turn.cost += tokens.cost(price)
        for call in data.get("tool_calls") or ():  # declared: from here until it runs
            cid = str(call.get("call_id"))
            if cid not in self._calls:
                self._call(turn, event, cid, str(call.get("name")), declared=True)

    def _call(self, turn: Turn, event: Event, call_id: str, name: str, *,
              declared: bool = False) -> Span:
        span = self._calls.get(call_id)
        if span is None:
            span = Span("tool", name, event.seq, event.time, step=self._step_index())
            self._calls[call_id] = span
            turn.spans.append(span)
        elif not declared and span.status == "open":
            span.label = name  # started: the call's own record names it
        return span

    # -- reading -------------------------------------------------------------------------
    def context_json(self, points: int = DEFAULT_POINTS) -> dict[str, Any]:
        """The context-size series, at most ``points`` points (+ the drops' own)."""
        shown = downsample(self.points, points, keep={d["seq"] for d in self.drops})
        return {"points": [list(p) for p in shown], "total_points": len(self.points),
                "downsampled": len(shown) < len(self.points), "tokens": self.tokens,
                "drops": list(self.drops)}

    def turns_json(self, bars: int = DEFAULT_BARS) -> dict[str, Any]:
        rows = [t.bar(bool(self.prices)) for t in self.turns]
        size = max(1, -(-len(rows) // max(1, bars)))  # ceil: turns per bar
        grouped = rows if size == 1 else [_group(rows[i:i + size])
                                          for i in range(0, len(rows), size)]
        totals = _group(rows) if rows else None
        return {"total": len(rows), "per_bar": size, "bars": grouped, "totals": totals,
                "priced": bool(self.prices)}

    def waterfall(self, index: int | None = None) -> dict[str, Any] | None:
        """One turn's spans (default: the last turn), times relative to its start."""
        if not self.turns:
            return None
        turn = self.turns[-1 if index is None else max(0, min(index, len(self.turns) - 1))]
        end = turn.end_ms if turn.end_ms is not None else turn.last_ms

        def rel(ms: int | None) -> int | None:
            return None if ms is None else ms - turn.start_ms

        spans = [{**s.to_json(), "start": rel(s.start_ms), "end": rel(s.end_ms)}
                 for s in turn.spans]
        return {"turn": turn.index, "turn_id": turn.turn_id, "status": turn.status,
                "start_seq": turn.start_seq, "end_seq": turn.end_seq,
                "start_ms": turn.start_ms, "duration_ms": end - turn.start_ms,
                "models": list(turn.models), "spans": spans}

    def to_json(self, *, points: int = DEFAULT_POINTS, bars: int = DEFAULT_BARS,
                turn: int | None = None, budget: int | None = None) -> dict[str, Any]:
        return {
            "last_seq": self.last_seq, "first_ms": self.first_ms, "last_ms": self.last_ms,
            "budget": budget, "context": self.context_json(points),
            "compactions": [c.to_json() for c in self.compactions.values()],
            "turns": self.turns_json(bars), "waterfall": self.waterfall(turn),
        }


def _group(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Consecutive turns as one bar: sums, the longest duration, the worst status."""
    costs = [r["cost"] for r in rows]
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    return {"turn": rows[0]["turn"], "last_turn": rows[-1]["turn"],
            "turns": len(rows), "start_seq": rows[0]["start_seq"],
            "end_seq": rows[-1]["end_seq"], "start_ms": rows[0]["start_ms"],
            "status": rows[0]["status"] if len(rows) == 1 else _worst(statuses),
            "statuses": statuses,
            "duration_ms": max(r["duration_ms"] for r in rows),
            **{k: sum(r[k] for r in rows) for k in ("requests", "input", "cached", "output",
                                                    "reasoning", "steps", "tools",
                                                    "tool_errors")},
            "cost": None if any(c is None for c in costs) else round(sum(costs), 6)}


#: Worst first: a bar of several turns shows the worst of their statuses.
_SEVERITY = ("failed", "interrupted", "refused", "cancelled", "open", "completed")


def _worst(statuses: Mapping[str, int]) -> str:
    for status in _SEVERITY:
        if statuses.get(status):
            return status
    return next(iter(statuses))


def downsample(points: Sequence[tuple[int, int]], limit: int,
               keep: set[int] | frozenset[int] = frozenset()) -> list[tuple[int, int]]:
    """At most about ``limit`` points of a series ordered by x (``keep``: xs always kept,
    with the point before each, so a drop stays a drop): per bucket of equal x-range its
    first, lowest, highest and last point (M4), which keeps the series' envelope."""
    n = len(points)
    if n <= limit or n < 2:
        return list(points)
    buckets = max(1, limit // 4)
    lo, hi = points[0][0], points[-1][0]
    width = max(1, -(-(hi - lo + 1) // buckets))
    chosen: set[int] = {0, n - 1}
    start = 0
    for i in range(1, n + 1):
        if i == n or (points[i][0] - lo) // width != (points[start][0] - lo) // width:
            part = range(start, i)
            chosen.update((start, i - 1, min(part, key=lambda j: points[j][1]),
                           max(part, key=lambda j: points[j][1])))
            start = i
    if keep:
        for i, (x, _) in enumerate(points):
            if x in keep:
                chosen.update((i, max(0, i - 1)))
    return [points[i] for i in sorted(chosen)]


__all__ = ["DEFAULT_BARS", "DEFAULT_POINTS", "MAX_BARS", "MAX_POINTS", "Compaction", "Price",
           "Prices", "PricesError", "SessionSeries", "Span", "Tokens", "Turn", "downsample"]
