"""Settings are the only reader (and the only speller) of the SESSIONSTREAM_* variables."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "sessionstream/core/settings.py"


def test_no_module_outside_settings_and_tests_names_a_sessionstream_variable() -> None:
    offenders = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel == SETTINGS or rel.startswith(("tests/", ".venv/", "build/")) or "/." in rel:
            continue
        if "SESSIONSTREAM_" in path.read_text(encoding="utf-8"):
            offenders.append(rel)
    assert offenders == [], (
        "read variables in Settings.from_env and name them in messages with "
        f"sessionstream.core.settings.Env: {offenders}")
