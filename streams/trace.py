"""Per-batch stage times of a worker, for the latency bench (off unless asked for).

The ``trace_stages`` setting (a file; see docs/operations.md) makes the kafka engine
append one JSON line per batch to that file: the wall-clock time (``time.time()``,
shared by every process of the machine) at which the batch was consumed, folded (before
its Redis writes) and written (after the tenant writes), and the offset range per
partition it held. The bench joins
it with the producer's send/ack times and the feed reader's times by (partition,
offset). Only offsets and times are written: never session content.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from sessionstream.core.pipeline import Record


class StageTrace:
    def __init__(self, path: str) -> None:
        self._out: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 (process-long)
        self._batch: dict[str, object] = {}

    @classmethod
    def open(cls, path: Path | None) -> StageTrace | None:
        """A trace appending to ``path``; None (no tracing) without one."""
        return cls(str(path)) if path else None

    def consumed(self, records: Sequence[Record]) -> None:
        ranges: dict[int, list[int]] = {}
        for r in records:
            lo_hi = ranges.get(r.partition)
            if lo_hi is None:
                ranges[r.partition] = [r.offset, r.offset]
            else:
                lo_hi[0] = min(lo_hi[0], r.offset)
                lo_hi[1] = max(lo_hi[1], r.offset)
        self._batch = {"consumed": time.time(), "ranges": ranges}

    def mark(self, stage: str) -> None:
        self._batch.setdefault(stage, time.time())

    def done(self) -> None:
        if self._batch:
            self._out.write(json.dumps(self._batch) + "\n")
            self._out.flush()
        self._batch = {}
