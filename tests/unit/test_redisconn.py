"""Cluster seed parsing: several nodes in one URL, credentials and database kept."""

from __future__ import annotations

from sessionstream.redisconn import cluster_seeds


def test_every_listed_node_becomes_a_seed_and_the_first_keeps_the_url_parts() -> None:
    first, seeds = cluster_seeds("redis://user:pw@10.0.0.1:7001,10.0.0.2:7002,h3/0")
    assert first == "redis://user:pw@10.0.0.1:7001/0"
    assert seeds == [("10.0.0.1", 7001), ("10.0.0.2", 7002), ("h3", 6379)]


def test_a_single_node_url_is_its_own_seed() -> None:
    assert cluster_seeds("rediss://r:6380") == ("rediss://r:6380", [("r", 6380)])
