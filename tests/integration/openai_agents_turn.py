"""One request of a stateless tier: build the SDK session over the fleet, run one turn of
an agent (its model a mock transport: no model endpoint is reachable here), exit without
closing anything. ``python -m tests.integration.openai_agents_turn SESSION_ID N``."""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, Runner

from sessionstream.integrations.openai_agents import SessionstreamSession
from sessionstream.integrations.store import FleetStore
from tests.integration.readme_child import mock_model


async def main(sid: str, n: int) -> None:
    mock_model()
    session = SessionstreamSession(sid, FleetStore.from_settings())
    result = await Runner.run(Agent(name="a", instructions="Be brief."),
                              f"Turn {n}: capital of France?", session=session)
    print(result.final_output, flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
