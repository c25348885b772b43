"""The latency bench's producer, run in its own process by bench_streams.py.

    python bench/lat_producer.py BOOTSTRAP TOPIC RATE SECONDS SEED OUT

Produces ``RATE * SECONDS`` pre-encoded ``simulate_session`` events at a fixed rate
(paced by sleeping, not spinning: it must not take a core from the worker) with the
writers' producer config (``PRODUCER_DEFAULTS``), then writes to OUT a JSON object:
``warmup_ms`` and ``rows``, one list per event:
``[session_id, seq, t_sent, t_acked, partition, offset]`` (``time.time()``).

Before the measured window it produces one warm-up event (its own session) and waits
for its ack: a new idempotent librdkafka producer sends nothing until it holds a
producer id, and when its first try finds only the bootstrap connection up it retries
on a fixed 500 ms timer (librdkafka's idempotence FSM). A session writer's producer is
process-wide and long-lived, so that one-off start-up wait is printed as ``warmup_ms``
(from the producer's creation to the warm-up's ack), not mixed into the steady state.
See docs/adr/0018-latency-bench-producer-warm-up.md.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

from confluent_kafka import Producer

from sessionstream.core.codec import encode
from sessionstream.core.simulate import simulate_session
from sessionstream.producers.kafka_clients import PRODUCER_DEFAULTS


def make_events(n: int, seed: int) -> list[Any]:
    rng = random.Random(seed)
    out: list[Any] = []
    i = 0
    while len(out) < n:
        out.extend(simulate_session(rng, f"bench-{seed}-{i:05d}", turns=4))
        i += 1
    return out[:n]


def main() -> None:
    bootstrap, topic = sys.argv[1], sys.argv[2]
    rate, seconds, seed = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    out_path = sys.argv[6]
    events = make_events(rate * seconds, seed)
    encoded = [(ev.session_id.encode(), encode(ev)) for ev in events]
    rows: list[list[Any]] = [[ev.session_id, ev.seq, 0.0, 0.0, -1, -1] for ev in events]
    created = time.time()
    p = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap})
    p.list_topics(topic, timeout=10)
    warm = simulate_session(random.Random(seed), f"bench-{seed}-warmup", turns=1)[0]
    p.produce(topic, encode(warm), warm.session_id.encode())
    if p.flush(30):
        raise SystemExit("lat_producer: the warm-up event was not acknowledged within 30 s")
    warmup_ms = (time.time() - created) * 1000

    def acked(i: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            row = rows[i]
            row[3] = time.time()
            if err is None:
                row[4], row[5] = msg.partition(), msg.offset()
        return cb

    t0 = time.time()
    sent = 0
    n = len(encoded)
    while sent < n:
        due = min(n, int((time.time() - t0) * rate) + 1)
        while sent < due:
            key, value = encoded[sent]
            rows[sent][2] = time.time()
            p.produce(topic, value, key, on_delivery=acked(sent))
            sent += 1
        p.poll(0)
        time.sleep(0.0005)
    p.flush(30)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"warmup_ms": warmup_ms, "rows": rows}, f)


if __name__ == "__main__":
    main()
