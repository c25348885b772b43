"""``import sessionstream`` is the public API: a small ``__all__``, every name resolving to
its defining module, and an import that stays as light as the core."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sessionstream


def test_every_public_name_resolves() -> None:
    for name in sessionstream.__all__:
        value = getattr(sessionstream, name)
        if name != "__version__":
            assert value.__name__ == name


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        sessionstream.no_such_thing  # noqa: B018


def test_the_api_is_what_a_harness_and_a_service_use() -> None:
    assert {"SessionWriter", "WriterConfig", "Session", "ViewReader", "Harness", "Settings",
            "SessionStreamError", "Fenced"} <= set(sessionstream.__all__)
    assert len(sessionstream.__all__) <= 30
    assert issubclass(sessionstream.Fenced, sessionstream.SessionStreamError)


def test_importing_the_package_or_its_core_loads_no_client() -> None:
    code = ("import sys, sessionstream, sessionstream.core.session, sessionstream.core.harness\n"
            "print(sorted(m for m in ('confluent_kafka', 'redis', 'faust', 'aiohttp')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
