"""The one place Redis clients are built: a single node or a Redis Cluster, by settings.

With ``Settings.redis_cluster`` the Redis URL names nodes of a
Redis Cluster (``redis://h1:p1,h2:p2/0``): any reachable one is enough, the client
discovers the others and follows MOVED/ASK and failovers; list more than one so that a
client can still start while a node is down. Every per-session script keeps to one hash
slot (``{<tenant>/<session>}``) and every tenant-wide call to ``{<tenant>}``, so the same
code runs on both; a call that crossed slots would fail on the cluster with CROSSSLOT (the
cluster profile's fault tests run the worker, writers and leases there).
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


def cluster_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """``redis://[auth@]h1:p1,h2:p2/0`` -> (the URL with only h1:p1, [(h1, p1), (h2, p2)]).

    A cluster client needs one reachable node to discover the others; listing several
    means a new client still starts while the first one is down (a failover in progress).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, []
    netloc, slash, path = rest.partition("/")
    auth, at, hosts = netloc.rpartition("@")
    seeds = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        seeds.append((host or item.strip(), int(port) if port.isdigit() else 6379))
    first = f"{seeds[0][0]}:{seeds[0][1]}"
    return f"{scheme}://{auth}{at}{first}{slash}{path}", seeds


def sync_redis(url: str, *, cluster: bool = False, **kwargs: Any) -> Any:
    """A blocking client for ``url`` (one node, or a cluster reached through its nodes)."""
    import redis
    import redis.cluster

    if cluster:
        first, seeds = cluster_seeds(url)
        nodes = [redis.cluster.ClusterNode(h, p) for h, p in seeds[1:]]
        return redis.cluster.RedisCluster.from_url(first, startup_nodes=nodes,
                                                   **_cluster_kwargs(kwargs))
    return redis.Redis.from_url(url, **kwargs)


def async_redis(url: str, *, cluster: bool = False, **kwargs: Any) -> Any:
    """An asyncio client for ``url`` (one node, or a cluster reached through that node)."""
    import redis.asyncio
    import redis.asyncio.cluster

    if cluster:
        first, seeds = cluster_seeds(url)
        nodes = [redis.asyncio.cluster.ClusterNode(h, p) for h, p in seeds[1:]]
        return redis.asyncio.cluster.RedisCluster.from_url(first, startup_nodes=nodes,
                                                           **_cluster_kwargs(kwargs))
    return redis.asyncio.Redis.from_url(url, **kwargs)


def from_settings(settings: Any, *, asyncio: bool = False, **kwargs: Any) -> Any:
    """The client ``settings`` (``sessionstream.core.settings.Settings``) describe."""
    factory = async_redis if asyncio else sync_redis
    return factory(settings.redis_url, cluster=getattr(settings, "redis_cluster", False),
                   **kwargs)
