"""Run one of the README's framework examples on the fleet, as a user would after the
one-line switch its comment names (``python -m tests.integration.readme_child HEADING``,
with the SESSIONSTREAM_* settings in the environment): the in-memory store or saver is
replaced by the fleet's, the Agents SDK's model answers from a mock transport (no model
endpoint is reachable here), and the example's output is printed. The process exits
without closing anything, as a request handler does."""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.unit.test_readme_frameworks import _example, _run

#: The one-line switch each example's comment names: (what is there, what goes there).
SWITCHES: dict[str, list[tuple[str, str]]] = {
    "Under an agent framework: the OpenAI Agents SDK": [
        ('SessionstreamSession("conv-1", MemoryStore())',
         'SessionstreamSession("conv-1", FleetStore.from_settings())'),
        ("from sessionstream.integrations.store import MemoryStore",
         "from sessionstream.integrations.store import FleetStore"),
    ],
    "Google ADK sessions on sessionstream": [
        ("SessionstreamSessionService(MemoryStore(EVENT_TYPES))",
         "SessionstreamSessionService(FleetStore.from_settings(event_types=EVENT_TYPES))"),
        ("from sessionstream.integrations.store import MemoryStore",
         "from sessionstream.integrations.store import FleetStore"),
    ],
    "LangGraph checkpoints on sessionstream": [
        ("SessionStreamSaver.memory()", "SessionStreamSaver.fleet()"),
    ],
}


def mock_model() -> None:
    import httpx
    from agents import set_default_openai_client, set_tracing_disabled
    from openai import AsyncOpenAI

    def reply(request: httpx.Request) -> httpx.Response:
        body: dict[str, Any] = json.loads(request.content)
        asked = [i for i in body["input"] if i.get("role") == "user"][-1]["content"]
        text = "Paris." if "France" in str(asked) else "Rome."
        return httpx.Response(200, json={
            "id": "resp_1", "object": "response", "created_at": 0, "status": "completed",
            "model": body["model"], "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [], "output": [{
                "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}})

    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(
        api_key="test", http_client=httpx.AsyncClient(transport=httpx.MockTransport(reply))))


def main(heading: str) -> None:
    code, _ = _example(heading)
    for there, instead in SWITCHES[heading]:
        if there not in code:
            raise SystemExit(f"the README example under {heading!r} no longer has {there!r}")
        code = code.replace(there, instead)
    if "OpenAI Agents SDK" in heading:
        mock_model()
    print(_run(code), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
