"""How many of the package's modules one record passes through on its way to the sink:
what a newcomer reads to follow it. Counted as the modules with a Python frame entered
(every thread) while the kafka engine's batch of one record of a known session is folded
and written (``pipelined`` then ``complete``, as ``KafkaEngine._process`` and its drain
call them); the engine's own module makes one more."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sessionstream.core.codec import encode
from sessionstream.core.pipeline import ReaderPipeline, Record
from sessionstream.core.simulate import simulate_session
from sessionstream.streams import fold_native
from sessionstream.streams.cycle import InFlight
from sessionstream.streams.memory import MemoryDeadLetters, MemorySink
from sessionstream.streams.processor import Processor
from tests.unit.layout import modules

#: The modules a live record may enter past the engine (engine_kafka makes it 6).
WORKER_WALK = 5


def entered(run: Callable[[], Awaitable[Any]],
            counting: Callable[[], bool] | None = None) -> set[str]:
    """The package's modules with a frame entered while ``run`` runs (every thread), or
    only while ``counting()`` says so."""
    files = {str(p.resolve()): m for m, p in modules().items()}
    seen: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and (counting is None or counting()):
            module = files.get(os.path.realpath(frame.f_code.co_filename))
            if module is not None:
                seen.add(module)

    async def go() -> None:
        sys.setprofile(profile)
        threading.setprofile(profile)
        try:
            await run()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    asyncio.run(go())
    return seen


def records() -> list[Record]:
    events = simulate_session(random.Random(1), "walk", turns=2)
    return [Record("t", 0, i, e.session_id.encode(), encode(e)) for i, e in enumerate(events)]


def walk(fold: str, rows: Any = None) -> set[str]:
    recs = records()
    proc = Processor(pipeline=ReaderPipeline.default(), sink=MemorySink(), group="g",
                     dead_letters=MemoryDeadLetters(), fold=fold, rows=rows)
    asyncio.run(proc.process(recs[:-1]))  # the session is known, its row written

    async def one_record() -> None:
        _, flight = await proc.pipelined(recs[-1:], None)
        if isinstance(flight, InFlight):
            await proc.complete(flight)
    return entered(one_record)


@pytest.mark.skipif(not fold_native.available(), reason="the native extension is not built")
def test_a_live_record_walks_through_at_most_five_modules_past_the_engine() -> None:
    seen = walk("native")
    assert len(seen) <= WORKER_WALK, sorted(seen)
    assert {"sessionstream.streams.cycle", "sessionstream.streams.fold_native"} <= seen


@pytest.mark.skipif(not fold_native.available(), reason="the native extension is not built")
def test_a_sealed_live_record_walks_no_further_once_its_keys_are_known(tmp_path: Path) -> None:
    from sessionstream.governance import ContentCipher
    from sessionstream.governance.keys import FileKeyStore
    from sessionstream.governance.rows import RowCipher

    seen = walk("native", RowCipher(ContentCipher(FileKeyStore(tmp_path / "keys"), "t")))
    assert len(seen) <= WORKER_WALK + 1, sorted(seen)  # the sealing half of the fold


def test_the_walk_counts_what_the_python_fold_enters() -> None:
    """The counter sees the reference's walk through the core's pipeline."""
    seen = walk("python")
    assert {"sessionstream.streams.fold_python", "sessionstream.core.pipeline"} <= seen
