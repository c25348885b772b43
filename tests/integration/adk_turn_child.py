"""One request of a stateless tier through ADK: build the session service over the fleet,
run one turn — ``get_session``, the user's message, the agent's answer — and exit without
closing anything (as a request handler does). Turn 0 creates the session first.

``python -m tests.integration.adk_turn_child APP SESSION_ID N`` with the SESSIONSTREAM_*
settings in the environment; prints how many events the turn found, as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys

from sessionstream.integrations.google_adk import SessionstreamSessionService
from sessionstream.integrations.store import FleetStore
from tests.contract.adk_contract import agent_says, user_says


async def main(app: str, sid: str, n: int) -> None:
    svc = SessionstreamSessionService(FleetStore.from_settings())
    if n == 0:
        await svc.create_session(app_name=app, user_id="u", session_id=sid)
    session = await svc.get_session(app_name=app, user_id="u", session_id=sid)
    assert session is not None
    found = len(session.events)
    await svc.append_event(session, user_says(f"question {n}"))
    await svc.append_event(session, agent_says(f"answer {n}"))
    print(json.dumps({"found": found}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
