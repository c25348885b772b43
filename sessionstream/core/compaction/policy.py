"""Whether to compact now, and why, with the numbers (seed §4.10.1, question 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sessionstream.core.catalog import COMPACTION_TRIGGERS
from sessionstream.core.messages import Message
from sessionstream.core.surface import token_estimate

#: ``compaction/end.reason`` prefixes (stable, for dashboards and tests).
REASON_QUALITY = "quality gate"
REASON_NO_RANGE = "no compactable range"
REASON_SUMMARIZER = "summarizer failed"
REASON_RANGE_CHANGED = "range changed before commit"


@dataclass(frozen=True)
class Budget:
    """How much surface a model gets and how compaction answers to it."""

    tokens: int = 32_000  # the context budget for messages (estimate, see surface.py)
    pressure: float = 0.8  # compact above this fraction of the budget
    keep_recent: int = 4  # surface nodes at the end that are never shadowed
    min_nodes: int = 2  # a run shorter than this is not worth a summary
    prune_chars: int = 600  # tool results longer than this reach the summarizer pruned

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError(f"budget tokens must be positive, got {self.tokens}")
        if not 0 < self.pressure <= 1:
            raise ValueError(f"pressure must be in (0, 1], got {self.pressure}")
        if self.keep_recent < 0 or self.min_nodes < 1 or self.prune_chars < 32:
            raise ValueError("keep_recent >= 0, min_nodes >= 1 and prune_chars >= 32")


#: The default budget (a module-level value: a frozen dataclass is safe to share).
DEFAULT_BUDGET = Budget()


@dataclass(frozen=True)
class Decision:
    """Whether to compact now, and why, with the numbers."""

    compact: bool
    trigger: str | None  # pressure | overflow | manual (None: no compaction)
    tokens: int  # estimated surface tokens now
    budget_tokens: int
    threshold_tokens: int  # the pressure threshold
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "compact": self.compact, "trigger": self.trigger, "tokens": self.tokens,
            "budget_tokens": self.budget_tokens, "threshold_tokens": self.threshold_tokens,
            "reason": self.reason,
        }


def should_compact(
    messages: Sequence[Message],
    budget_tokens: int,
    *,
    trigger: str | None = None,
    pressure: float = 0.8,
) -> Decision:
    """Decide from the surface's token estimate; an explicit ``trigger`` always compacts.

    ``trigger=None`` is the automatic policy: ``overflow`` above the budget,
    ``pressure`` above ``pressure × budget``, else no compaction. ``manual`` (an
    operator) or ``overflow`` (a provider refused the context) force an attempt.
    """
    if trigger is not None and trigger not in COMPACTION_TRIGGERS:
        raise ValueError(f"trigger {trigger!r} is not one of {list(COMPACTION_TRIGGERS)}")
    tokens = token_estimate(messages)
    threshold = int(budget_tokens * pressure)
    numbers = f"{tokens} tokens, budget {budget_tokens}, pressure threshold {threshold}"
    if trigger is not None:
        return Decision(True, trigger, tokens, budget_tokens, threshold,
                        f"{trigger} requested ({numbers})")
    if tokens > budget_tokens:
        return Decision(True, "overflow", tokens, budget_tokens, threshold,
                        f"surface over budget ({numbers})")
    if tokens > threshold:
        return Decision(True, "pressure", tokens, budget_tokens, threshold,
                        f"surface above pressure threshold ({numbers})")
    return Decision(False, None, tokens, budget_tokens, threshold, f"no pressure ({numbers})")
