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
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.compaction import SummaryRequest
from sessionstream.core.errors import SummarizerError
from sessionstream.core.jsonvalue import JsonValue

Transport = Callable[[str, Mapping[str, str], bytes, float], tuple[int, bytes]]
"""(url, headers, body, timeout) -> (status, response body)."""

INSTRUCTIONS = (
    "Summarize the earlier part of an agent session so the agent can continue from the "
    "summary alone. Keep: the goal; every user message WORD FOR WORD (corrections and "
    "constraints stay in force); one line per tool call with its call id, tool name, status, "
    "operation id and idempotency key; every open task id with its text; every next step "
    "the assistant stated, WORD FOR WORD. Add nothing that is not in the history: no id, "
    "number or quoted name it does not contain. Answer with the summary only."
)


def urllib_transport(url: str, headers: Mapping[str, str], body: bytes,
                     timeout: float) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise SummarizerError(f"cannot reach {url}: {exc}") from exc


def chat_completion(base_url: str, body: Mapping[str, Any], key: str | None,
                    transport: Transport, timeout_s: float,
                    error: Callable[[str], Exception]) -> str:
    """POST ``body`` to ``{base_url}/chat/completions`` and return the first choice's
    message text; ``error(message)`` is raised for a refusal or an unexpected answer
    (the summarizer's and the memory extractor's own error types)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    url = base_url.rstrip("/") + "/chat/completions"
    try:
        status, raw = transport(url, headers, json.dumps(body).encode(), timeout_s)
    except SummarizerError as exc:  # urllib_transport: the endpoint cannot be reached
        raise error(str(exc)) from exc
    if status != 200:
        raise error(f"HTTP {status} from {url}: {raw[:200]!r}")
    try:
        text = json.loads(raw)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise error(f"unexpected response from {url}: {raw[:200]!r}") from exc
    if not isinstance(text, str) or not text.strip():
        raise error(f"empty answer from {url}")
    return text


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
class ChatEndpoint:
    """An OpenAI-compatible chat-completions endpoint: where, which model, and the
    environment variable holding its key (read when built, never recorded)."""

    base_url: str
    model: str
    api_key_env: str | None = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout_s: float = 60.0
    transport: Transport = urllib_transport
    _key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._key is None and self.api_key_env:
            object.__setattr__(self, "_key", os.environ.get(self.api_key_env))

    def complete(self, body: Mapping[str, Any], error: Callable[[str], Exception]) -> str:
        """:func:`chat_completion` of ``body`` at this endpoint."""
        return chat_completion(self.base_url, body, self._key, self.transport,
                               self.timeout_s, error)


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
