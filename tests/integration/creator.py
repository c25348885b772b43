"""A creating writer that dies (or pauses) inside create(), for the crash tests.

``python -m tests.integration.creator CFG SESSION_ID STEP ACTION``: runs
``SessionWriter.create`` and, when the start reaches ``STEP`` (``leased``, ``produced``
or ``acknowledged``), ``exit`` kills the process there (``os._exit``: no flush, no
release, like a killed container) and ``stop`` pauses it (SIGSTOP, a zombie until the
test continues it). A process that survives prints one JSON line saying what create()
returned or raised. CFG is the WriterConfig as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from sessionstream.producers.errors import ProducerError
from sessionstream.producers.writer import SessionWriter, WriterConfig


def main() -> None:
    raw = json.loads(sys.argv[1])
    cfg = WriterConfig(**raw)
    sid, step, action = sys.argv[2], sys.argv[3], sys.argv[4]

    def fault(at: str) -> None:
        if at != step:
            return
        if action == "exit":
            os._exit(137)
        os.kill(os.getpid(), signal.SIGSTOP)  # the test sends SIGCONT

    try:
        w = SessionWriter.create(cfg, sid, writer_id="first-attempt", fault=fault)
    except ProducerError as exc:
        print(json.dumps({"create": type(exc).__name__, "detail": str(exc)}), flush=True)
        return
    out = {"create": "ok", "epoch": w.epoch, "start": w.session.events[0].event_id}
    w.abandon()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
