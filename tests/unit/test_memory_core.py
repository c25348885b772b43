"""Long-term memory's pure core: validation, the fold's rules, lineage, policy, codec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionstream.core import codec
from sessionstream.core.errors import CorruptRecord, SessionStreamError
from sessionstream.core.events import make_event
from sessionstream.core.memory import (
    DEFAULT_POLICY,
    Actor,
    ActorRef,
    Confirm,
    Confirmation,
    Draft,
    Extractor,
    Forget,
    InvalidMemory,
    InvalidPolicy,
    MemoryRefused,
    Method,
    Namespace,
    NamespaceMismatch,
    Outcome,
    Policy,
    Propose,
    Ref,
    Role,
    Scope,
    Source,
    Supersede,
    Touch,
    apply,
    derived_from,
    dump,
    explain,
    fold,
    forget_plan,
    load,
    op_from_json,
)
from sessionstream.core.memory.policy import decide, require_confirm, require_forget
from sessionstream.core.sealed import DataClass, SealedPart

NS = Namespace("default", Scope.USER, "ada", ("support",))
AGENT = ActorRef(Role.AGENT, "support-bot")
HARNESS = Extractor(Method.EXPLICIT, "harness")
MODEL = Extractor(Method.MODEL, "extractor", "m-1", "prompt-3")


def draft(content: object, *sources: tuple[str, tuple[int, ...]], kind: str = "preference",
          extractor: Extractor = HARNESS, expires_at: int | None = None) -> Draft:
    return Draft(kind=kind, content=content, sources=tuple(Source(s, q) for s, q in sources),
                 extractor=extractor, expires_at=expires_at)


_n = iter(range(10**9))


def propose(memory_id: str, d: Draft, *, time: int = 1, op_id: str | None = None,
            status: Confirmation = Confirmation.ACCEPTED, dedupe: bool = True,
            ns: Namespace = NS) -> Propose:
    return Propose(op_id=op_id or f"op-{next(_n)}", namespace=ns, time=time, actor=AGENT,
                   memory_id=memory_id, draft=d, status=status, policy="default-1",
                   dedupe=dedupe)


def forget_source(session: str, time: int = 50) -> Forget:
    return Forget(op_id=f"op-{next(_n)}", namespace=NS, time=time, actor=AGENT,
                  source_session=session, reason="session deleted")


# ------------------------------------------------------------------------------ validation


def test_every_operation_round_trips_through_json() -> None:
    d = draft({"text": "Answer in French", "lang": "fr"}, ("s1", (4, 2, 4)))
    ops = [
        propose("m1", d, status=Confirmation.PENDING, dedupe=False),
        Supersede(op_id="o2", namespace=NS, time=2, actor=AGENT, memory_id="m2",
                  targets=("m1",), draft=draft("Answer in German", ("s2", (7,)),
                                               extractor=MODEL)),
        Confirm(op_id="o3", namespace=NS, time=3, actor=ActorRef(Role.USER, "ada"),
                ref=Ref("m2", 1), accept=False),
        Forget(op_id="o4", namespace=NS, time=4, actor=AGENT, memory_ids=("m1", "m2"),
               reason="user asked"),
        forget_source("s1"),
        Touch(op_id="o6", namespace=NS, time=6, actor=AGENT, memory_ids=("m2",),
              expires_at=10_000),
    ]
    for op in ops:
        assert op_from_json(json.loads(json.dumps(op.to_json()))) == op
    assert ops[0].draft.sources == (Source("s1", (2, 4)),)  # seqs sorted, unique


@pytest.mark.parametrize(("mutate", "path", "words"), [
    (lambda o: o.pop("op_id"), "$.op_id", "missing"),
    (lambda o: o.update(extra=1), "$.extra", "unknown field"),
    (lambda o: o.update(op="remember"), "$.op", "not one of"),
    (lambda o: o.update(format_version=9), "$.format_version", "upgrade"),
    (lambda o: o.update(namespace="default/user"), "$.namespace", "tenant/scope/owner"),
    (lambda o: o.update(namespace="Bad Tenant/user/ada"), "$.namespace", "not a tenant"),
    (lambda o: o["data"]["memory"].update(kind="Pref!"), "$.data.memory.kind", "not a kind"),
    (lambda o: o["data"]["memory"].update(content=float("nan")), "$.data.memory.content",
     "no JSON form"),
    (lambda o: o["data"]["memory"].update(content=""), "$.data.memory.content", "has content"),
    (lambda o: o["data"]["memory"].update(content=[]), "$.data.memory.content", "has content"),
    (lambda o: o["data"]["memory"]["sources"][0].update(seqs=[-1]),
     "$.data.memory.sources[0].seqs[0]", "outside"),
    (lambda o: o["data"]["memory"]["sources"][0].update(seqs=[]),
     "$.data.memory.sources[0].seqs", "at least one"),
    (lambda o: o["data"]["memory"].update(sources=[]), "$.data.memory.sources",
     "at least one source"),
    (lambda o: o["data"]["memory"]["extractor"].pop("model"), "$.data.memory.extractor",
     "names its model"),
    (lambda o: o["data"].update(status="confirmed"), "$.data.status", "accepted or pending"),
    (lambda o: o["data"].update(memory_id="has space"), "$.data.memory_id", "no spaces"),
    (lambda o: o.update(time="yesterday"), "$.time", "expected an integer"),
])
def test_bad_input_is_refused_naming_what_and_where(mutate: object, path: str,
                                                    words: str) -> None:
    obj = propose("m1", draft("Answer in French", ("s1", (3,)), extractor=MODEL)).to_json()
    mutate(obj)  # type: ignore[operator]
    with pytest.raises(InvalidMemory) as err:
        op_from_json(obj)
    assert err.value.path == path
    assert words in err.value.reason
    assert isinstance(err.value, SessionStreamError)


def test_a_forget_names_ids_or_a_session_and_a_supersede_not_itself() -> None:
    base = forget_source("s1").to_json()
    base["data"]["memory_ids"] = ["m1"]
    with pytest.raises(InvalidMemory, match=r"\$\.data: a forget names memory_ids or a "
                                            r"source_session, exactly one"):
        op_from_json(base)
    sup = Supersede(op_id="o", namespace=NS, time=1, actor=AGENT, memory_id="m2",
                    targets=("m1",), draft=draft("x")).to_json()
    sup["data"]["targets"] = ["m2"]
    with pytest.raises(InvalidMemory, match="does not supersede itself"):
        op_from_json(sup)


def test_any_label_survives_the_namespace_key() -> None:
    ns = Namespace("t-1", Scope.ORG, "acme/eu~1", ("a/b", "~", "中文"))
    assert Namespace.parse(ns.key) == ns
    assert ns.key.count("/") == 5
    assert ns.within(("org", "*", "a/b"))
    assert not ns.within(("org", "acme"))
    with pytest.raises(InvalidMemory, match="control character"):
        Namespace("t", Scope.USER, "ada\n")


# ------------------------------------------------------------------------------ the fold


def test_a_new_value_under_a_key_is_a_new_version_and_history_keeps_the_old() -> None:
    s = fold([propose("m1", draft("Window seat", ("s1", (1,))), time=10, dedupe=False),
              propose("m1", draft("Aisle seat", ("s2", (5,))), time=20, dedupe=False)])
    m = s.memories["m1"]
    old, new = m.versions
    assert (old.content, old.superseded_by, old.invalidated_at) == ("Window seat",
                                                                     Ref("m1", 2), 20)
    assert (new.content, new.supersedes, new.live) == ("Aisle seat", (Ref("m1", 1),), True)
    assert [v.content for v in s.current()] == ["Aisle seat"]


def test_concurrent_duplicates_from_two_nodes_collapse_into_one_memory() -> None:
    a = propose("node-a-1", draft("Prefers French", ("s1", (3,))))
    b = propose("node-b-7", draft("Prefers  French ", ("s2", (9,))))  # spacing differs
    for first, second in ((a, b), (b, a)):
        s = fold([first, second])
        (live,) = s.current()
        assert live.sources == (Source("s1", (3,)), Source("s2", (9,)))
        assert s.resolve(second.memory_id) == first.memory_id
        assert s.get(second.memory_id) is s.get(first.memory_id)


def test_a_redelivered_or_repeated_proposal_changes_nothing() -> None:
    p = propose("m1", draft("Prefers French", ("s1", (3,))))
    s = fold([p])
    assert apply(s, p) is s  # the same record again (a producer's retry)
    again = propose("m1", draft("Prefers French", ("s1", (3,))))
    assert apply(s, again) is s  # the same content and source under a new op id


def test_keyed_stores_keep_equal_values_under_two_keys() -> None:
    s = fold([propose("k1", draft("same"), dedupe=False), propose("k2", draft("same"),
                                                                  dedupe=False)])
    assert sorted(s.memories) == ["k1", "k2"]


def test_supersede_invalidates_the_target_and_follows_a_concurrent_correction() -> None:
    s = fold([propose("m1", draft("Lives in Paris", ("s1", (1,))), time=10)])
    s = apply(s, Supersede(op_id="x1", namespace=NS, time=20, actor=AGENT, memory_id="m2",
                           targets=("m1",), draft=draft("Lives in Lyon", ("s2", (4,)))))
    # another node, not having seen m2, corrects m1 too: the newest statement wins
    s = apply(s, Supersede(op_id="x2", namespace=NS, time=15, actor=AGENT, memory_id="m3",
                           targets=("m1",), draft=draft("Lives in Nice", ("s3", (2,)))))
    assert [v.content for v in s.current()] == ["Lives in Nice"]
    m1, m2 = s.memories["m1"].current, s.memories["m2"].current
    assert m1.superseded_by == Ref("m2", 1)
    assert (m2.superseded_by, m2.invalidated_at) == (Ref("m3", 1), 20)  # clamped: skew
    assert s.memories["m3"].current.supersedes == (Ref("m2", 1),)


def test_confirmation_applies_to_the_current_version_only() -> None:
    s = fold([propose("m1", draft("Always cc legal", ("s1", (2,)), kind="instruction"),
                      status=Confirmation.PENDING)])
    assert s.current() == []
    assert [v.ref for v in s.current(pending=True)] == [Ref("m1", 1)]
    user = ActorRef(Role.USER, "ada")
    s = apply(s, Confirm(op_id="c1", namespace=NS, time=5, actor=user, ref=Ref("m1", 1)))
    cur = s.memories["m1"].current
    assert (cur.status, cur.confirmed_by, cur.confirmed_at) == (Confirmation.CONFIRMED,
                                                                user, 5)
    s = apply(s, Confirm(op_id="c2", namespace=NS, time=6, actor=user, ref=Ref("m1", 7)))
    assert s.rejections[-1].reason == "not_current"
    assert s.rejected == {"not_current": 1}


def test_a_rejected_memory_proposed_again_stays_rejected() -> None:
    s = fold([propose("m1", draft("Likes jazz", ("s1", (2,)), extractor=MODEL),
                      status=Confirmation.PENDING)])
    s = apply(s, Confirm(op_id="r", namespace=NS, time=3, actor=ActorRef(Role.USER, "ada"),
                         ref=Ref("m1", 1), accept=False))
    s = apply(s, propose("m9", draft("Likes jazz", ("s4", (8,)), extractor=MODEL)))
    assert s.current(pending=True) == []
    assert s.memories["m1"].current.status is Confirmation.REJECTED
    assert "m9" not in s.memories


def test_expiry_hides_a_memory_after_its_time_and_touch_moves_it() -> None:
    s = fold([propose("m1", draft("Short-lived", expires_at=100))])
    assert [v.ref.id for v in s.current(now=99)] == ["m1"]
    assert s.current(now=100) == []
    s = apply(s, Touch(op_id="t", namespace=NS, time=90, actor=AGENT, memory_ids=("m1",),
                       expires_at=500))
    assert [v.ref.id for v in s.current(now=400)] == ["m1"]


def test_forget_by_id_removes_the_content_of_every_version() -> None:
    s = fold([propose("m1", draft("Old address 12 Rue X"), dedupe=False),
              propose("m1", draft("New address 3 Via Y"), dedupe=False)])
    s = apply(s, Forget(op_id="f", namespace=NS, time=9, actor=AGENT, memory_ids=("m1",),
                        reason="user asked"))
    text = json.dumps(dump(s))
    assert "Rue X" not in text and "Via Y" not in text
    assert all(v.digest is None and v.forgotten is not None
               for v in s.memories["m1"].versions)
    # a key store's put after delete starts the key again
    s = apply(s, propose("m1", draft("Third address"), dedupe=False))
    assert [v.content for v in s.current()] == ["Third address"]


def test_deleting_a_session_forgets_what_only_it_supports_and_narrows_the_rest() -> None:
    s = fold([
        propose("only", draft("Allergic to peanuts", ("s1", (3,)))),
        propose("shared", draft("Vegetarian", ("s1", (4,)), ("s2", (6,)))),
        propose("hist", draft("Uses vim", ("s1", (8,))), dedupe=False),
        propose("hist", draft("Uses emacs", ("s2", (9,))), dedupe=False),
        propose("other", draft("Speaks Dutch", ("s3", (1,)))),
    ])
    plan = forget_plan(s, "s1")
    assert plan.forgotten == (Ref("hist", 1), Ref("only", 1))
    assert plan.narrowed == (Ref("shared", 1),)
    assert plan.memories == ("only",)
    assert [str(r) for r in derived_from(s, "s1")] == ["hist@1", "only@1", "shared@1"]
    after = apply(s, forget_source("s1"))
    text = json.dumps(dump(after))
    assert "peanuts" not in text and "vim" not in text  # history included
    assert [v.content for v in after.current()] == ["Uses emacs", "Speaks Dutch",
                                                    "Vegetarian"]
    assert after.memories["shared"].current.sources == (Source("s2", (6,)),)
    # a proposal citing the deleted session, folded after the deletion, cites it no more
    late = apply(after, propose("late", draft("Likes tea", ("s1", (12,)))))
    assert late.rejections[-1].reason == "deleted_source" and "late" not in late.memories
    mixed = apply(after, propose("mix", draft("Likes cocoa", ("s1", (12,)), ("s5", (1,)))))
    assert mixed.memories["mix"].current.sources == (Source("s5", (1,)),)


def test_an_operation_of_another_namespace_is_refused() -> None:
    s = fold([propose("m1", draft("x"))])
    other = Namespace("default", Scope.USER, "bob")
    with pytest.raises(NamespaceMismatch, match="default/user/bob"):
        apply(s, propose("m2", draft("y"), ns=other))


def test_explain_walks_back_to_sessions_and_seqs_without_content() -> None:
    s = fold([propose("m1", draft("Prefers French", ("s1", (3, 4)), extractor=MODEL)),
              propose("alias", draft("Prefers French", ("s2", (1,)), extractor=MODEL))])
    out = explain(s, "alias")
    assert out is not None and out["id"] == "m1" and out["aliases"] == ["alias"]
    (v,) = out["versions"]
    assert v["sources"] == [{"session_id": "s1", "seqs": [3, 4]},
                            {"session_id": "s2", "seqs": [1]}]
    assert v["extractor"]["prompt_version"] == "prompt-3"
    assert "French" not in json.dumps(out)
    assert explain(s, "nope") is None


def test_a_dumped_state_loads_equal() -> None:
    s = fold([propose("m1", draft({"a": [1, 2]}, ("s1", (3,)))), forget_source("s9")])
    assert load(json.loads(json.dumps(dump(s)))) == s


# ------------------------------------------------------------------------------ policy


ADA = Actor(Role.AGENT, "support-bot", user="ada", agent="support-bot", org="acme")


@pytest.mark.parametrize(("actor", "ns", "kind", "outcome"), [
    (ADA, NS, "preference", Outcome.ACCEPT),
    (Actor(Role.EXTRACTOR, "x", user="ada"), NS, "preference", Outcome.ACCEPT),
    (Actor(Role.EXTRACTOR, "x", user="ada"), NS, "instruction", Outcome.CONFIRM),
    (ADA, Namespace("default", Scope.USER, "bob"), "preference", Outcome.REFUSE),
    (Actor(Role.AGENT, "b", tenant="other", user="ada"), NS, "fact", Outcome.REFUSE),
    (ADA, Namespace("default", Scope.ORG, "acme"), "fact", Outcome.CONFIRM),
    (Actor(Role.OPERATOR, "root"), Namespace("default", Scope.ORG, "acme"), "fact",
     Outcome.ACCEPT),
    (Actor(Role.EXTRACTOR, "x", agent="support-bot"),
     Namespace("default", Scope.AGENT, "support-bot"), "fact", Outcome.CONFIRM),
])
def test_the_default_policy(actor: Actor, ns: Namespace, kind: str, outcome: Outcome) -> None:
    assert decide(DEFAULT_POLICY, actor, ns, kind).outcome is outcome


def test_confirming_and_forgetting_need_a_governor_of_the_namespace() -> None:
    require_confirm(DEFAULT_POLICY, Actor(Role.USER, "ada", user="ada"), NS)
    with pytest.raises(MemoryRefused, match="only operator, user may"):
        require_confirm(DEFAULT_POLICY, ADA, NS)
    require_forget(DEFAULT_POLICY, ADA, NS)
    with pytest.raises(MemoryRefused, match="acts for 'ada'"):
        require_forget(DEFAULT_POLICY, ADA, Namespace("default", Scope.USER, "bob"))


def test_a_policy_is_json_and_bad_policies_name_the_path() -> None:
    assert Policy.from_json(json.loads(json.dumps(DEFAULT_POLICY.to_json()))) == DEFAULT_POLICY
    bad = DEFAULT_POLICY.to_json()
    bad["rules"][2]["role"] = "robot"
    with pytest.raises(InvalidPolicy, match=r"\$\.rules\[2\]\.role: 'robot' is not one of"):
        Policy.from_json(bad)
    with pytest.raises(InvalidPolicy, match=r"\$\.version"):
        Policy.from_json({"rules": []})


# ------------------------------------------------------------------------------ codec


def test_memory_records_round_trip_through_avro_with_sealed_parts() -> None:
    op = propose("m1", draft({"text": "x", "big": 2**63 - 1}, ("s1", (3,)), extractor=MODEL))
    part = SealedPart(DataClass.SURFACE, "memory:m1", op.op_id, ("/memory/content",),
                      b"\x01" * 12, b"\x02" * 40)
    payload = codec.memory_codec().encode(op.to_json(), [part])
    assert payload[:2] == codec.MAGIC
    record, sealed = codec.memory_codec().decode(payload)
    assert op_from_json(record) == op
    assert sealed == (part,)


def test_an_unreadable_memory_record_is_a_corrupt_record() -> None:
    payload = codec.memory_codec().encode(propose("m1", draft("x")).to_json())
    with pytest.raises(CorruptRecord, match="trailing bytes"):
        codec.memory_codec().decode(payload + b"\x00")
    with pytest.raises(CorruptRecord, match="unknown memory schema fingerprint"):
        codec.memory_codec().decode(payload[:2] + b"\x00" * 8 + payload[10:])
    event_like = codec.encode(make_event(session_id="s", seq=0, event_id="e", time=1,
                                         type="turn/start", data={}))
    with pytest.raises(CorruptRecord):  # a session event is not a memory operation
        codec.memory_codec().decode(event_like)


def test_the_documented_memory_fingerprint_is_the_shipped_schema() -> None:
    readme = Path(codec.SCHEMA_DIR, "README.md").read_text(encoding="utf-8")
    (path,) = codec.memory_schema_files()
    version = codec.load_schema(json.loads(path.read_text(encoding="utf-8")))
    assert f"| `{path.name}` | `{version.fingerprint.hex()}` |" in readme
    assert codec.schema_files()[-1].name.startswith("session_event")
