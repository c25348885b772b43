"""Hypothesis properties of the memory fold over random operation logs of one namespace.

The logs mix every operation over a few ids, sessions and contents, with redelivered
records. A draft's content names the sessions it cites ("note 1 from s2", "shared 0 of
s1+s3", "explicit 2"), so whatever was derived only from a session can be found by text.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstream.core.memory import (
    ActorRef,
    Confirm,
    Confirmation,
    Draft,
    Extractor,
    Forget,
    MemoryState,
    Method,
    Namespace,
    Propose,
    Ref,
    Role,
    Scope,
    Source,
    Supersede,
    Touch,
    apply,
    dump,
    fold,
    forget_plan,
    load,
)
from sessionstream.core.memory.fold import index_digests

PROFILE = settings(max_examples=200, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NS = Namespace("default", Scope.USER, "ada")
ACTOR = ActorRef(Role.AGENT, "bot")
SESSIONS = ("s1", "s2", "s3")
IDS = ("m1", "m2", "m3", "m4")


def content_for(sessions: tuple[str, ...], k: int) -> str:
    if not sessions:
        return f"explicit {k}"
    if len(sessions) == 1:
        return f"note {k} from {sessions[0]}"
    return f"shared {k} of {'+'.join(sessions)}"


@st.composite
def drafts(draw: Any) -> Draft:
    sessions = tuple(sorted(draw(st.sets(st.sampled_from(SESSIONS), max_size=2))))
    k = draw(st.integers(0, 2))
    sources = tuple(Source(s, tuple(sorted(draw(st.sets(st.integers(0, 3), min_size=1,
                                                         max_size=2)))))
                    for s in sessions)
    extractor = (Extractor(Method.MODEL, "x", "m", "p1") if sessions and draw(st.booleans())
                 else Extractor(Method.EXPLICIT, "h"))
    return Draft(kind=draw(st.sampled_from(("preference", "fact"))),
                 content=content_for(sessions, k), sources=sources, extractor=extractor,
                 expires_at=draw(st.none() | st.integers(0, 100)))


statuses = st.sampled_from((Confirmation.ACCEPTED, Confirmation.PENDING))
ids = st.sampled_from(IDS)


@st.composite
def operations(draw: Any, op_id: str) -> Any:
    head = {"op_id": op_id, "namespace": NS, "time": draw(st.integers(0, 100)),
            "actor": ACTOR}
    which = draw(st.sampled_from(("propose", "propose", "propose", "supersede", "confirm",
                                  "forget", "forget_source", "touch")))
    if which == "propose":
        return Propose(**head, memory_id=draw(ids), draft=draw(drafts()),
                       status=draw(statuses), dedupe=draw(st.booleans()))
    if which == "supersede":
        new = draw(ids)
        targets = draw(st.lists(ids.filter(lambda i: i != new), min_size=1, max_size=2,
                                unique=True))
        return Supersede(**head, memory_id=new, targets=tuple(targets), draft=draw(drafts()),
                         status=draw(statuses))
    if which == "confirm":
        return Confirm(**head, ref=Ref(draw(ids), draw(st.integers(1, 3))),
                       accept=draw(st.booleans()))
    if which == "forget":
        return Forget(**head, memory_ids=tuple(draw(st.lists(ids, min_size=1, max_size=2,
                                                             unique=True))))
    if which == "forget_source":
        return Forget(**head, source_session=draw(st.sampled_from(SESSIONS)))
    return Touch(**head, memory_ids=(draw(ids),), expires_at=draw(st.none() | st.integers(0,
                                                                                         100)))


@st.composite
def logs(draw: Any, max_size: int = 30) -> list[Any]:
    n = draw(st.integers(0, max_size))
    out: list[Any] = []
    for i in range(n):
        if out and draw(st.integers(0, 9)) == 0:
            out.append(draw(st.sampled_from(out)))  # a redelivered record
        else:
            out.append(draw(operations(f"op-{i}")))
    return out


def check_invariants(state: MemoryState) -> None:
    for memory in state.memories.values():
        for v in memory.versions:
            if v.invalidated_at is not None:
                assert v.invalidated_at >= v.valid_from
            if v.superseded_by is not None:
                assert state.version(v.superseded_by) is not None
            assert (v.content is None) == (v.forgotten is not None) == (v.digest is None)
    assert state.by_digest == index_digests(state.memories)
    for alias, kept in state.aliases.items():
        assert kept in state.memories and alias != kept


@PROFILE
@given(logs(), st.data())
def test_incremental_fold_equals_rebuild(ops: list[Any], data: Any) -> None:
    """A state dumped (as the worker keeps it), loaded and folded on equals the fold of
    the whole log, at any split."""
    whole = fold(ops)
    check_invariants(whole)
    k = data.draw(st.integers(0, len(ops)))
    resumed = fold(ops[k:], load(json.loads(json.dumps(dump(fold(ops[:k]))))))
    assert resumed == whole
    assert dump(resumed) == dump(whole)


@PROFILE
@given(logs(), st.data())
def test_a_redelivered_record_changes_nothing(ops: list[Any], data: Any) -> None:
    state = fold(ops)
    if not ops:
        return
    op = data.draw(st.sampled_from(ops))
    once = apply(state, op)
    assert apply(once, op) is once


@PROFILE
@given(logs(), logs(max_size=10), st.sampled_from(SESSIONS))
def test_forgetting_a_session_is_complete(before: list[Any], after: list[Any],
                                          session: str) -> None:
    """After a session's deletion, nothing derived only from it is anywhere in the state
    (history, digests and later proposals included), and no live version cites it."""
    state = fold(before)
    plan = forget_plan(state, session)
    deletion = Forget(op_id="the-deletion", namespace=NS, time=50, actor=ACTOR,
                      source_session=session, reason="session deleted")
    deleted = apply(state, deletion)
    for ref in plan.forgotten:
        version = deleted.version(ref)
        assert version is not None and version.content is None
    for ref in plan.narrowed:
        version = deleted.version(ref)
        assert version is not None and version.content is not None
        assert all(s.session_id != session for s in version.sources)
    end = fold([op for op in after if op.op_id != "the-deletion"], deleted)
    text = json.dumps(dump(end), ensure_ascii=False)
    assert f"from {session}" not in text
    for memory in end.memories.values():
        for v in memory.versions:
            if v.forgotten is None:
                assert all(s.session_id != session for s in v.sources)


proposals = st.lists(st.tuples(st.sampled_from(("tea", "coffee", "cocoa")),
                               st.sets(st.sampled_from(SESSIONS), min_size=1, max_size=2),
                               statuses),
                     min_size=1, max_size=8)


def summary(state: MemoryState) -> list[tuple[Any, ...]]:
    return sorted((v.content, v.sources, v.status) for v in state.current(pending=True))


@PROFILE
@given(proposals, st.randoms(use_true_random=False))
def test_duplicates_collapse_whatever_order_the_topic_holds(
        items: list[tuple[str, set[str], Confirmation]], rnd: Any) -> None:
    """Nodes proposing the same content under their own ids leave one memory per content,
    citing every source, with the strongest status: in any order."""
    ops = [Propose(op_id=f"o{i}", namespace=NS, time=i, actor=ACTOR, memory_id=f"node-{i}",
                   draft=Draft(kind="preference", content=f"likes {c}",
                               sources=tuple(Source(s, (i,)) for s in sorted(sessions)),
                               extractor=Extractor(Method.EXPLICIT, "h")),
                   status=status)
           for i, (c, sessions, status) in enumerate(items)]
    shuffled = list(ops)
    rnd.shuffle(shuffled)
    one, two = fold(ops), fold(shuffled)
    assert summary(one) == summary(two)
    contents = [v.content for v in one.current(pending=True)]
    assert sorted(contents) == sorted({f"likes {c}" for c, _, _ in items})
    for op in ops:  # every proposer's id finds the one memory
        found = one.get(op.memory_id)
        assert found is not None and found.current.content == op.draft.content
