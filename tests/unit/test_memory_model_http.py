"""The OpenAI-compatible extraction model over a fake transport (no network): what it
sends, what it proposes with which provenance, and answers it refuses whole."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from sessionstream.core.errors import SummarizerError
from sessionstream.core.events import Draft, Event
from sessionstream.core.memory import Actor, Role
from sessionstream.integrations.memory import InMemoryBackend, MemoryClient
from sessionstream.integrations.memory_extract import extract_session
from sessionstream.integrations.memory_model_http import (
    ExtractionFailed,
    OpenAICompatibleExtractor,
)
from sessionstream.integrations.store import MemoryStore


def fake(answers: list[Any], seen: list[dict[str, Any]], status: int = 200):  # type: ignore[no-untyped-def]
    """A transport answering each call with the next answer (an object: sent as JSON)."""
    def transport(url: str, headers: Mapping[str, str], body: bytes,
                  timeout: float) -> tuple[int, bytes]:
        seen.append({"url": url, "headers": dict(headers), "body": json.loads(body)})
        answer = answers.pop(0)
        content = answer if isinstance(answer, str) else json.dumps(answer)
        payload = {"choices": [{"message": {"role": "assistant", "content": content}}]}
        return status, json.dumps(payload).encode()
    return transport


def session(*said: str) -> list[Event]:
    store = MemoryStore()
    h = store.open("s-1")
    for text in said:
        h.append_many([Draft("turn/start", {}), Draft("user/message", {"content": text}),
                       Draft("turn/end", {"reason": "completed"})])
    return list(h.events())


def extractor() -> MemoryClient:
    return MemoryClient(InMemoryBackend("default"),
                        Actor(Role.EXTRACTOR, "x", tenant="default", user="ada"))


def test_an_extraction_is_proposed_citing_its_seqs_with_the_model_as_provenance(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_KEY", "sk-test")
    events = session("Book me a flight to Osaka.", "I always want a window seat.")
    said = [e for e in events if e.type == "user/message"]
    seen: list[dict[str, Any]] = []
    model = OpenAICompatibleExtractor("http://llm.invalid/v1", "tiny", api_key_env="LLM_KEY",
                                      transport=fake([{"memories": [
                                          {"kind": "preference", "seqs": [said[1].seq],
                                           "content": " Prefers a window seat "}]}], seen))
    mem = extractor()
    (placed,) = extract_session(mem, "s-1", events, model)
    assert placed.content == "Prefers a window seat"
    assert [(s.session_id, s.seqs) for s in placed.sources] == [("s-1", (said[1].seq,))]
    assert (placed.extractor.model, placed.extractor.prompt_version) == (
        "openai-compatible:tiny", "extract-v1")
    (call,) = seen
    assert call["url"] == "http://llm.invalid/v1/chat/completions"
    assert call["headers"]["Authorization"] == "Bearer sk-test"
    assert call["body"]["response_format"] == {"type": "json_object"}
    prompt = call["body"]["messages"][1]["content"]
    assert "I always want a window seat." in prompt and f'"seq": {said[1].seq}' in prompt
    assert "sk-test" not in json.dumps(mem.explain(placed.ref.id))


def test_a_contradiction_named_by_the_model_supersedes_the_current_memory() -> None:
    mem = extractor()
    old = mem.propose("Prefers a window seat", kind="preference", sources=[("s-0", [1])])
    events = session("These days I prefer the aisle.")
    seq = next(e.seq for e in events if e.type == "user/message")
    seen: list[dict[str, Any]] = []
    model = OpenAICompatibleExtractor("http://llm.invalid/v1", "tiny", api_key_env=None,
                                      transport=fake([{"memories": [
                                          {"kind": "preference", "content": "Prefers an aisle "
                                           "seat", "seqs": [seq],
                                           "supersedes": [old.ref.id]}]}], seen))
    (newer,) = extract_session(mem, "s-1", events, model)
    assert old.ref.id in seen[0]["body"]["messages"][1]["content"]  # shown what is known
    assert "Authorization" not in seen[0]["headers"]
    assert [v.content for v in mem.list()] == ["Prefers an aisle seat"]
    assert newer.supersedes == (old.ref,)


@pytest.mark.parametrize(("answer", "pointer"), [
    ({"memories": [{"kind": "preference", "content": "x", "seqs": [99]}]}, "/memories/0/seqs/0"),
    ({"memories": [{"kind": "fact", "content": "ok", "seqs": "SEQ"},
                   {"kind": "fact", "content": "y", "seqs": [1]}]}, "/memories/1/seqs/0"),
    ({"memories": [{"kind": "Bad Kind", "content": "x", "seqs": "SEQ"}]}, "/memories/0/kind"),
    ({"memories": [{"kind": "fact", "content": "  ", "seqs": "SEQ"}]}, "/memories/0/content"),
    ({"memories": [{"kind": "fact", "content": "x" * 2001, "seqs": "SEQ"}]},
     "/memories/0/content"),
    ({"memories": [{"kind": "fact", "content": "x", "seqs": "SEQ", "supersedes": ["m-nope"]}]},
     "/memories/0/supersedes/0"),
    ({"memories": [{"kind": "fact", "content": "x", "seqs": [True]}]}, "/memories/0/seqs/0"),
    ({"memories": [{"kind": "fact", "content": f"m{i}", "seqs": "SEQ"} for i in range(33)]},
     "/memories"),
    ({"items": []}, "/memories"),
    ([1, 2], "/memories"),
    ("not json at all", "not JSON"),
])
def test_an_invalid_answer_is_refused_whole_naming_where(answer: Any, pointer: str) -> None:
    events = session("I live in Lyon.", "I am allergic to peanuts.")
    seqs = [e.seq for e in events if e.type == "user/message"]
    text = json.dumps(answer).replace('"SEQ"', json.dumps(seqs)) \
        if not isinstance(answer, str) else answer
    model = OpenAICompatibleExtractor("http://llm.invalid/v1", "tiny", api_key_env=None,
                                      transport=fake([text], []))
    mem = extractor()
    # a valid first memory of the same answer is not proposed either
    with pytest.raises(ExtractionFailed, match=pointer):
        extract_session(mem, "s-1", events, model)
    assert mem.list() == []


def test_an_http_error_or_an_unreachable_model_is_an_extraction_failure() -> None:
    events = session("I live in Lyon.")
    refused = OpenAICompatibleExtractor("http://llm.invalid/v1", "tiny", api_key_env=None,
                                        transport=fake([{"error": "overloaded"}], [], 503))
    with pytest.raises(ExtractionFailed, match="HTTP 503"):
        extract_session(extractor(), "s-1", events, refused)

    def down(url: str, headers: Mapping[str, str], body: bytes,
             timeout: float) -> tuple[int, bytes]:
        raise SummarizerError(f"cannot reach {url}: connection refused")

    unreachable = OpenAICompatibleExtractor("http://llm.invalid/v1", "tiny", api_key_env=None,
                                            transport=down)
    with pytest.raises(ExtractionFailed, match="cannot reach"):
        extract_session(extractor(), "s-1", events, unreachable)


def test_nothing_to_extract_calls_no_model() -> None:
    seen: list[dict[str, Any]] = []
    model = OpenAICompatibleExtractor("http://llm.invalid/v1", "tiny", api_key_env=None,
                                      transport=fake([], seen))
    assert extract_session(extractor(), "s-1", session(), model) == []
    assert seen == []
