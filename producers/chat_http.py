"""An OpenAI-compatible chat-completions endpoint, as the compaction summarizer
(``summarizer_http``) and the memory extraction model (``integrations/memory_model_http``)
call it: one POST, the first choice's message text back, each caller's own error type.

The HTTP call is an injected ``transport`` (stdlib urllib by default), so tests never
touch the network. The API key is read from the environment variable named in
``api_key_env`` when the endpoint is built, and never recorded.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sessionstream.core.errors import SummarizerError

Transport = Callable[[str, Mapping[str, str], bytes, float], tuple[int, bytes]]
"""(url, headers, body, timeout) -> (status, response body)."""


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
