"""The one place Redis clients are built: a single node or a Redis Cluster, by settings.

``SESSIONSTREAM_REDIS_CLUSTER=true`` makes ``SESSIONSTREAM_REDIS_URL`` name one node of a
Redis Cluster (any node: the client discovers the others and follows MOVED/ASK and
failovers). Every per-session script keeps to one hash slot (``{<tenant>/<session>}``)
and every tenant-wide call to ``{<tenant>}``, so the same code runs on both; a call that
crossed slots would fail on the cluster with CROSSSLOT (the cluster profile's tests run
the worker, writers and leases there to prove it).
"""

from __future__ import annotations

from typing import Any

# redis is imported inside the functions: the CLI imports this module at start and must
# start without loading client libraries it may not need.

# Keyword arguments only a single-node client takes.
_NODE_ONLY = ("db",)


def _cluster_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    # redis-py's cluster client follows MOVED/ASK and re-reads the slot map after a
    # connection error by itself; callers retry what still fails (a failover in progress).
    return {k: v for k, v in kwargs.items() if k not in _NODE_ONLY}


def sync_redis(url: str, *, cluster: bool = False, **kwargs: Any) -> Any:
    """A blocking client for ``url`` (one node, or a cluster reached through that node)."""
    import redis
    import redis.cluster

    if cluster:
        return redis.cluster.RedisCluster.from_url(url, **_cluster_kwargs(kwargs))
    return redis.Redis.from_url(url, **kwargs)


def async_redis(url: str, *, cluster: bool = False, **kwargs: Any) -> Any:
    """An asyncio client for ``url`` (one node, or a cluster reached through that node)."""
    import redis.asyncio
    import redis.asyncio.cluster

    if cluster:
        return redis.asyncio.cluster.RedisCluster.from_url(url, **_cluster_kwargs(kwargs))
    return redis.asyncio.Redis.from_url(url, **kwargs)


def from_settings(settings: Any, *, asyncio: bool = False, **kwargs: Any) -> Any:
    """The client ``settings`` (``sessionstream.core.settings.Settings``) describe."""
    factory = async_redis if asyncio else sync_redis
    return factory(settings.redis_url, cluster=getattr(settings, "redis_cluster", False),
                   **kwargs)
