"""Replay reads the row keys of folded sessions ahead of its flush, in batches: the
sessions folded while the key thread works share its next batch (one sync)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from sessionstream.core.privacy import DataClass, KeyState
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore
from sessionstream.governance.rows import RowCipher
from sessionstream.streams.replay_read import KeysAhead

UNITS = ["surface", "turns", "business"]


def test_sessions_folded_while_the_key_thread_works_share_one_batch(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys")
    rows = RowCipher(ContentCipher(store, "t"))
    batches: list[list[tuple[str, DataClass]]] = []
    busy, release = threading.Event(), threading.Event()
    real = store.data_keys

    def noted(tenant: str, pairs: Any) -> Any:
        pairs = list(pairs)
        batches.append(pairs)
        if len(batches) == 1:  # the first batch holds the thread until told
            busy.set()
            release.wait(10)
        return real(tenant, pairs)

    store.data_keys = noted  # type: ignore[method-assign]
    ahead = KeysAhead(rows, UNITS)
    classes = ahead._classes
    assert classes  # the units' rows are sealed with some classes
    ahead.add(["s1"])
    assert busy.wait(10)
    ahead.add(["s2", "s3"])
    ahead.add(["s3", "s4"])  # s3 asked once between two flushes
    release.set()
    asyncio.run(ahead.drain())
    ahead.close()
    assert [sorted({s for s, _ in b}) for b in batches] == [["s1"], ["s2", "s3", "s4"]]
    for sid in ("s1", "s2", "s3", "s4"):
        for cls in classes:
            assert FileKeyStore(tmp_path / "keys").lookup("t", sid, cls).state is KeyState.ACTIVE
