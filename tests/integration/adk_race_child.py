"""One "node" of the ADK writer race: load the session, wait for the start signal, append
events until ADK says the session went stale; print what happened as one JSON line."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from google.adk.errors import StaleSessionError

from sessionstream.integrations.google_adk import EVENT_TYPES, SessionstreamSessionService
from sessionstream.integrations.store import FleetStore
from tests.contract.adk_contract import user_says


async def main(name: str, app: str, go: Path, n: int) -> None:
    svc = SessionstreamSessionService(FleetStore.from_settings(event_types=EVENT_TYPES))
    session = await svc.get_session(app_name=app, user_id="u", session_id="race")
    assert session is not None
    print(json.dumps({"ready": name}), flush=True)
    while not go.exists():
        time.sleep(0.01)
    appended, stale = 0, None
    for i in range(n):
        try:
            await svc.append_event(session, user_says(f"{name} {i}"))
        except StaleSessionError as exc:
            stale = type(exc).__name__
            break
        appended += 1
    await svc.close()
    print(json.dumps({"name": name, "appended": appended, "stale": stale}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])))
