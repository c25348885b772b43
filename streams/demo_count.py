"""Demo stream processor: count events per session into Redis, exactly once in effect.

Delivery is at-least-once (faust may redeliver after a crash or rebalance), so the Redis
write is idempotent: one Lua script bumps the session's count and records the partition
offset it applied, skipping any offset at or below the one already recorded. Progress
lives in Redis next to the counts, not in faust's commit bookkeeping.

Placeholder for the real projection processor; run with
``python -m faust -A streams.demo_count:app worker --without-web -l info``.
Configured by environment:
``SESSIONSTREAM_DEMO_TOPIC``, ``SESSIONSTREAM_DEMO_APP_ID``, ``SESSIONSTREAM_DEMO_KEY_PREFIX``,
``SESSIONSTREAM_DEMO_COMMIT_INTERVAL`` (seconds) plus the usual ``Settings`` variables.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any

import faust
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from sessionstream.settings import Settings

log = logging.getLogger(__name__)

# KEYS: counts hash, offsets hash, redelivered counter.
# ARGV: partition, offset, session id. Returns 1 if applied, 0 if already applied.
APPLY_SCRIPT = """
local last = redis.call('HGET', KEYS[2], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[2]) then
  redis.call('INCR', KEYS[3])
  return 0
end
redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"""


@dataclass(frozen=True)
class DemoKeys:
    """Redis keys of one demo run; one hash tag so the script never crosses cluster slots."""

    counts: str
    offsets: str
    redelivered: str

    @classmethod
    def for_app(cls, prefix: str, app_id: str) -> DemoKeys:
        base = f"{prefix}:{{demo/{app_id}}}"
        return cls(f"{base}:counts", f"{base}:offsets", f"{base}:redelivered")


@dataclass(frozen=True)
class DemoConfig:
    topic: str
    app_id: str
    key_prefix: str
    commit_interval: float

    @classmethod
    def from_env(cls, env: Any = None) -> DemoConfig:
        env = os.environ if env is None else env
        return cls(
            topic=env.get("SESSIONSTREAM_DEMO_TOPIC", "sessionstream.demo.events"),
            app_id=env.get("SESSIONSTREAM_DEMO_APP_ID", "sessionstream-demo-count"),
            key_prefix=env.get("SESSIONSTREAM_DEMO_KEY_PREFIX", "ss"),
            commit_interval=float(env.get("SESSIONSTREAM_DEMO_COMMIT_INTERVAL", "2.8")),
        )

    @property
    def keys(self) -> DemoKeys:
        return DemoKeys.for_app(self.key_prefix, self.app_id)


settings = Settings.from_env()
config = DemoConfig.from_env()

app = faust.App(
    config.app_id,
    broker=f"kafka://{settings.kafka_bootstrap}",
    store="memory://",
    web_enabled=False,  # port 6066 clashes between workers; the CLI also needs --without-web
    topic_disable_leader=True,  # no extra "__assignor-__leader" topic to create
    topic_allow_declare=False,  # topics are created by `topics ensure` / the tests
    consumer_auto_offset_reset="earliest",
    broker_commit_interval=config.commit_interval,
    broker_session_timeout=10.0,
    broker_heartbeat_interval=1.0,
)
source = app.topic(config.topic, key_type=bytes, value_type=bytes,
                   key_serializer="raw", value_serializer="raw")


async def apply_with_retry(client: aioredis.Redis, partition: int, offset: int,
                           session_id: str) -> int:
    """Run the idempotent script until Redis accepts it.

    faust acks (and later commits) an offset even when the agent body raises, so
    giving up here would lose the event: retry with backoff instead.
    """
    delay = 0.1
    keys = config.keys
    while True:
        try:
            result = await client.eval(
                APPLY_SCRIPT, 3, keys.counts, keys.offsets, keys.redelivered,
                str(partition), str(offset), session_id,
            )
            return int(result)
        except RedisError as exc:
            log.warning("redis write failed (%s); retrying in %.1fs", type(exc).__name__, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


@app.agent(source)
async def count_events(stream: faust.StreamT[bytes]) -> None:
    client = aioredis.Redis.from_url(settings.redis_url)
    async for event in stream.events():
        message = event.message
        session_id = (message.key or b"").decode("utf-8", errors="replace")
        await apply_with_retry(client, message.partition, message.offset, session_id)
