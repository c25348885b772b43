"""Shared test setup: everything under tests/integration is marked ``integration``."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionstream.core.settings import Settings

INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def settings() -> Settings:
    """Settings from the environment (the local stack's defaults unless overridden)."""
    return Settings.from_env()
