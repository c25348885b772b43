"""The core imports no Kafka, Redis, faust or network library (brief §3)."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "sessionstream"
FORBIDDEN = {"confluent_kafka", "faust", "mode", "aiokafka", "redis", "requests", "httpx",
             "socket", "urllib", "producers", "streams", "dashboard"}
# The CLI and settings are the composition root; they import edges lazily, inside functions.
COMPOSITION_ROOT = {"cli.py", "cli_infra.py", "localstack.py"}


def _top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:  # module level only: lazy imports inside functions are fine
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_modules_import_no_edge_library_at_module_level() -> None:
    offenders = {}
    for path in CORE.rglob("*.py"):
        if path.name in COMPOSITION_ROOT:
            continue
        bad = _top_level_imports(path) & FORBIDDEN
        if bad:
            offenders[str(path.relative_to(CORE))] = sorted(bad)
    assert offenders == {}


def test_fastavro_appears_only_in_the_codec() -> None:
    users = [
        p.name for p in CORE.rglob("*.py") if "fastavro" in _top_level_imports(p)
    ]
    assert set(users) <= {"codec.py"}
