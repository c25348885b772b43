"""The six questions of seed §4.10.1, answered per compaction attempt from a log.

Pure: :func:`compaction_report` takes a session's admitted events (a JSONL file or a
live read-back) and returns one :class:`AttemptReport` per ``compaction/start``, each
naming the seqs of its evidence (start, summary, replace, end), so every answer can be
checked against the events themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.events import Event, SurfaceOp


@dataclass
class AttemptReport:
    """One attempt: its evidence seqs and the answer to each of the six questions."""

    compaction_id: str
    start_seq: int
    start: dict[str, Any]
    summary_seq: int | None = None
    summary: dict[str, Any] | None = None
    replace_seq: int | None = None
    end_seq: int | None = None
    end: dict[str, Any] | None = None
    foreign: list[int] = field(default_factory=list)  # seqs by other writers inside it
    nodes_after: list[int] = field(default_factory=list)  # surface nodes kept after the run

    @property
    def outcome(self) -> str:
        return str(self.end["outcome"]) if self.end else "open"

    def answers(self) -> dict[str, Any]:
        s, st = self.summary or {}, self.start
        why = {"trigger": st.get("trigger"), "tokens": st.get("tokens"),
               "budget_tokens": st.get("budget_tokens"), "reason": st.get("reason")}
        rng = None if not s else {"first_position": s["first_position"],
                                  "last_position": s["last_position"]}
        shadowed = None if not s else {
            "seqs": list(s["shadowed_seqs"]), "nodes": len(s["shadowed_seqs"]),
            "tokens_before": s["tokens_before"], "tokens_after": s["tokens_after"],
            "surface_tokens_before": s.get("surface_tokens_before"),
            "surface_tokens_after": s.get("surface_tokens_after")}
        if self.outcome == "completed":
            surface = {"state": "changed", "by_replace_seq": self.replace_seq}
        elif self.outcome == "open":
            surface = {"state": "unchanged", "detail": "attempt still open (or crashed): "
                       "recovery closes an unmatched compaction/start as abandoned"}
        else:
            surface = {"state": "unchanged", "outcome": self.outcome,
                       "reason": (self.end or {}).get("reason")}
        return {
            "1_why": why,
            "2_range": rng,
            "3_shadowed": shadowed,
            "4_summarizer": s.get("summarizer") if s else None,
            "5_surface_after": surface,
            "6_meanwhile": {"nodes_kept_after_run": self.nodes_after,
                            "events_by_other_writers_inside": self.foreign},
        }

    def to_json(self) -> dict[str, Any]:
        s = self.summary or {}
        return {"compaction_id": self.compaction_id, "outcome": self.outcome,
                "evidence": {"start": self.start_seq, "summary": self.summary_seq,
                             "replace": self.replace_seq, "end": self.end_seq},
                "questions": self.answers(), "gate": s.get("gate"), "kept": s.get("kept")}

    def lines(self) -> list[str]:
        a = self.answers()
        why, rng, sh, sm = a["1_why"], a["2_range"], a["3_shadowed"], a["4_summarizer"]
        end = f"..{self.end_seq}" if self.end_seq is not None else ".."
        out = [f"compaction {self.compaction_id} (seqs {self.start_seq}{end}): {self.outcome}",
               f"  1. why:        {why['trigger']}: {why['reason'] or '-'}"]
        out.append("  2. range:      " + (f"surface positions {rng['first_position']}.."
                                          f"{rng['last_position']}" if rng else "none chosen"))
        out.append("  3. shadowed:   " + (
            f"{sh['nodes']} nodes, seqs {_seqs(sh['seqs'])}; tokens {sh['tokens_before']} -> "
            f"{sh['tokens_after']}" + (f" (surface {sh['surface_tokens_before']} -> "
                                       f"{sh['surface_tokens_after']})"
                                       if sh["surface_tokens_before"] is not None else "")
            if sh else "nothing"))
        out.append("  4. summarizer: " + (f"{sm['provider']} / {sm['model']} {sm['config']}"
                                          if sm else "-"))
        sf = a["5_surface_after"]
        out.append("  5. surface:    " + (
            f"changed by the replace at seq {sf['by_replace_seq']}" if sf["state"] == "changed"
            else f"unchanged ({sf.get('outcome', 'open')}: "
                 f"{sf.get('reason') or sf.get('detail')})"))
        mw = a["6_meanwhile"]
        out.append(f"  6. meanwhile:  {len(mw['nodes_kept_after_run'])} surface node(s) after "
                   f"the run kept; {len(mw['events_by_other_writers_inside'])} event(s) by "
                   "other writers inside the attempt")
        gate = (self.summary or {}).get("gate")
        if gate:
            cats = ", ".join(f"{k} {v['kept']}/{v['total']}"
                             for k, v in gate["categories"].items())
            out.append(f"  gate:          {cats}")
        return out


def _seqs(seqs: Sequence[int]) -> str:
    if len(seqs) > 8:
        return f"{', '.join(map(str, seqs[:4]))} … {', '.join(map(str, seqs[-2:]))}"
    return ", ".join(map(str, seqs))


def compaction_report(events: Sequence[Event]) -> list[AttemptReport]:
    """One report per compaction attempt in ``events`` (a session's log, in seq order)."""
    from sessionstream.core.session import Session

    attempts: list[AttemptReport] = []
    current: AttemptReport | None = None
    writer: tuple[str, int] | None = None
    for e in events:
        if e.type == "compaction/start":
            current = AttemptReport(e.data["compaction_id"], e.seq, dict(e.data))
            attempts.append(current)
            writer = (e.writer.id, e.writer.epoch)
            continue
        if current is None:
            continue
        if e.type == "compaction/summary":
            current.summary_seq, current.summary = e.seq, _plain(e.data)
        elif e.type == "user/message" and e.surface_op is SurfaceOp.REPLACE:
            current.replace_seq = e.seq
        elif e.type == "compaction/end":
            current.end_seq, current.end = e.seq, dict(e.data)
            if current.summary is not None and current.outcome == "completed":
                surface = Session.from_events(events[: e.seq + 1]).surface
                pos = surface.position_of(current.replace_seq) \
                    if current.replace_seq is not None else None
                if pos is not None:
                    current.nodes_after = list(surface.seqs_at(pos + 1, len(surface) - 1))
            current = None
        elif (e.writer.id, e.writer.epoch) != writer:
            current.foreign.append(e.seq)
    return attempts


def _plain(value: Any) -> Any:
    from sessionstream.core.jsonvalue import thaw

    return thaw(value)
