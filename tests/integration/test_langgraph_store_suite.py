"""LangGraph's own store tests (``langgraph-checkpoint-sqlite``'s sdist: test_store.py,
test_async_store.py, test_ttl.py) against ``SessionstreamStore`` on the fleet backend
(real Kafka + Redis), through ``tests/frameworks/sessionstream_lgstore_plugin.py``.

Deselected (``EXCLUDED``, with the reason): what tests SQLite itself, not a store's
behaviour.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest

from sessionstream.core.settings import Settings
from tests.integration.sdists import unpacked_sdist

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DIST = "langgraph-checkpoint-sqlite"
FILES = ["test_store.py", "test_async_store.py", "test_ttl.py"]
#: node id -> why it does not apply to a store without SQL
EXCLUDED: dict[str, str] = {
    "test_store.py::test_vector_store_initialization":
        "reads SQLite's own tables (sqlite_master) after setup()",
    "test_store.py::test_sql_injection_vulnerability":
        "expects SqliteStore's SQL-safety refusal of filter keys; without SQL any key is "
        "a literal path (the same query returns nothing, tested in test_memory_langgraph)",
    "test_async_store.py::test_no_running_loop":
        "expects AsyncSqliteStore's sync methods to refuse on the loop's thread; ours "
        "work there (they do not need the loop)",
}


def _run_suite(settings: Settings, tmp_path: Path, env_extra: dict[str, str],
               excluded: dict[str, str]) -> dict[str, int]:
    suite = unpacked_sdist(DIST, settings.cache_dir)
    report = tmp_path / "junit.xml"
    deselect = [f"--deselect=tests/{t}[{p}]" for t in excluded for p in ("memory", "file")]
    deselect += [f"--deselect=tests/{t}" for t in excluded]
    env = {**os.environ, **env_extra,
           "PYTHONPATH": str(ROOT / "tests" / "frameworks")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "sessionstream_lgstore_plugin",
         "-p", "no:cacheprovider", "-o", "addopts=", "-q", "--tb=short", "-W", "ignore",
         f"--junitxml={report}", *deselect, *[f"tests/{f}" for f in FILES]],
        cwd=suite, env=env, capture_output=True, text=True, timeout=1200)
    root = ET.parse(report).getroot()
    node = root if root.tag == "testsuite" else root[0]
    counts = {k: int(node.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    print(f"{DIST} {version(DIST)} store suite ({env_extra.get('SESSIONSTREAM_LGSTORE_BACKEND')}"
          f"): {counts}")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert counts["failures"] == counts["errors"] == 0
    return counts


@pytest.mark.timeout(1500)  # ~1,100 writes through Kafka, each folded before it returns
def test_langgraph_store_suite_passes_on_the_fleet(
        settings: Settings, unique_topic: Callable[..., str], redis_prefix: str,
        tmp_path: Path) -> None:
    counts = _run_suite(settings, tmp_path, {
        "SESSIONSTREAM_LGSTORE_BACKEND": "fleet",
        "SESSIONSTREAM_MEMORY_TOPIC": unique_topic(4), "SESSIONSTREAM_KEY_PREFIX": redis_prefix,
        "SESSIONSTREAM_KEY_DIR": str(tmp_path / "keys"),
        "SESSIONSTREAM_TENANT_KEY_DIR": str(tmp_path / "tenant-keys")}, EXCLUDED)
    assert counts["tests"] - counts["skipped"] >= 140, counts


def test_langgraph_store_suite_passes_in_memory(settings: Settings, tmp_path: Path) -> None:
    excluded = {k: v for k, v in EXCLUDED.items() if "large_batches" not in k}
    counts = _run_suite(settings, tmp_path, {"SESSIONSTREAM_LGSTORE_BACKEND": "memory"},
                        excluded)
    assert counts["tests"] - counts["skipped"] >= 145, counts
