"""`acl apply` on a Redis Cluster creates the tenant's Redis users on every node (ACL
users are per node), so each role works through the cluster client on whichever master
holds its keys' slots, and after a failover. A Redis Cluster of its own (6 nodes from the
cluster profile, other ports; no brokers), started once for this module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
import redis.cluster

from sessionstream import redisconn
from sessionstream.core.rows import CHANGE_FIELD, KeySpace, SessionRow
from sessionstream.governance.access import redis_url_for
from sessionstream.governance.service import Governance
from sessionstream.localstack.cluster import ClusterConfig, LocalCluster
from tests.integration.test_cluster_faults import pick_ports

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server and redis-cli are needed for a Redis Cluster")
    kafka, controllers, redis_ports = pick_ports()
    cfg = ClusterConfig(state_dir=tmp_path_factory.mktemp("aclcluster"), kafka_ports=kafka,
                        controller_ports=controllers, redis_ports=redis_ports)
    local = LocalCluster(cfg, echo=lambda _: None)
    try:
        local.up_redis()
        yield local
    finally:
        local.down()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sessionstream.cli.main", *args],
                          capture_output=True, text=True, env=env, timeout=60, check=False)


def test_acl_apply_creates_the_tenants_redis_users_on_every_cluster_node(
        redis_cluster: LocalCluster, tmp_path: Path) -> None:
    tenant = f"aclrc{uuid.uuid4().hex[:8]}"
    cfg = redis_cluster.cfg
    env = {**os.environ, "SESSIONSTREAM_STATE_DIR": str(tmp_path),
           "SESSIONSTREAM_REDIS_URL": cfg.redis_url, "SESSIONSTREAM_REDIS_CLUSTER": "true"}
    done = _cli(env, "acl", "apply", "--tenant", tenant, "--no-kafka", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    everyone = {f"127.0.0.1:{p}" for p in cfg.redis_ports}
    assert set(report["redis"]["nodes"]) == everyone  # masters and replicas
    secrets = json.loads(Path(report["secrets_file"]).read_text())["passwords"]
    assert secrets["worker"] not in done.stdout

    # every node knows each role's user and password (a failover promotes a replica)
    for port in cfg.redis_ports:
        for role in ("writer", "worker", "reader"):
            user = f"sessionstream.{tenant}.{role}"
            node = redis.Redis(host="127.0.0.1", port=port, username=user,
                               password=secrets[role], socket_timeout=5)
            try:
                assert node.ping()  # AUTH user password at connect: WRONGPASS if unknown
            finally:
                node.close()

    # through the cluster client, as the worker: its keys on every master, nothing else
    keys = KeySpace(tenant, "ss")
    worker = redisconn.sync_redis(
        redis_url_for(cfg.redis_url, f"sessionstream.{tenant}.worker", secrets["worker"]),
        cluster=True, socket_timeout=5)
    reader = redisconn.sync_redis(
        redis_url_for(cfg.redis_url, f"sessionstream.{tenant}.reader", secrets["reader"]),
        cluster=True, socket_timeout=5)
    try:
        rows = [keys.session_row(f"s{i}", 1) for i in range(24)]
        owners = {worker.get_node_from_key(k).port for k in rows}
        assert len(owners) == 3  # the sessions' slots span every master
        for i, key in enumerate(rows):
            worker.hset(key, "as_of_seq", i)
        assert [int(reader.hget(k, "as_of_seq")) for k in rows] == list(range(24))
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.set("ss:{other/s1}:x", 1)  # another tenant's key
        with pytest.raises(redis.exceptions.NoPermissionError):
            reader.hset(rows[0], "as_of_seq", 99)  # the reader only reads
    finally:
        worker.close()
        reader.close()

    again = _cli(env, "acl", "apply", "--tenant", tenant, "--no-kafka", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["redis"] == report["redis"]


def test_a_deletion_purges_every_generation_on_the_cluster_as_the_tenants_worker(
        redis_cluster: LocalCluster, tmp_path: Path) -> None:
    """The purge names its keys (no SCAN: the tenant's users may not list the keyspace)
    and runs one pipeline per slot, through the cluster client."""
    tenant = f"aclrd{uuid.uuid4().hex[:8]}"
    cfg = redis_cluster.cfg
    env = {**os.environ, "SESSIONSTREAM_STATE_DIR": str(tmp_path),
           "SESSIONSTREAM_REDIS_URL": cfg.redis_url, "SESSIONSTREAM_REDIS_CLUSTER": "true"}
    done = _cli(env, "acl", "apply", "--tenant", tenant, "--no-kafka", "--json")
    assert done.returncode == 0, done.stderr
    secrets = json.loads(Path(json.loads(done.stdout)["secrets_file"]).read_text())["passwords"]
    keys = KeySpace(tenant, "ss")
    worker = redisconn.sync_redis(
        redis_url_for(cfg.redis_url, f"sessionstream.{tenant}.worker", secrets["worker"]),
        cluster=True, socket_timeout=5, decode_responses=True)
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.scan(match="ss:*")  # what the purge did before
        sids = [f"s{i}" for i in range(12)]
        assert len({worker.get_node_from_key(keys.session_row(s, 1)).port
                    for s in sids}) > 1  # the sessions' slots span masters
        worker.set(keys.generation_counter(), 2)
        for g in (1, 2):
            for sid in sids:
                worker.hset(keys.session_row(sid, g), mapping={
                    SessionRow.view("surface"): "secret", SessionRow.AS_OF_SEQ: "3"})
                worker.xadd(keys.session_changes(sid, g), {CHANGE_FIELD: "{}"})
                worker.zadd(keys.sessions_index(g), {sid: 1})
                worker.xadd(keys.tenant_changes(g), {CHANGE_FIELD: json.dumps({"session": sid})})
        # Only the purge runs here: no key store, no audit log.
        gov = Governance(SimpleNamespace(tenant=tenant, key_prefix="ss"), None,  # type: ignore[arg-type]
                         worker, audit=None)  # type: ignore[arg-type]
        for doomed in sids[:6]:
            assert gov.purge_redis(doomed) == (4, 2)  # 2 view fields + 2 change streams
        for g in (1, 2):
            assert worker.zrange(keys.sessions_index(g), 0, -1) == sorted(sids[6:])
            assert sorted(json.loads(f[CHANGE_FIELD])["session"]
                          for _, f in worker.xrange(keys.tenant_changes(g))) == sorted(sids[6:])
            for sid in sids:
                row = worker.hgetall(keys.session_row(sid, g))
                assert (SessionRow.view("surface") in row) == (sid in sids[6:]), (sid, g)
                assert row[SessionRow.AS_OF_SEQ] == "3"
                assert bool(worker.exists(keys.session_changes(sid, g))) == (sid in sids[6:])
    finally:
        worker.close()
