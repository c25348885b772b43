"""The OpenAI-compatible summarizer, over a fake transport (no network)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from sessionstream.core.compaction import (
    OfflineSummarizer,
    build_request,
    plan_compaction,
    select_range,
)
from sessionstream.producers.summarizer_http import OpenAICompatibleSummarizer
from tests.unit.test_compaction import busy_session


def fake(status: int, reply: str | None, seen: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    def transport(url: str, headers: Mapping[str, str], body: bytes,
                  timeout: float) -> tuple[int, bytes]:
        seen.append({"url": url, "headers": dict(headers), "body": json.loads(body)})
        payload = {"choices": [{"message": {"role": "assistant", "content": reply}}]}
        return status, json.dumps(payload).encode()
    return transport


def test_a_good_model_summary_is_committed_with_its_provenance() -> None:
    s = busy_session()
    rng = select_range(s)
    assert not isinstance(rng, str)
    faithful = OfflineSummarizer().summarize(build_request(s, rng))  # keeps every fact
    seen: list[dict[str, object]] = []
    summ = OpenAICompatibleSummarizer("http://llm.invalid/v1", "tiny", api_key_env=None,
                                      transport=fake(200, faithful, seen))
    drafts = plan_compaction(s, summ, trigger="manual")
    assert drafts[-1].data == {"compaction_id": drafts[0].data["compaction_id"],  # type: ignore[index]
                               "outcome": "completed"}
    summary = next(d for d in drafts if d.type == "compaction/summary")
    assert summary.data["summarizer"] == {  # type: ignore[index]
        "provider": "openai-compatible", "model": "tiny",
        "config": {"base_url": "http://llm.invalid/v1", "temperature": 0.0, "max_tokens": 1024}}
    prompt = seen[0]["body"]["messages"][1]["content"]  # type: ignore[index]
    assert "op-0001" in prompt and "use the 2024 rates, not 2023" in prompt


def test_a_lossy_model_summary_fails_the_gate() -> None:
    seen: list[dict[str, object]] = []
    summ = OpenAICompatibleSummarizer("http://llm.invalid/v1", "tiny", api_key_env=None,
                                      transport=fake(200, "They did some queries.", seen))
    drafts = plan_compaction(busy_session(), summ, trigger="manual")
    assert drafts[-1].data["outcome"] == "failed"  # type: ignore[index]
    assert "lost operation id(s) op-0000" in drafts[-1].data["reason"]  # type: ignore[index]
    assert seen[0]["url"] == "http://llm.invalid/v1/chat/completions"


def test_http_errors_end_the_attempt_failed_and_keys_stay_out_of_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "sk-secret")
    seen: list[dict[str, object]] = []
    summ = OpenAICompatibleSummarizer("http://llm.invalid/v1", "tiny", api_key_env="TEST_LLM_KEY",
                                      transport=fake(503, None, seen))
    drafts = plan_compaction(busy_session(), summ, trigger="manual")
    assert drafts[-1].data["reason"].startswith("summarizer failed: HTTP 503")  # type: ignore[index]
    assert seen[0]["headers"]["Authorization"] == "Bearer sk-secret"  # type: ignore[index]
    assert "sk-secret" not in json.dumps([d.data for d in drafts])
