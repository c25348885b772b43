"""Compaction: replace a run of the surface with a summary, never rewrite history (seed §4.10).

One module per job:

=================  ==========================================================================
``policy``         whether to compact now and why (:func:`should_compact`, :class:`Budget`)
``ranges``         which run of surface positions (:func:`select_range`)
``pruning``        tool results cut to head/tail + reference before summarizing (§4.10.2)
``facts``          what the summary must keep, unfolded to the original events
``summarizer``     the summarizer protocol, its input, the offline summarizer
``gate``           the quality gate, category by category, no invented facts (§4.10.3)
``exposure``       the gate's default exposure check: no raw-only content on the surface
``lifecycle``      the attempt and the drafts to append (:func:`plan_compaction`)
``report``         the six questions of §4.10.1 answered from a log, per attempt
=================  ==========================================================================

The six questions of seed §4.10.1, answered by the events themselves:

1. *Why was it triggered?* ``compaction/start.trigger`` is ``pressure`` (surface tokens
   above ``pressure × budget``), ``overflow`` (above the budget, or a provider refused the
   context) or ``manual`` (an operator's command); ``tokens``, ``budget_tokens`` and
   ``reason`` carry the numbers behind it (:class:`Decision`).
2. *Which surface range?* Positions ``first_position..last_position`` of the surface as
   it was when the summary was committed — the oldest contiguous run that leaves the
   last ``keep_recent`` nodes and the open turn untouched, never splits a tool call from
   its result and never holds a call still waiting for one (:meth:`Surface.check_range`).
3. *Which nodes, how many tokens?* ``shadowed_seqs``; ``tokens_before`` / ``tokens_after``.
4. *Which provider / model / config?* ``compaction/summary.summarizer``.
5. *The surface after a failure or a partial commit?* Unchanged: only the replace
   ``user/message`` changes it, appended only after the gate passed.
6. *Messages arriving while summarizing?* Kept: the replace is checked at append time
   against the surface as it is then (:func:`commit_drafts`).

Every name below is importable from ``sessionstream.core.compaction``.
"""

from sessionstream.core.compaction.facts import (
    CLOSED_TASK_STATUSES,
    NO_RESULT,
    CallOutcome,
    Evidence,
    Facts,
    OpenTask,
    commitments,
    gather_facts,
    looks_like_correction,
)
from sessionstream.core.compaction.gate import (
    CATEGORIES,
    Category,
    ExposureCheck,
    GateReport,
    check_summary,
    gate,
    invented_facts,
)
from sessionstream.core.compaction.lifecycle import (
    Attempt,
    attempt_compaction,
    commit_drafts,
    compact_session,
    plan_compaction,
)
from sessionstream.core.compaction.policy import (
    DEFAULT_BUDGET,
    REASON_NO_RANGE,
    REASON_QUALITY,
    REASON_RANGE_CHANGED,
    REASON_SUMMARIZER,
    Budget,
    Decision,
    should_compact,
)
from sessionstream.core.compaction.pruning import Pruned, prune_message
from sessionstream.core.compaction.ranges import Range, select_range
from sessionstream.core.compaction.summarizer import (
    OfflineSummarizer,
    Summarizer,
    SummaryRequest,
    build_request,
)

__all__ = [
    "CATEGORIES",
    "CLOSED_TASK_STATUSES",
    "DEFAULT_BUDGET",
    "NO_RESULT",
    "REASON_NO_RANGE",
    "REASON_QUALITY",
    "REASON_RANGE_CHANGED",
    "REASON_SUMMARIZER",
    "Attempt",
    "Budget",
    "CallOutcome",
    "Category",
    "Decision",
    "Evidence",
    "ExposureCheck",
    "Facts",
    "GateReport",
    "OfflineSummarizer",
    "OpenTask",
    "Pruned",
    "Range",
    "Summarizer",
    "SummaryRequest",
    "attempt_compaction",
    "build_request",
    "check_summary",
    "commit_drafts",
    "commitments",
    "compact_session",
    "gate",
    "gather_facts",
    "invented_facts",
    "looks_like_correction",
    "plan_compaction",
    "prune_message",
    "select_range",
    "should_compact",
]
