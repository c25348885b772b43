"""One side of the forced ADK overlap: ``python -m tests.integration.adk_overlap_child
ROLE APP DIR`` (the session ``s`` of user ``u`` exists; DIR holds the signal files).

- ``holder``: loads the session, waits for ``DIR/loaded``, then appends one event whose
  write, once it holds the session, creates ``DIR/held`` and waits for ``DIR/tried``;
- ``racer``: loads the session, creates ``DIR/loaded``, waits for ``DIR/held`` and
  appends while the holder's write is in flight (the overlap is forced: its write meets
  the held session, which creates ``DIR/tried``), then reloads and appends again.

Each prints its attempts' outcomes as one JSON line ("ok" or the error's class name).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.adk.errors import StaleSessionError

from sessionstream.integrations.google_adk import SessionstreamSessionService
from sessionstream.integrations.store import FleetStore, SessionHandle, WriterConflict
from tests.contract.adk_contract import user_says


def wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


class Holder(SessionstreamSessionService):
    """Holds the session inside its write until the racer has met it."""

    def __init__(self, store: FleetStore, folder: Path) -> None:
        super().__init__(store)
        self.folder = folder

    def _write(self, handle: SessionHandle, plan: Callable[..., Any],  # type: ignore[override]
               wait_s: float) -> Any:
        def held(cs: Any) -> Any:
            (self.folder / "held").touch()  # the session is ours while this waits
            wait_for(self.folder / "tried")
            return plan(cs)

        return super()._write(handle, held, wait_s)


class Racer(SessionstreamSessionService):
    """Tells the holder when its write met the held session."""

    def __init__(self, store: FleetStore, folder: Path) -> None:
        super().__init__(store)
        self.folder = folder

    def _write(self, handle: SessionHandle, plan: Callable[..., Any],  # type: ignore[override]
               wait_s: float) -> Any:
        write = handle.write

        def told(p: Any, **kw: Any) -> Any:
            try:
                return write(p, **kw)
            except WriterConflict:
                (self.folder / "tried").touch()
                raise

        handle.write = told  # type: ignore[method-assign]
        try:
            return super()._write(handle, plan, wait_s)
        finally:
            del handle.write


async def attempt(svc: SessionstreamSessionService, session: Any, text: str) -> str:
    try:
        await svc.append_event(session, user_says(text))
        return "ok"
    except StaleSessionError as exc:
        return type(exc).__name__


async def main(role: str, app: str, folder: Path) -> None:
    store = FleetStore.from_settings()
    svc = Holder(store, folder) if role == "holder" else Racer(store, folder)
    session = await svc.get_session(app_name=app, user_id="u", session_id="s")
    assert session is not None
    out = []
    if role == "holder":
        wait_for(folder / "loaded")
        out.append(await attempt(svc, session, "holder"))
    else:
        (folder / "loaded").touch()
        wait_for(folder / "held")
        out.append(await attempt(svc, session, "racer, overlapping"))
        session = await svc.get_session(app_name=app, user_id="u", session_id="s")
        out.append(await attempt(svc, session, "racer, reloaded"))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
