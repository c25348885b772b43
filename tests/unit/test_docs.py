"""Generated docs stay in sync with the code."""

from __future__ import annotations

from pathlib import Path

from sessionstream.catalog import default_catalog
from sessionstream.catalog_doc import render

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_events_md_is_generated_from_the_catalog() -> None:
    assert (DOCS / "events.md").read_text(encoding="utf-8") == render(), (
        "docs/events.md is stale: run python -m sessionstream.catalog_doc > docs/events.md")


def test_every_catalog_type_is_documented() -> None:
    text = (DOCS / "events.md").read_text(encoding="utf-8")
    assert all(f"`{t.name}`" in text for t in default_catalog())
