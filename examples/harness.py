"""A runnable agent harness on sessionstream, for OpenAI-compatible, Anthropic or Gemini endpoints.

    OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_API_KEY=... \\
        python examples/harness.py --model my-model "What is 17 + 25?"
    ANTHROPIC_API_KEY=... python examples/harness.py --api anthropic \\
        --model claude-sonnet-4-5 --stream "What is 17 + 25?"
    GEMINI_API_KEY=... python examples/harness.py --api gemini --model gemini-2.5-flash \\
        "What is 17 + 25?"

The official SDKs read their base URL and key from the environment (OPENAI_BASE_URL /
OPENAI_API_KEY, ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY, GOOGLE_GEMINI_BASE_URL /
GEMINI_API_KEY). Each model step is built from
the session's surface by sessionstream's request builders, and the answer (whole or
streamed) is recorded through the session's rules; tools run after their tool/call is
flushed. Offline (default) the session is kept in memory and written to ``-o`` as JSONL;
with ``--kafka`` it is written to the fleet through a fenced SessionWriter.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sessionstream.core.harness import Harness, ToolContext, ToolOutcome
from sessionstream.core.request import (
    PromptRegistry,
    StaticTools,
    ToolSchema,
    resolve_header,
)
from sessionstream.core.session import Session


class OpenAIChatClient:
    """The harness's provider port over ``openai.OpenAI().chat.completions``."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def create(self, body: Mapping[str, Any]) -> Any:
        result = self.client.chat.completions.create(**body)
        if body.get("stream"):
            return (chunk.model_dump(mode="json") for chunk in result)
        return result.model_dump(mode="json")


class OpenAIResponsesClient:
    """The provider port over ``openai.OpenAI().responses``."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def create(self, body: Mapping[str, Any]) -> Any:
        result = self.client.responses.create(**body)
        if body.get("stream"):
            return (event.model_dump(mode="json") for event in result)
        return result.model_dump(mode="json")


class AnthropicClient:
    """The provider port over ``anthropic.Anthropic().messages``."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def create(self, body: Mapping[str, Any]) -> Any:
        result = self.client.messages.create(**body)
        if body.get("stream"):
            return (event.model_dump(mode="json") for event in result)
        return result.model_dump(mode="json")


class GeminiClient:
    """The provider port over ``google.genai.Client().models``: the body is the SDK call's
    keyword arguments; ``stream`` (ours) picks ``generate_content_stream``."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def create(self, body: Mapping[str, Any]) -> Any:
        kwargs = {k: v for k, v in body.items() if k != "stream"}
        if body.get("stream"):
            return (chunk.model_dump(mode="json", exclude_none=True)
                    for chunk in self.client.models.generate_content_stream(**kwargs))
        result = self.client.models.generate_content(**kwargs)
        return result.model_dump(mode="json", exclude_none=True)


def make_client(api: str, http_client: Any = None) -> Any:
    """The SDK client for ``api`` (base URL and key from the environment)."""
    kw = {} if http_client is None else {"http_client": http_client}
    if api == "gemini":
        from google import genai
        from google.genai import types

        options = types.HttpOptions(httpx_client=http_client) if http_client else None
        return GeminiClient(genai.Client(http_options=options))
    if api == "anthropic":
        import anthropic

        return AnthropicClient(anthropic.Anthropic(**kw))
    import openai

    client = openai.OpenAI(**kw)
    return OpenAIChatClient(client) if api == "openai-chat" else OpenAIResponsesClient(client)


def add(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    return ToolOutcome(str(args["a"] + args["b"]))


def word_count(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    return ToolOutcome({"words": len(str(args.get("text", "")).split())})


TOOLS = StaticTools("example", [
    ToolSchema("add", "Add two numbers", {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"]}),
    ToolSchema("word_count", "Count the words of a text", {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
])


def harness(log: Any, client: Any, api: str, model: str, *, stream: bool = False) -> Harness:
    prompts = PromptRegistry()
    prompts.section("role", "You are a careful assistant. Use the tools for arithmetic.")
    header = resolve_header(("example", {"provider": api, "model": model, "max_tokens": 1024}))
    return Harness(log, client, api, header, prompts, tools={"add": add, "word_count": word_count},
                   providers=[TOOLS], stream=stream)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("prompt")
    p.add_argument("--api", default="openai-chat",
                   choices=("openai-chat", "openai-responses", "anthropic", "gemini"))
    p.add_argument("--model", required=True)
    p.add_argument("--stream", action="store_true")
    p.add_argument("--kafka", action="store_true", help="write the session to the fleet")
    p.add_argument("-o", "--output", type=Path, default=None, help="JSONL file (offline)")
    args = p.parse_args(argv)
    client = make_client(args.api)
    if args.kafka:
        from sessionstream.core.settings import Settings
        from sessionstream.producers.writer import SessionWriter, WriterConfig

        with SessionWriter.create(WriterConfig.from_settings(Settings.from_env())) as w:
            result = harness(w, client, args.api, args.model, stream=args.stream).turn(
                args.prompt)
            session = w.session
    else:
        session = Session.create("example")
        result = harness(session, client, args.api, args.model, stream=args.stream).turn(
            args.prompt)
        if args.output is not None:
            from sessionstream.core.jsonl import write_jsonl

            write_jsonl(session.events, args.output)
    answer = session.derive_messages()[-1]
    print(f"[{result.reason} in {len(result.steps)} step(s), session {session.session_id}] "
          f"{answer.content}")
    return 0 if result.reason == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
