"""The memory backend contract: one suite every ``MemoryBackend`` passes.

Subclassed once per backend: ``tests/unit/test_memory_api.py`` runs it over the in-memory
backend, ``tests/integration/test_memory_fleet.py`` over the fleet backend on the real
Kafka and Redis. A subclass provides ``make_backend``: a factory of backends on one
store (each call a new backend object, as another process would build; in memory, the
same object).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from sessionstream.core.memory import Actor, Namespace, Role, Scope
from sessionstream.core.memory.errors import MemoryRefused
from sessionstream.integrations.memory import MemoryBackend, MemoryClient, MemoryNotFound

MakeBackend = Callable[..., MemoryBackend]


def client(backend: MemoryBackend, user: str = "ada", role: Role = Role.AGENT,
           **kw: Any) -> MemoryClient:
    return MemoryClient(backend, Actor(role, f"{role.value}-1", tenant=backend.tenant,
                                       user=user, **kw))


class MemoryContract:
    """Behaviour every memory backend shares; see the module docstring."""

    @pytest.fixture
    def make_backend(self) -> MakeBackend:
        raise NotImplementedError("a backend's test class provides make_backend")

    @pytest.fixture
    def user(self) -> str:
        return f"u-{uuid.uuid4().hex[:8]}"

    def test_a_memory_written_is_found_by_another_backend_at_once(
            self, make_backend: MakeBackend, user: str) -> None:
        writer = client(make_backend(), user)
        v = writer.propose("Prefers a window seat on long flights", kind="preference",
                           sources=[("s-1", [3, 4])])
        reader = client(make_backend(), user)  # another process
        hits = reader.search("window seat")
        assert [h.version.ref for h in hits] == [v.ref]
        assert hits[0].version.sources[0].session_id == "s-1"
        assert [x.ref for x in reader.list()] == [v.ref]

    def test_a_new_value_under_an_id_keeps_history_and_a_contradiction_supersedes(
            self, make_backend: MakeBackend, user: str) -> None:
        mem = client(make_backend(), user)
        a = mem.propose("Lives in Paris", kind="fact", sources=[("s-1", [1])])
        b = mem.supersede([a.ref.id], "Lives in Lyon", kind="fact", sources=[("s-2", [7])])
        other = client(make_backend(), user)
        assert [v.content for v in other.list()] == ["Lives in Lyon"]
        why = other.explain(a.ref.id)
        assert why["versions"][0]["superseded_by"] == str(b.ref)
        assert "Paris" not in str(why)  # explain never prints content
        again = mem.propose("Lives in Lyon, near the river", kind="fact",
                            memory_id=b.ref.id)
        assert again.ref.version == 2 and again.supersedes == (b.ref,)

    def test_a_batch_equals_its_operations_one_by_one(
            self, make_backend: MakeBackend, user: str) -> None:
        mem = client(make_backend(), user)
        kept = mem.propose("Lives in Paris", kind="fact", memory_id="home",
                           namespace=mem.namespace(labels=["a"]))
        gone = mem.propose("Owns a red car", kind="fact", namespace=mem.namespace(labels=["a"]))
        a, b = mem.namespace(labels=["a"]), mem.namespace(labels=["b"])
        ops = [mem.propose_op("Prefers tea", kind="preference", namespace=a),
               mem.propose_op("Works nights", kind="fact", namespace=b),
               mem.propose_op("Lives in Lyon", kind="fact", namespace=a, memory_id="home"),
               mem.forget_op([gone.ref.id], namespace=a),
               mem.propose_op("Prefers  tea", kind="preference", namespace=a)]  # duplicate
        states = mem.apply(ops)
        assert states[0] is states[2] is states[3] is states[4]  # a's state after the batch
        other = client(make_backend(), user)  # another process reads the batch at once
        assert sorted(v.content for v in other.list(namespace=a)) == ["Lives in Lyon",
                                                                       "Prefers tea"]
        assert [v.content for v in other.list(namespace=b)] == ["Works nights"]
        assert other.show("home", namespace=a)["versions"][0]["ref"] == str(kept.ref)
        assert mem.apply([]) == []

    def test_two_writers_proposing_the_same_memory_leave_one(
            self, make_backend: MakeBackend, user: str) -> None:
        one, two = client(make_backend(), user), client(make_backend(), user)
        a = one.propose("Prefers French", kind="preference", sources=[("s-1", [3])])
        b = two.propose("Prefers  French ", kind="preference", sources=[("s-2", [9])])
        assert a.ref.id == b.ref.id
        (only,) = client(make_backend(), user).list()
        assert [s.session_id for s in only.sources] == ["s-1", "s-2"]

    def test_deleting_a_session_forgets_what_only_it_supports(
            self, make_backend: MakeBackend, user: str) -> None:
        mem = client(make_backend(), user)
        only = mem.propose("Allergic to penicillin", kind="fact", sources=[("s-del", [2])])
        both = mem.propose("Speaks Italian", kind="fact",
                           sources=[("s-del", [5]), ("s-keep", [1])])
        op = client(make_backend(), user, role=Role.OPERATOR)
        report = op.forget_session("s-del")
        assert str(only.ref) in report["forgotten"] and str(both.ref) in report["narrowed"]
        reader = client(make_backend(), user)
        assert [v.content for v in reader.list()] == ["Speaks Italian"]
        assert reader.search("penicillin") == []
        assert [s.session_id for s in reader.list()[0].sources] == ["s-keep"]
        with pytest.raises(MemoryRefused, match="deleted"):  # never cited again
            mem.propose("Allergic to penicillin", kind="fact", sources=[("s-del", [2])])

    def test_a_proposal_folded_after_the_deletion_is_forgotten_too(
            self, make_backend: MakeBackend, user: str) -> None:
        """The race: an extractor that read the session before it was deleted proposes
        into a namespace the deletion did not list; the fold forgets it."""
        backend = make_backend()
        op = client(backend, user, role=Role.OPERATOR)
        op.forget_session("s-race")  # cites nothing yet: only marks it deleted
        from sessionstream.core.memory import Draft, Extractor, Method, Propose, Source

        ns = Namespace(backend.tenant, Scope.USER, user, ("late",))
        racing = Propose(op_id=str(uuid.uuid4()), namespace=ns, time=1,
                         actor=op._ref(), memory_id="late-1",
                         draft=Draft(kind="fact", content="Has a cat named Tom",
                                     sources=(Source("s-race", (3,)),),
                                     extractor=Extractor(Method.MODEL, "x", "m", "p1")))
        backend.append(racing)  # past the writer's check, as a racing writer would be
        reader = client(make_backend(), user)
        assert reader.list(labels=("late",)) == []
        assert reader.search("cat Tom", labels=("late",)) == []

    def test_forget_by_id_and_confirmation(self, make_backend: MakeBackend, user: str
                                           ) -> None:
        mem = client(make_backend(), user)
        v = mem.propose("Always answer in formal German", kind="instruction")
        guess = client(make_backend(), user, role=Role.EXTRACTOR)
        pending = guess.propose("Wants short answers", kind="instruction",
                                sources=[("s-9", [1])])
        assert pending.status.value == "pending"
        assert [x.ref for x in mem.list()] == [v.ref]  # pending is not served
        me = client(make_backend(), user, role=Role.USER)
        assert me.confirm(str(pending.ref)).status.value == "confirmed"
        assert {x.ref for x in mem.list()} == {v.ref, pending.ref}
        assert mem.forget([v.ref.id]) == [v.ref.id]
        assert [x.ref for x in client(make_backend(), user).list()] == [pending.ref]
        with pytest.raises(MemoryNotFound):
            mem.forget(["no-such-id"])

    def test_another_user_can_neither_read_nor_forget(
            self, make_backend: MakeBackend, user: str) -> None:
        mine = client(make_backend(), user)
        v = mine.propose("Card ends in 4242", kind="fact")
        eve = client(make_backend(), "eve-" + user)
        ns = mine.namespace()
        with pytest.raises(MemoryRefused):
            eve.search("card", namespace=ns)
        with pytest.raises(MemoryRefused):
            eve.list(namespace=ns)
        with pytest.raises(MemoryRefused):
            eve.forget([v.ref.id], namespace=ns)
        with pytest.raises(MemoryRefused):
            eve.propose("Card ends in 0000", kind="fact", namespace=ns)
        assert eve.search("card") == []  # her own namespace holds nothing
        assert [x.ref for x in mine.list()] == [v.ref]

    def test_another_tenant_is_out_of_reach(self, make_backend: MakeBackend, user: str
                                            ) -> None:
        backend = make_backend()
        other = Namespace("othertenant", Scope.USER, user)
        mem = MemoryClient(backend, Actor(Role.OPERATOR, "op", tenant="othertenant"))
        with pytest.raises(MemoryRefused):
            mem.propose("x", namespace=other)
        with pytest.raises(MemoryRefused):
            mem.list(namespace=other)

    def test_a_legal_hold_refuses_forgetting_and_lineage_waits(
            self, make_backend: MakeBackend, user: str) -> None:
        from sessionstream.core.errors import LegalHold

        mem = client(make_backend(), user)
        v = mem.propose("Signed the contract on 3 May", kind="fact",
                        sources=[("s-held", [4])])
        op = client(make_backend(), user, role=Role.OPERATOR)
        op.hold("case 12", namespace=mem.namespace())
        with pytest.raises(LegalHold):
            mem.forget([v.ref.id])
        report = op.forget_session("s-held")
        assert report["held"] == [mem.namespace().key] and report["forgotten"] == []
        assert [x.ref for x in mem.list()] == [v.ref]  # kept while held
        assert op.release(namespace=mem.namespace())
        assert mem.forget([v.ref.id]) == [v.ref.id]

    def test_the_sweep_forgets_the_expired_and_what_outlived_its_kinds_retention(
            self, make_backend: MakeBackend, user: str) -> None:
        mem = client(make_backend(), user)
        mem.clock = lambda: 1_000
        old = mem.propose("Prefers tea", kind="preference")
        brief = mem.propose("Parked on level 3", kind="note", expires_at=5_000)
        mem.clock = lambda: 90_000
        kept = mem.propose("Prefers green tea", kind="preference")
        op = client(make_backend(), user, role=Role.OPERATOR)
        swept = op.sweep({"preference": 50_000}, now=100_000)
        by = {s["action"]: s["ids"] for s in swept if s["namespace"] == mem.namespace().key}
        assert by == {"retention": [old.ref.id], "expired": [brief.ref.id]}
        assert [x.ref for x in mem.list()] == [kept.ref]
