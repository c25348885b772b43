"""Projections: pure units folded over a session log, and the registry that drives them."""

from sessionstream.core.projections.base import ProjectionUnit
from sessionstream.core.projections.index import quarantine
from sessionstream.core.projections.registry import (
    Registry,
    Snapshot,
    default_registry,
    default_units,
)
from sessionstream.core.projections.rejections import record_rejection

__all__ = [
    "ProjectionUnit",
    "Registry",
    "Snapshot",
    "default_registry",
    "default_units",
    "quarantine",
    "record_rejection",
]
