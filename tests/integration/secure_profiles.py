"""The two secure profiles as the access-scope and canary tests see them.

``node``: `sessionstream up --secure` (one SCRAM broker with ACLs, one Redis with ACL
users); ``cluster``: `sessionstream cluster up --secure` (three SCRAM brokers, a Redis
Cluster of six nodes with ACL users). Both on free loopback ports under a temporary state
dir laid out as the CLI lays it out (``<base>/secure``, ``<base>/cluster-secure``), so the
CLI finds them from the environment :attr:`SecureProfile.cli_env` gives. Whoever starts a
profile stops it (:func:`started`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sessionstream import redisconn
from sessionstream.core.access import principal
from sessionstream.governance.access import redis_url_for
from sessionstream.localstack.cluster import ClusterConfig, LocalCluster
from sessionstream.localstack.stack import StackConfig, down, up

PROFILES = ("node", "cluster")
#: The key prefix of the tenants' Redis keys on a profile's own Redis (a fresh server).
PREFIX = "ss"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SecureProfile:
    """One running secure profile: where it listens, its admin, how the CLI finds it."""

    name: str
    base: Path  # the outer state dir (SESSIONSTREAM_STATE_DIR)
    bootstrap: str
    admin_security: dict[str, str] = field(repr=False)
    admin_redis_url: str = field(repr=False)
    redis_url: str = ""  # without credentials: a tenant user's is put in front
    redis_cluster: bool = False
    replication_factor: int = 1
    cli_env: dict[str, str] = field(default_factory=dict)
    local_flag: str = "--local-secure"  # acl apply / acl env
    #: every directory a server of the profile writes (configs, data, logs)
    server_dirs: list[Path] = field(default_factory=list)
    #: the brokers' and Redis nodes' config files
    configs: list[Path] = field(default_factory=list)
    admin_password: str = field(default="", repr=False)

    def redis_admin(self) -> Any:
        """A (cluster) client of the profile's Redis as its admin (decoded replies)."""
        return redisconn.sync_redis(self.admin_redis_url, cluster=self.redis_cluster,
                                    decode_responses=True, socket_timeout=10)

    def redis_as(self, tenant: str, role: str, password: str) -> Any:
        return redisconn.sync_redis(self.user_redis_url(tenant, role, password),
                                    cluster=self.redis_cluster, decode_responses=True,
                                    socket_timeout=10)

    def user_redis_url(self, tenant: str, role: str, password: str) -> str:
        return redis_url_for(self.redis_url, principal(tenant, role), password)

    def redis_env(self) -> dict[str, str]:
        return {"SESSIONSTREAM_REDIS_CLUSTER": "true" if self.redis_cluster else "false"}


@contextmanager
def started(name: str, base: Path, cache_dir: Path) -> Iterator[SecureProfile]:
    """Start the ``name`` profile under ``base``; stop what was started at the end."""
    if name == "node":
        yield from _node(base, cache_dir)
    elif name == "cluster":
        yield from _cluster(base, cache_dir)
    else:
        raise ValueError(f"unknown profile {name!r}: use one of {PROFILES}")


def _node(base: Path, cache_dir: Path) -> Iterator[SecureProfile]:
    cfg = StackConfig(state_dir=base / "secure", kafka_port=_free_port(),
                      controller_port=_free_port(), redis_port=_free_port(),
                      cache_dir=cache_dir, secure=True)
    started_: list[str] = []
    try:
        up(cfg, lambda _msg: None, started=started_)
        yield SecureProfile(
            "node", base, cfg.bootstrap, cfg.client_security(), cfg.admin_redis_url(),
            redis_url=f"redis://127.0.0.1:{cfg.redis_port}/0",
            cli_env={"SESSIONSTREAM_STATE_DIR": str(base),
                     "SESSIONSTREAM_SECURE_KAFKA_PORT": str(cfg.kafka_port),
                     "SESSIONSTREAM_SECURE_KAFKA_CONTROLLER_PORT": str(cfg.controller_port),
                     "SESSIONSTREAM_SECURE_REDIS_PORT": str(cfg.redis_port)},
            local_flag="--local-secure",
            server_dirs=[cfg.dir("kafka"), cfg.dir("redis")],
            configs=[cfg.dir("kafka") / "server.properties", cfg.dir("redis") / "redis.conf"],
            admin_password=cfg.admin_password())
    finally:
        if started_:
            down(cfg, lambda _msg: None, started_)


def _cluster(base: Path, cache_dir: Path) -> Iterator[SecureProfile]:
    from tests.integration.test_cluster_faults import pick_ports

    kafka, controllers, redis_ports = pick_ports()
    cfg = ClusterConfig(state_dir=base / "cluster-secure", kafka_ports=kafka,
                        controller_ports=controllers, redis_ports=redis_ports,
                        cache_dir=cache_dir, secure=True)
    local = LocalCluster(cfg, echo=lambda _: None)
    try:
        local.up()
        password = cfg.admin_password()
        assert password is not None
        yield SecureProfile(
            "cluster", base, cfg.bootstrap, cfg.client_security(), cfg.admin_redis_url(),
            redis_url=cfg.redis_url, redis_cluster=True, replication_factor=3,
            cli_env={"SESSIONSTREAM_STATE_DIR": str(base),
                     "SESSIONSTREAM_CLUSTER_KAFKA_PORTS": ",".join(map(str, kafka)),
                     "SESSIONSTREAM_CLUSTER_CONTROLLER_PORTS": ",".join(map(str, controllers)),
                     "SESSIONSTREAM_CLUSTER_REDIS_PORTS": ",".join(map(str, redis_ports))},
            local_flag="--local-cluster",
            server_dirs=[n.home for n in local.kafka] + [r.home for r in local.redis],
            configs=[n.props for n in local.kafka] + [r.home / "redis.conf"
                                                       for r in local.redis],
            admin_password=password)
    finally:
        local.down()


def cli_env(profile: SecureProfile, **extra: str) -> dict[str, str]:
    """The process environment of a CLI call against ``profile``."""
    return {**os.environ, **profile.cli_env, **extra}

