"""Demo: the smallest real pipeline, end to end (replaced later by the fleet simulator).

Produces ``events`` JSON events spread over ``sessions`` session ids to a fresh demo
topic keyed by session id, runs the ``streams.demo_count`` faust worker as a
subprocess until Redis has counted them all, prints the counts read from Redis, and
stops the worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis
from confluent_kafka import Producer

from producers.topics import TopicSpec, admin_client, ensure_topics
from sessionstream.errors import SessionStreamError
from sessionstream.settings import Settings


class DemoError(SessionStreamError):
    """The demo pipeline did not finish; the message says where it stopped."""


def produce_events(bootstrap: str, topic: str, session_ids: list[str], events: int) -> int:
    """Produce ``events`` records round-robin over ``session_ids``, keyed by session id."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    next_seq = dict.fromkeys(session_ids, 0)
    for i in range(events):
        sid = session_ids[i % len(session_ids)]
        value = json.dumps({"session_id": sid, "seq": next_seq[sid], "type": "demo/tick"})
        next_seq[sid] += 1
        producer.produce(topic, key=sid.encode(), value=value.encode(), on_delivery=on_delivery)
        producer.poll(0)
    remaining = producer.flush(30)
    if remaining or failures:
        raise DemoError(f"{remaining} events undelivered, {len(failures)} failed "
                        f"(first: {failures[:1]}); is Kafka running? `sessionstream status`")
    return events


def run_demo(sessions: int = 5, events: int = 200, echo: Callable[[str], None] = print,
             timeout: float = 60.0) -> dict[str, int]:
    settings = Settings.from_env()
    run = uuid.uuid4().hex[:8]
    topic = f"sessionstream.demo-{run}.events"
    app_id = f"sessionstream-demo-{run}"
    prefix = "ss-demo"
    ensure_topics(admin_client(settings.kafka_bootstrap), [TopicSpec(topic, 4)])
    session_ids = [f"demo-session-{i}" for i in range(sessions)]
    echo(f"demo: producing {events} events for {sessions} sessions to {topic}")
    produce_events(settings.kafka_bootstrap, topic, session_ids, events)

    env = {**os.environ, "SESSIONSTREAM_DEMO_TOPIC": topic,
           "SESSIONSTREAM_DEMO_APP_ID": app_id, "SESSIONSTREAM_DEMO_KEY_PREFIX": prefix}
    from streams.demo_count import DemoKeys

    keys = DemoKeys.for_app(prefix, app_id)
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    log_path = Path(tempfile.gettempdir()) / f"{app_id}.log"
    echo(f"demo: starting faust worker {app_id} (log {log_path})")
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            # --without-web: the `worker` command turns the web server (port 6066) back on
            # unless told otherwise, whatever the app's web_enabled says.
            [sys.executable, "-m", "faust", "-A", "streams.demo_count:app", "worker",
             "--without-web", "-l", "info"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            counts = {str(k): int(v) for k, v in client.hgetall(keys.counts).items()}
            if sum(counts.values()) >= events:
                break
            if worker.poll() is not None:
                raise DemoError(f"faust worker exited with {worker.returncode}; see {log_path}")
            if time.monotonic() > deadline:
                raise DemoError(f"only {sum(counts.values())}/{events} events counted after "
                                f"{timeout:.0f}s; see {log_path}")
            time.sleep(0.2)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        admin_client(settings.kafka_bootstrap).delete_topics([topic])
    echo("demo: per-session event counts read back from Redis:")
    for sid in session_ids:
        echo(f"  {sid}: {counts.get(sid, 0)}")
    client.delete(keys.counts, keys.offsets, keys.redelivered)
    return counts
