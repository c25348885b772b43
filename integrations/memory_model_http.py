"""An OpenAI-compatible chat-completions extraction model (optional; the default is the
offline :class:`~sessionstream.core.memory.extract.PatternModel`).

It implements the :class:`~sessionstream.core.memory.extract.MemoryModel` port the
extractor agent calls (docs/adr/0030, "Extraction"): the ended turns' user messages, each
with its seq, and the namespace's current memories go into one prompt; the model answers
with JSON (``response_format: json_object``)::

    {"memories": [{"kind": "preference", "content": "Prefers a window seat",
                   "seqs": [4], "supersedes": ["m-…"]}]}

The answer is checked as a whole before anything is proposed: a kind that is not one, an
empty or oversized content, a seq the request did not contain (a model may not cite what
it was not shown), a superseded id that is not a current memory — each refuses the whole
answer with :class:`ExtractionFailed` naming the JSON pointer, so nothing half-checked
enters a namespace (the extractor agent logs it and moves on; the policy still decides
what is served). The HTTP call is an injected ``transport`` (stdlib urllib by default),
so tests never touch the network. The API key is read from the environment variable
``api_key_env`` when the model is built and never recorded: provenance carries ``name``
(``openai-compatible:<model>``) and ``prompt_version`` only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sessionstream.core.memory.errors import MemoryLogError
from sessionstream.core.memory.extract import Candidate, ExtractRequest
from sessionstream.core.memory.model import KNOWN_KINDS
from sessionstream.producers.chat_http import ChatEndpoint

__all__ = ["PROMPT_VERSION", "ExtractionFailed", "OpenAICompatibleExtractor", "render_prompt"]

PROMPT_VERSION = "extract-v1"
#: at most this many memories from one answer, and this many characters each
MAX_MEMORIES = 32
MAX_CONTENT = 2_000
_KIND = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")

INSTRUCTIONS = (
    "You maintain a user's long-term memory. From the user's messages below, extract what "
    "is worth remembering across conversations: preferences, facts about the user, standing "
    "instructions. Write each as one short third-person sentence. Cite the seq of every "
    "message it comes from. If it contradicts or replaces a current memory, name that "
    "memory's id in supersedes. Extract nothing that is not stated by the user; nothing "
    "already remembered unchanged. Answer with JSON only: {\"memories\": [{\"kind\": one "
    f"of {', '.join(KNOWN_KINDS)}, \"content\": text, \"seqs\": [int], \"supersedes\": "
    "[id]}]}; {\"memories\": []} when there is nothing."
)


class ExtractionFailed(MemoryLogError):
    """The model could not be reached, or its answer is not a valid extraction (the
    message names the JSON pointer); nothing of that answer was proposed."""


def render_prompt(request: ExtractRequest) -> str:
    """The user prompt: the current memories, then the messages with their seqs (JSON)."""
    known = [{"id": k.id, "kind": k.kind, "content": k.text} for k in request.known]
    said = [{"seq": s.seq, "text": s.text} for s in request.said]
    return (f"Current memories:\n{json.dumps(known, ensure_ascii=False)}\n\n"
            f"User messages:\n{json.dumps(said, ensure_ascii=False)}")


@dataclass(frozen=True)
class OpenAICompatibleExtractor(ChatEndpoint):
    """POST {base_url}/chat/completions; the first choice's message is the extraction."""

    @property
    def name(self) -> str:
        return f"openai-compatible:{self.model}"

    @property
    def prompt_version(self) -> str:
        return PROMPT_VERSION

    def extract(self, request: ExtractRequest) -> list[Candidate]:
        if not request.said:
            return []
        body: dict[str, Any] = {
            "model": self.model, "temperature": self.temperature,
            "max_tokens": self.max_tokens, "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": INSTRUCTIONS},
                         {"role": "user", "content": render_prompt(request)}],
        }
        text = self.complete(body, ExtractionFailed)
        try:
            answer = json.loads(text)
        except ValueError as exc:
            raise ExtractionFailed(f"the model's answer is not JSON (a chat completion "
                                   f"whose message is JSON was expected): {text[:200]!r}"
                                   ) from exc
        return parse_answer(answer, request)


def _refuse(pointer: str, reason: str) -> ExtractionFailed:
    return ExtractionFailed(f"the model's answer at {pointer}: {reason}; nothing of it was "
                            "proposed")


def parse_answer(answer: Any, request: ExtractRequest) -> list[Candidate]:
    """The candidates of a decoded answer, every field checked against the request."""
    if not isinstance(answer, Mapping) or not isinstance(answer.get("memories"), list):
        raise _refuse("/memories", "expected an object with a list \"memories\"")
    items = answer["memories"]
    if len(items) > MAX_MEMORIES:
        raise _refuse("/memories", f"{len(items)} memories, at most {MAX_MEMORIES}")
    seqs = {s.seq for s in request.said}
    known = {k.id for k in request.known}
    out: list[Candidate] = []
    for i, item in enumerate(items):
        at = f"/memories/{i}"
        if not isinstance(item, Mapping):
            raise _refuse(at, f"expected an object, got {_type(item)}")
        kind, content = item.get("kind"), item.get("content")
        if not isinstance(kind, str) or not _KIND.match(kind):
            raise _refuse(f"{at}/kind", f"{kind!r} is not a kind (e.g. "
                          f"{', '.join(KNOWN_KINDS)})")
        if not isinstance(content, str) or not content.strip():
            raise _refuse(f"{at}/content", "expected non-empty text")
        if len(content) > MAX_CONTENT:
            raise _refuse(f"{at}/content", f"{len(content)} characters, at most {MAX_CONTENT}")
        cited = item.get("seqs")
        if not isinstance(cited, list) or not cited:
            raise _refuse(f"{at}/seqs", "expected a non-empty list of the messages' seqs")
        for j, seq in enumerate(cited):
            if isinstance(seq, bool) or not isinstance(seq, int) or seq not in seqs:
                raise _refuse(f"{at}/seqs/{j}", f"{seq!r} is not the seq of a message it "
                              f"was shown ({sorted(seqs)})")
        replaced = item.get("supersedes", [])
        if not isinstance(replaced, list):
            raise _refuse(f"{at}/supersedes", f"expected a list of ids, got {_type(replaced)}")
        for j, ref in enumerate(replaced):
            if ref not in known:
                raise _refuse(f"{at}/supersedes/{j}", f"{ref!r} is not a current memory's id")
        out.append(Candidate(kind, content.strip(), tuple(sorted(set(cited))),
                             tuple(dict.fromkeys(replaced))))
    return out


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__
