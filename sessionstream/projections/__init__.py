"""Projections: pure units folded over a session log, and the registry that drives them."""

from sessionstream.projections.base import ProjectionUnit
from sessionstream.projections.index import quarantine
from sessionstream.projections.registry import (
    Registry,
    Snapshot,
    default_registry,
    default_units,
)
from sessionstream.projections.rejections import record_rejection

__all__ = [
    "ProjectionUnit",
    "Registry",
    "Snapshot",
    "default_registry",
    "default_units",
    "quarantine",
    "record_rejection",
]
