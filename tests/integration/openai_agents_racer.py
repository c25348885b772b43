"""One racer of the two-process test: adds items to one SDK session through the SDK API.

``python openai_agents_racer.py NAME SESSION_ID GO_FILE OUT_FILE`` with the writer config in
the environment (SESSIONSTREAM_*). Waits for GO_FILE, then tries five ``add_items``; writes
one JSON line per attempt to OUT_FILE: the item and "ok" or the error's class name.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from sessionstream.integrations.openai_agents import SessionstreamSession
from sessionstream.integrations.store import FleetStore, WriterConflict


async def main(name: str, sid: str, go: Path, out: Path) -> None:
    session = SessionstreamSession(sid, FleetStore.from_settings())
    while not go.exists():
        time.sleep(0.01)
    with out.open("w") as f:
        for n in range(5):
            item = {"role": "user", "content": f"{name} {n}"}
            try:
                await session.add_items([item])
                outcome = "ok"
            except WriterConflict:
                outcome = "WriterConflict"
            f.write(json.dumps({"item": item, "outcome": outcome}) + "\n")
            f.flush()
            await asyncio.sleep(0.2)
    session.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])))
