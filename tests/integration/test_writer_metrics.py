"""The writer's stats hook counts fencings on a real broker and Redis (Prometheus adapter)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from prometheus_client import CollectorRegistry

from sessionstream.producers.errors import Fenced
from sessionstream.producers.metrics import WriterMetrics
from sessionstream.producers.writer import SessionWriter, WriterConfig
from tests.integration.writers import tool_turn, writer_cfg  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration


def _value(reg: CollectorRegistry, name: str, **labels: str) -> float:
    got = reg.get_sample_value(name, labels)
    assert got is not None, (name, labels)
    return got


def test_a_zombie_writer_is_counted_fenced_once_by_reason_through_the_stats_hook(
    writer_cfg: WriterConfig,  # noqa: F811 (fixture)
) -> None:
    reg = CollectorRegistry()
    stats = WriterMetrics(writer_cfg.tenant, registry=reg)
    cfg = dataclasses.replace(writer_cfg, lease_ttl_ms=300, stats=stats)
    zombie = SessionWriter.create(cfg)
    tool_turn(zombie, 0)
    zombie.flush(10)
    time.sleep(0.5)  # the zombie pauses past its TTL; the lease expires
    heir = SessionWriter.open(cfg, zombie.session_id)
    heir.append("user/message", {"content": "heir"})
    heir.flush(10)
    fenced = "sessionstream_writer_fenced_total"
    assert _value(reg, fenced, tenant=cfg.tenant, reason="not_admitted") == 0
    zombie._maybe_renew = lambda: None  # type: ignore[method-assign]
    zombie.append("user/message", {"content": "zombie"})
    with pytest.raises(Fenced):
        zombie.flush(10)  # acknowledged by the broker, refused by every reader
    with pytest.raises(Fenced):
        zombie.flush(10)  # the same fencing: not counted twice
    assert _value(reg, fenced, tenant=cfg.tenant, reason="not_admitted") == 1
    assert _value(reg, fenced, tenant=cfg.tenant, reason="lease_renewal") == 0
    assert _value(reg, "sessionstream_writer_delivery_errors_total",
                  tenant=cfg.tenant, state="failed") == 0
    heir.close()
    zombie.abandon()


def test_a_writer_whose_renewal_finds_a_newer_epoch_is_counted_fenced_by_lease_renewal(
    writer_cfg: WriterConfig,  # noqa: F811 (fixture)
) -> None:
    reg = CollectorRegistry()
    cfg = dataclasses.replace(writer_cfg, lease_ttl_ms=300,
                              stats=WriterMetrics(writer_cfg.tenant, registry=reg))
    old = SessionWriter.create(cfg)
    tool_turn(old, 0)
    old.flush(10)
    time.sleep(0.5)
    heir = SessionWriter.open(cfg, old.session_id)
    with pytest.raises(Fenced):
        old.append("user/message", {"content": "late"})
    assert _value(reg, "sessionstream_writer_fenced_total", tenant=cfg.tenant,
                  reason="lease_renewal") == 1
    heir.close()
    old.abandon()
