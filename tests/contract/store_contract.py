"""The integration store contract: one suite every backend of ``integrations/store.py`` passes.

Subclassed once per backend: ``tests/unit/test_store_local.py`` runs it over the memory and
JSONL stores, ``tests/integration/test_store_fleet.py`` over the fleet store on the real
Kafka and Redis. A subclass provides ``make_store``: a factory of stores on one backend
(each call a new store object, as another process would build; for memory, the same
process's store).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from sessionstream.core.catalog import EventType, F, default_catalog
from sessionstream.core.compaction import Budget, plan_compaction
from sessionstream.core.errors import InvariantViolation, SchemaViolation
from sessionstream.core.events import Draft, Event
from sessionstream.core.session import Session
from sessionstream.integrations.store import SessionStore, StoreError, plugin_type
from sessionstream.integrations.views import InlineView, ViewState

NOTE = plugin_type("contracttest/note", {"text": F("str")}, description="a test record")


class NotesView(InlineView):
    """A test view: the notes' texts as entries, the events folded as a field."""

    name = "contracttest/notes"

    def fold(self, state: ViewState, event: Event) -> None:
        if event.type == NOTE.name:
            state.push(event.data["text"])
        state.set("events", event.seq + 1)

MakeStore = Callable[..., SessionStore]


def _texts(store: SessionStore, sid: str) -> list[str]:
    s = store.open(sid).session()
    assert s is not None
    return [str(m.content) for m in s.derive_messages()]


def _turn(n: int) -> list[Draft]:
    return [Draft("turn/start", {}), Draft("user/message", {"content": f"question {n}"}),
            Draft("step/start", {}), Draft("assistant/message", {"content": f"answer {n}"}),
            Draft("step/end", {}), Draft("turn/end", {"reason": "completed"})]


class StoreContract:
    """Behaviour every store backend shares; see the module docstring."""

    @pytest.fixture
    def make_store(self) -> MakeStore:
        raise NotImplementedError("a backend's test class provides make_store")

    @pytest.fixture
    def sid(self, request: pytest.FixtureRequest) -> str:
        import uuid

        return f"contract-{uuid.uuid4().hex[:12]}"

    def _store(self, make_store: MakeStore, types: Iterable[EventType] = (NOTE,)
               ) -> SessionStore:
        return make_store(event_types=list(types))

    def test_an_unknown_id_has_no_events_until_the_first_append_creates_it(
            self, make_store: MakeStore, sid: str) -> None:
        store = self._store(make_store)
        h = store.open(sid)
        assert h.events() == () and h.session() is None and not h.exists()
        e = h.append("user/message", {"content": "hello"})
        assert e.seq == 1
        assert [x.type for x in h.events()] == ["session/start", "user/message"]
        store.close()

    def test_flushed_events_are_what_another_store_reads_back(
            self, make_store: MakeStore, sid: str) -> None:
        a = self._store(make_store)
        a.open(sid).append_many(_turn(1))
        a.open(sid).flush()
        b = self._store(make_store)
        assert [e.event_id for e in b.open(sid).events()] == [
            e.event_id for e in a.open(sid).events()]
        assert _texts(b, sid) == ["question 1", "answer 1"]
        a.close()
        b.close()

    def test_a_refused_event_raises_the_rule_and_changes_nothing(
            self, make_store: MakeStore, sid: str) -> None:
        store = self._store(make_store)
        h = store.open(sid)
        h.append("user/message", {"content": "hi"})
        before = h.events()
        with pytest.raises(InvariantViolation) as info:
            h.append("assistant/message", {"content": "no step is open"})
        assert info.value.rule == "outside-turn"
        with pytest.raises(SchemaViolation):
            h.append("contracttest/note", {"text": 3})
        assert h.events() == before
        h.append("user/message", {"content": "still writable"})
        h.flush()
        assert _texts(store, sid) == ["hi", "still writable"]
        store.close()

    def test_a_plugin_record_is_kept_ignorable_and_skipped_by_a_reader_without_the_plugin(
            self, make_store: MakeStore, sid: str) -> None:
        store = self._store(make_store)
        h = store.open(sid)
        h.append("user/message", {"content": "hi"})
        note = h.append("contracttest/note", {"text": "framework record"})
        h.flush()
        assert note.ignorable and note.data["text"] == "framework record"
        events = self._store(make_store).open(sid).events()
        assert events[-1].type == "contracttest/note"
        plain = Session.from_events(events, catalog=default_catalog())  # no plugin
        assert [str(m.content) for m in plain.derive_messages()] == ["hi"]
        store.close()

    def test_a_plugin_type_must_be_ignorable_and_outside_the_core_namespaces(
            self, make_store: MakeStore) -> None:
        with pytest.raises(StoreError, match="must be ignorable"):
            make_store(event_types=[EventType("contracttest/strict")])
        with pytest.raises(Exception, match="reserved for core types"):
            make_store(event_types=[plugin_type("user/extra")])

    def test_one_id_gives_one_handle_per_store(self, make_store: MakeStore, sid: str) -> None:
        store = self._store(make_store)
        assert store.open(sid) is store.open(sid)
        with pytest.raises(StoreError, match="non-empty string"):
            store.open("")
        store.close()

    def test_release_then_append_continues_the_same_history(
            self, make_store: MakeStore, sid: str) -> None:
        store = self._store(make_store)
        h = store.open(sid)
        h.append_many(_turn(1))
        h.release()
        h.append_many(_turn(2))
        h.flush()
        seqs = [e.seq for e in h.events()]
        assert seqs == list(range(len(seqs)))
        assert _texts(self._store(make_store), sid) == [
            "question 1", "answer 1", "question 2", "answer 2"]
        store.close()

    def test_read_views_reads_each_view_as_view_does_in_order(
            self, make_store: MakeStore, sid: str) -> None:
        store = self._store(make_store)
        store.register((), [NotesView()])
        for n, s in ((40, f"{sid}-a"), (3, f"{sid}-b")):
            store.open(s).append_many([Draft(NOTE.name, {"text": f"{s} {i}"})
                                       for i in range(n)])
        reader = self._store(make_store)  # another process: the views from where they are
        reader.register((), [NotesView()])
        reads = [(f"{sid}-b", NotesView.name, 2), (f"{sid}-none", NotesView.name, None),
                 (f"{sid}-a", NotesView.name, 0), (f"{sid}-a", NotesView.name, None)]
        got = reader.read_views(reads)
        assert [(g.seq, g.count, list(g.entries), g.fields) for g in got] == [
            (3, 3, [f"{sid}-b 1", f"{sid}-b 2"], {"events": 4}), (-1, 0, [], {}),
            (40, 40, [], {"events": 41}),
            (40, 40, [f"{sid}-a {i}" for i in range(40)], {"events": 41})]
        assert got == [reader.open(s).view(name, last) for s, name, last in reads]
        with pytest.raises(StoreError, match="no inline view"):
            reader.read_views([(f"{sid}-a", "contracttest/other", None)])
        store.close()
        reader.close()

    def test_audited_compaction_shadows_history_and_destroys_none(
            self, make_store: MakeStore, sid: str) -> None:
        store = self._store(make_store)
        h = store.open(sid)
        for n in range(6):
            h.append_many(_turn(n))
        h.flush()
        session = h.session()
        assert session is not None
        drafts = plan_compaction(session, trigger="manual",
                                 budget=Budget(tokens=10_000, keep_recent=2, min_nodes=2))
        assert [d.type for d in drafts][-1] == "compaction/end"
        h.append_many(drafts)
        h.flush()
        events = self._store(make_store).open(sid).events()
        end = [e for e in events if e.type == "compaction/end"][-1]
        assert end.data["outcome"] == "completed"
        # every original message is still in the log; the surface holds the summary
        originals = [e.data["content"] for e in events
                     if e.type in ("user/message", "assistant/message")
                     and e.surface_op.value == "append"]
        assert originals == [x for n in range(6) for x in (f"question {n}", f"answer {n}")]
        texts = _texts(self._store(make_store), sid)
        assert len(texts) < 12 and texts[-2:] == ["question 5", "answer 5"]
        store.close()
