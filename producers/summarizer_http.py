"""An OpenAI-compatible chat-completions summarizer (optional; the default is offline).

It implements :class:`sessionstream.core.compaction.Summarizer`: the pruned messages and the
facts the quality gate checks go into one prompt; whatever comes back still passes the
gate before it is committed. The HTTP call is an injected ``transport`` (stdlib urllib
by default), so tests never touch the network. The API key is read from the
environment variable named in ``api_key_env`` when the summarizer is built, and never
recorded in the log (``config`` carries only base_url, temperature and max_tokens).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sessionstream.core.compaction import SummaryRequest
from sessionstream.core.errors import SummarizerError
from sessionstream.core.jsonvalue import JsonValue
from sessionstream.producers.chat_http import ChatEndpoint, Transport, urllib_transport

__all__ = ["ChatEndpoint", "OpenAICompatibleSummarizer", "Transport", "render_prompt",
           "urllib_transport"]

INSTRUCTIONS = (
    "Summarize the earlier part of an agent session so the agent can continue from the "
    "summary alone. Keep: the goal; every user message WORD FOR WORD (corrections and "
    "constraints stay in force); one line per tool call with its call id, tool name, status, "
    "operation id and idempotency key; every open task id with its text; every next step "
    "the assistant stated, WORD FOR WORD. Add nothing that is not in the history: no id, "
    "number or quoted name it does not contain. Answer with the summary only."
)


def render_prompt(request: SummaryRequest) -> str:
    """The user prompt: the facts to keep, then the pruned messages as JSON lines."""
    f = request.facts
    keep = {
        "tool_calls": [{"call_id": t.call_id, "tool": t.name, "status": t.status,
                        "operation_id": t.operation_id, "idempotency_key": t.idempotency_key}
                       for t in f.tools],
        "user_messages_verbatim": [t for _, t in f.user_messages],
        "open_tasks": [{"id": t.id, "text": t.text, "status": t.status} for t in f.open_tasks],
        "next_steps_verbatim": [t for _, t in f.next_steps],
        "goal": f.goal,
    }
    lines = [json.dumps(m.to_json(), ensure_ascii=False) for m in request.messages]
    return (f"Facts that must appear in the summary:\n{json.dumps(keep, ensure_ascii=False)}"
            f"\n\nHistory ({request.tokens_before} tokens):\n" + "\n".join(lines))


@dataclass(frozen=True)
class OpenAICompatibleSummarizer(ChatEndpoint):
    """POST {base_url}/chat/completions; the first choice's message is the summary."""

    provider: str = "openai-compatible"

    @property
    def config(self) -> Mapping[str, JsonValue]:
        return {"base_url": self.base_url, "temperature": self.temperature,
                "max_tokens": self.max_tokens}

    def summarize(self, request: SummaryRequest) -> str:
        body: dict[str, Any] = {
            "model": self.model, "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "messages": [{"role": "system", "content": INSTRUCTIONS},
                         {"role": "user", "content": render_prompt(request)}],
        }
        return self.complete(body, SummarizerError)
