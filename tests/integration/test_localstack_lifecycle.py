"""deploy/local: up → down → up keeps topics and Redis data; `up --fresh` wipes them.

Runs a second Kafka + Redis with its own state dir and its own free ports, so the shared
instance other tests (and people) use is never touched.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import redis
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.procs import ProcessGroup


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_up_down_up_keeps_data_and_fresh_wipes_it(tmp_path: Path, procs: ProcessGroup) -> None:
    kafka_port, controller_port, redis_port = free_ports(3)
    env = {"SESSIONSTREAM_STATE_DIR": str(tmp_path / "state"),
           "SESSIONSTREAM_KAFKA_PORT": str(kafka_port),
           "SESSIONSTREAM_KAFKA_CONTROLLER_PORT": str(controller_port),
           "SESSIONSTREAM_REDIS_PORT": str(redis_port)}

    def cli(*args: str) -> str:
        done = procs.run_module("sessionstream.cli.main", *args, env=env)
        assert done.returncode == 0, f"sessionstream {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done.stdout

    def running() -> dict[str, bool]:
        return {row["name"]: row["running"] for row in json.loads(cli("status", "--json"))}

    bootstrap = f"127.0.0.1:{kafka_port}"
    topic = "lifecycle.check"
    try:
        cli("up")
        assert running() == {"kafka": True, "redis": True}
        assert "already running" in cli("up")
        # The broker logs its JVM pauses (ADR 0018); the JVM opens the file at start.
        assert (tmp_path / "state" / "kafka" / "gc.log").is_file()
        # ...with a fixed 1 GiB heap (ADR 0018: in a
        # 512 MiB heap G1 ran a concurrent cycle, and its Remark pause, every 1-2 min).
        pid = int((tmp_path / "state" / "kafka" / "kafka.pid").read_text())
        jvm_args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        for flag in (b"-Xms1g", b"-Xmx1g"):
            assert flag in jvm_args, f"the broker was started without {flag!r}: {jvm_args}"

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        r = redis.Redis(port=redis_port, decode_responses=True)
        r.set("lifecycle:key", "kept")
        r.close()

        cli("down")
        assert running() == {"kafka": False, "redis": False}
        cli("up")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert topic in admin.list_topics(timeout=30).topics
        r = redis.Redis(port=redis_port, decode_responses=True)
        assert r.get("lifecycle:key") == "kept"
        r.close()

        cli("up", "--fresh")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert topic not in admin.list_topics(timeout=30).topics
        r = redis.Redis(port=redis_port, decode_responses=True)
        assert r.get("lifecycle:key") is None
        r.close()
    finally:
        procs.run_module("sessionstream.cli.main", "down", env=env)
    assert running() == {"kafka": False, "redis": False}
