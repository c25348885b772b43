"""A resuming writer process for the race tests: ``python -m tests.integration.resumer CFG``.

Reads ``<session_id> <start_at> <repair>`` lines on stdin; for each, waits until the wall
clock reaches ``start_at`` (so that several processes resume at once), opens the session
with ``steal=True`` (``repair`` 0: ``repair=False``, the compaction agent's way: no
repairs, no end-seed, nothing proven before the first flush), appends a few events,
flushes and closes; writes one JSON line per session on stdout saying what happened.
Any exception other than the writer's named errors is
reported as ``unexpected`` (the test fails on it).
"""

from __future__ import annotations

import json
import random
import sys
import time

from sessionstream.core.events import Writer
from sessionstream.producers.errors import Fenced, ResumeRaceLost
from sessionstream.producers.writer import SessionWriter, WriterConfig


def resume_once(cfg: WriterConfig, sid: str, start_at: float,
                repair: bool = True) -> dict[str, object]:
    while time.time() < start_at:
        time.sleep(0.001)
    out: dict[str, object] = {"session_id": sid}
    try:
        w = SessionWriter.open(cfg, sid, steal=True, repair=repair)
    except ResumeRaceLost as exc:
        return {**out, "open": "ResumeRaceLost", "detail": str(exc)}
    me = Writer(w.lease.writer_id, w.epoch)
    out.update(open="ok", epoch=w.epoch, writer_id=w.lease.writer_id,
               attempts=w.start_attempts,
               lifecycle=[e.event_id for e in w.session.events if e.writer == me])
    appended: list[str] = []
    try:
        if repair:
            appended.append(w.append("turn/start", {}).event_id)
        # without repairs, writers that append different numbers of events can splice:
        # a loser's events past the winner's last seq land at the next seq
        for i in range(1 if repair else random.randint(1, 5)):
            appended.append(w.append("user/message", {"content": f"resumed {i}"}).event_id)
        w.flush(10)
        out.update(flush="ok", durable=appended, appended=appended)
        w.close(10)
    except Fenced as exc:  # at append (the lease check) or at flush (the barrier)
        out.update(flush="Fenced", not_admitted=exc.not_admitted, appended=appended)
        w.close(0)
    return out


def main() -> None:
    cfg = WriterConfig(**json.loads(sys.argv[1]))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        sid, start_at, repair = line.split()
        try:
            result = resume_once(cfg, sid, float(start_at), repair == "1")
        except Exception as exc:  # reported, the test fails on it
            result = {"session_id": sid, "unexpected": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
