"""One racer of the two-process test: one SDK session written through the SDK API.

``python openai_agents_racer.py ROLE SESSION_ID DIR`` with the writer config in the
environment (SESSIONSTREAM_*); DIR holds the files the two processes signal with:

- ``holder``: writes the session's first item, then takes it for a second write (a
  write whose plan waits), creates
  ``DIR/held`` while it holds it, waits for ``DIR/tried``, then ends the write with its
  item;
- ``racer``: waits for ``DIR/held``, calls ``add_items`` while the holder's write is in
  flight (the overlap is forced), creates ``DIR/tried``, waits for the holder to finish
  (``DIR/holder.jsonl``), then calls ``add_items`` again.

Each writes one JSON line per attempt to ``DIR/<role>.jsonl``: the item and "ok" or the
error's class name.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from sessionstream.integrations.openai_agents import SessionstreamSession, _plan_items
from sessionstream.integrations.store import FleetStore, WriterConflict


def wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


async def attempt(session: SessionstreamSession, item: dict[str, str]) -> dict[str, object]:
    try:
        await session.add_items([item])
        return {"item": item, "outcome": "ok"}
    except WriterConflict as exc:
        return {"item": item, "outcome": type(exc).__name__}


async def main(role: str, sid: str, folder: Path) -> None:
    session = SessionstreamSession(sid, FleetStore.from_settings())
    out = folder / f"{role}.jsonl"
    lines = []
    if role == "holder":
        lines.append(await attempt(session, {"role": "user", "content": "holder 0"}))
        item = {"role": "user", "content": "holder 1"}
        items = _plan_items([item])

        def plan(s: object) -> object:
            (folder / "held").touch()  # the lease is ours while this waits
            wait_for(folder / "tried")
            return items(s)  # type: ignore[arg-type]

        session.handle.write(plan)  # type: ignore[arg-type]
        lines.append({"item": item, "outcome": "ok"})
    else:
        wait_for(folder / "held")
        lines.append(await attempt(session, {"role": "user", "content": "racer 0"}))
        (folder / "tried").touch()
        wait_for(folder / "holder.jsonl")
        lines.append(await attempt(session, {"role": "user", "content": "racer 1"}))
    session.close()
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
