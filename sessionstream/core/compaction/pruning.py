"""Model-agnostic pruning of tool results before summarizing (seed §4.10.2).

Exact and cheap: a long tool result reaches the summarizer as its head, its tail and a
reference to the full content (the event's seq, or the spilled attachment's sha256).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from sessionstream.core.jsonvalue import JsonValue, thaw
from sessionstream.core.messages import Kind, Message


@dataclass(frozen=True)
class Pruned:
    """What pruning cut from the summarizer's input (evidence for compaction/summary)."""

    results: int = 0
    chars: int = 0


def text_of(content: JsonValue) -> str:
    """A message content as text: a string as is, anything else as canonical JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(thaw(content), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def cut(text: str, limit: int, ref: str) -> tuple[str, int]:
    """Head and tail of ``text`` around a marker naming ``ref``; (text, chars cut)."""
    if len(text) <= limit:
        return text, 0
    keep = max(limit // 2 - 16, 8)
    removed = len(text) - 2 * keep
    return f"{text[:keep]} …[pruned {removed} chars, full: {ref}]… {text[-keep:]}", removed


def prune_message(message: Message, limit: int = 600) -> tuple[Message, int]:
    """A tool result cut to head/tail + reference for the summarizer; (message, chars cut).

    Model-agnostic and exact: the head, the tail and a reference to the full content
    (the event's seq, or the spilled attachment's sha256). Other messages pass unchanged.
    """
    if message.kind is not Kind.TOOL_RESULT:
        return message, 0
    content = message.content
    if isinstance(content, Mapping) and "attachment" in content:
        att = content["attachment"]
        text = (f"{att.get('head', '')} …[attachment sha256:{att.get('sha256')} "
                f"{att.get('size')} bytes]… {att.get('tail', '')}")
        removed = max(int(att.get("size", 0)) - len(text), 0)
        text, more = cut(text, limit, f"attachment sha256:{att.get('sha256')}")
        return with_content(message, text), removed + more
    text, removed = cut(text_of(content), limit, f"seq {message.seqs[0]}")
    if not removed:
        return message, 0
    return with_content(message, text), removed


def with_content(message: Message, content: str) -> Message:
    return Message(message.role, message.kind, content, message.seqs, message.tool_calls,
                   message.call_id, message.status)
