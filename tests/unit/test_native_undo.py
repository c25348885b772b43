"""Undoing a batch's native fold (``Folder.restore``) puts the session back exactly.

The extension undoes a batch with a checkpoint (the session without its growing
collections, their lengths, and the todo items the batch overwrote; native/src/undo.rs),
not a clone of the whole state. Here a custom Python unit fails on a chosen event of a
batch whose earlier events overwrite and update todo items, add new ones, close turns
and record tool results, goals and plans: the extension must restore the session as it
was before the batch and hand it to the Python processor, and every Redis field must
come out as the Python fold's (which quarantines at the same event).
"""

from __future__ import annotations

import random
from typing import ClassVar

import pytest

from sessionstream.core.events import Event, make_event
from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.projections import Registry, default_units
from sessionstream.core.simulate import simulate_session
from sessionstream.streams import fold_native
from tests.unit.test_native_fold import Counting, _assert_same, _records, _run

if not fold_native.available():
    pytest.skip("the native extension is not built", allow_module_level=True)


class FailsOn(Counting):
    """A custom Python unit that fails on the events of ``BAD`` (a unit bug)."""

    key = "fails_on"
    types = None  # every event: every batch runs it
    BAD: ClassVar[set[str]] = set()

    def apply(self, state: int, event: Event) -> int:
        if event.event_id in self.BAD:
            raise RuntimeError("unit bug")
        return state + 1


def _tail(rng: random.Random, log: list[Event], n: int) -> list[Event]:
    """Events that overwrite, update and add todo items, set goals and plans."""
    ids = sorted({e.data["id"] for e in log if e.type == "todo/add"})
    out: list[Event] = []
    last = log[-1]
    for i in range(n):
        kind = rng.choice(["overwrite", "update", "add", "goal", "plan"])
        tid = rng.choice(ids)
        t, d = {
            "overwrite": ("todo/add", {"id": tid, "text": f"again {i}", "status": "in_progress"}),
            "update": ("todo/update", {"id": tid, "status": rng.choice(["pending", "done"])}),
            "add": ("todo/add", {"id": f"new{i}", "text": f"new {i}"}),
            "goal": ("goal/set", {"goal": f"goal {i}"}),
            "plan": ("plan/set", {"steps": [f"s{i}", "t"]}),
        }[kind]
        prev = out[-1] if out else last
        out.append(make_event(session_id=last.session_id, seq=prev.seq + 1,
                              event_id=f"tail-{i}", time=prev.time + 1, type=t, data=d,
                              writer=last.writer, prev_event_id=prev.event_id))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_a_failed_batch_is_undone_exactly_and_folds_as_in_python(seed: int) -> None:
    rng = random.Random(seed)
    log = simulate_session(rng, f"u{seed}", turns=6, compact_every=2, failures=0.2)
    log += _tail(rng, log, 30)
    # fail somewhere in the last third: earlier batches fold natively and are written
    FailsOn.BAD = {rng.choice(log[2 * len(log) // 3:]).event_id}
    pipeline = ReaderPipeline(Registry([*default_units(), FailsOn()]),
                              ReaderPipeline.default().catalog)
    records = _records([(e, e.session_id) for e in log], 1)
    sizes = [rng.randint(5, 40) for _ in range(6)]
    flushes = set(rng.sample(range(12), 4))
    py_sink, na_sink, py_dlq, na_dlq = _run(records, sizes, flushes, pipeline)
    _assert_same(py_sink, na_sink, py_dlq, na_dlq)
    assert '"projection_error"' in na_sink.hashes[(1, f"u{seed}")]["meta"]
