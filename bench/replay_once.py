"""One replay of a bench topic in a process of its own, its figures as one JSON line.

    python bench/replay_once.py TOPIC PREFIX FOLD KEY_DIR

Run by bench/bench_streams.py with this checkout's interpreter, or with a baseline
checkout's (``--baseline``): it uses only what both offer (``streams.replay.replay`` and
the governance wiring), so the same replay is timed on either commit. Prints the rate,
the process's CPU seconds over the replay, the fold path and the compare's outcome.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

from redis.asyncio import Redis

from sessionstream.core.rows import KeySpace
from sessionstream.core.settings import Settings
from sessionstream.governance.wiring import key_store, reader_pipeline, row_cipher
from sessionstream.streams.replay import replay


async def main(topic: str, prefix: str, fold: str, key_dir: str) -> None:
    base = Settings.from_env()
    settings = dataclasses.replace(base, key_dir=Path(key_dir),
                                   key_prefix=f"{prefix}-keys")
    store = key_store(settings)  # as the CLI: one key cache for opening and sealing
    redis = Redis.from_url(base.redis_url, decode_responses=True)
    cpu0 = time.process_time()
    try:
        rep = await replay(bootstrap=base.kafka_bootstrap, redis=redis,
                           keys=KeySpace(base.tenant, prefix), topic=topic, switch=True,
                           fold=fold, pipeline=reader_pipeline(settings, store),
                           rows=row_cipher(settings, store))
    finally:
        await redis.aclose()
    print(json.dumps({"rate": rep.rate, "events": rep.events, "fold": rep.fold,
                      "cpu": time.process_time() - cpu0, "equal": rep.equal,
                      "not_comparable": len(rep.not_comparable),
                      "different": len(rep.different),
                      "phases": {k: round(v, 2) for k, v in rep.phases.items()}}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
