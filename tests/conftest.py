"""Shared test setup: everything under tests/integration is marked ``integration``."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from sessionstream.core.settings import Settings

# Hypothesis' per-example deadline is a timed assertion: on a loaded 2-core box a
# correct property test can exceed 200 ms and fail. What the properties test is the
# behaviour, so no example has a deadline and slow data generation is not an error;
# each test still sets its own number of examples.
hypothesis_settings.register_profile(
    "sessionstream", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("sessionstream")

INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def settings() -> Settings:
    """Settings from the environment (the local stack's defaults unless overridden)."""
    return Settings.from_env()
