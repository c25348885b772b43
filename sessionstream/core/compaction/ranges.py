"""Which surface range to shadow, by position (seed §4.10.1, questions 2 and 3)."""

from __future__ import annotations

from dataclasses import dataclass

from sessionstream.core.compaction.policy import REASON_NO_RANGE
from sessionstream.core.messages import Kind
from sessionstream.core.session import Session
from sessionstream.core.surface import token_estimate


@dataclass(frozen=True)
class Range:
    """A run of surface nodes by position, with the seqs naming them."""

    first_position: int
    last_position: int
    seqs: tuple[int, ...]
    tokens_before: int


def select_range(
    session: Session, *, keep_recent: int = 4, min_nodes: int = 2
) -> Range | str:
    """The oldest valid run of surface nodes to shadow, or why there is none.

    Starts at position 0 and takes the longest run that ends before the last
    ``keep_recent`` nodes and before the open turn's nodes, that does not split a
    tool call from its result and holds no call still waiting for one. A run that is
    a single earlier summary is not worth compacting again.
    """
    surface = session.surface
    nodes = surface.messages()
    limit = len(nodes) - keep_recent
    turn_seq = session.open_turn_seq
    if turn_seq is not None:
        for pos, node in enumerate(nodes[:max(limit, 0)]):
            if node.kind is not Kind.SUMMARY and node.seqs[0] >= turn_seq:
                limit = pos
                break
    if limit < min_nodes:
        return (f"{REASON_NO_RANGE}: {len(nodes)} surface nodes, {keep_recent} kept recent"
                + (", open turn kept" if turn_seq is not None else "")
                + f", at least {min_nodes} needed")
    last_problem = ""
    for last in range(limit - 1, min_nodes - 2, -1):
        seqs = surface.seqs_at(0, last)
        problem = surface.check_range(seqs)
        if problem is None:
            if len(seqs) == 1 and nodes[0].kind is Kind.SUMMARY:
                break
            return Range(0, last, seqs, token_estimate(nodes[: last + 1]))
        last_problem = last_problem or problem
    return f"{REASON_NO_RANGE}: {last_problem or 'only an earlier summary is old enough'}"
