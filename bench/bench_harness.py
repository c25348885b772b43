"""Harness boundary cost, as ratios to a baseline measured in the same run.

Building a provider body is compared with assembling the request it is built from
(``core.request.assemble`` over the same surface); recording a streamed answer is
compared with recording the same answer whole. Run by hand:
``python bench/bench_harness.py``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from sessionstream.core.providers import APIS, build
from sessionstream.core.providers.scripted import Reply, render
from sessionstream.core.recorder import parse
from sessionstream.core.request import PromptRegistry, assemble
from sessionstream.core.session import Session
from sessionstream.core.simulate import SIM_HEADER, simulate_session


def best(fn: Callable[[], object], repeat: int = 7, number: int = 20) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return min(times)


def main() -> None:
    session = Session.from_events(simulate_session(random.Random(3), "bench", turns=50))
    messages = session.derive_messages()
    registry = PromptRegistry()
    registry.section("role", "You are a benchmark.")
    request = assemble(messages, registry, header=SIM_HEADER)
    base = best(lambda: assemble(messages, registry, header=SIM_HEADER))
    print(f"surface: {len(messages)} messages; assemble: {base * 1e6:.0f} us (baseline)")
    for api in APIS:
        t = best(lambda api=api: build(api, request))  # type: ignore[misc]
        print(f"build {api:17s} {t / base:6.2f}x assemble")
    reply = Reply(" ".join(["word"] * 400), [("c1", "run_sql", {"q": "select 1"})])
    for api in APIS:
        whole = render(api, reply)
        stream = render(api, reply, stream=True)
        tw = best(lambda api=api, whole=whole: parse(api, whole), number=200)  # type: ignore[misc]
        ts = best(lambda api=api, stream=stream: parse(api, stream), number=200)  # type: ignore[misc]
        print(f"parse {api:17s} stream ({len(stream)} events) {ts / tw:6.2f}x whole")


if __name__ == "__main__":
    main()
