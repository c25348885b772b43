"""The faust worker with an events topic that does not ack each event (bench only).

faust's ``acks=False`` topics skip the per-event acknowledgement bookkeeping; faust then
commits offsets as soon as it has *read* them, before the fold wrote them to Redis, and
resumes from those commits after a crash, skipping what was read but not folded. That
breaks the worker's at-least-once rule, so the product does not use it; bench_streams
measures what it would buy (``--faust-variants noacks``).
"""

from __future__ import annotations

from typing import Any

import faust

_topic = faust.App.topic


def _topic_without_acks(self: faust.App, *topics: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("acks", False)
    return _topic(self, *topics, **kwargs)


faust.App.topic = _topic_without_acks  # type: ignore[method-assign]

from sessionstream.streams.app import app  # noqa: E402  (after the patch: the app declares its topic)

__all__ = ["app"]
