"""Generated docs stay in sync with the code."""

from __future__ import annotations

import re
from pathlib import Path

from sessionstream.core import rules_doc, session
from sessionstream.core.catalog import default_catalog
from sessionstream.core.catalog_doc import render
from sessionstream.core.rules_doc import embedded

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_events_md_is_generated_from_the_catalog() -> None:
    assert (DOCS / "events.md").read_text(encoding="utf-8") == render(), (
        "docs/events.md is stale: run python -m sessionstream.core.catalog_doc > docs/events.md")


def test_every_catalog_type_is_documented() -> None:
    text = (DOCS / "events.md").read_text(encoding="utf-8")
    assert all(f"`{t.name}`" in text for t in default_catalog())


def test_architecture_rule_table_is_generated_from_the_session_module() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    assert embedded(text) == rules_doc.render(), (
        "docs/architecture.md's rule table is stale: run python -m sessionstream.core.rules_doc")


def test_every_rule_the_session_raises_is_in_the_table_and_nothing_else() -> None:
    """The docstring table lists exactly the rule names session.py can raise."""
    source = (Path(session.__file__)).read_text(encoding="utf-8")
    raised = set(re.findall(r'(?:_fail\(|InvariantViolation\(|rule = )\s*"([a-z-]+)"', source))
    raised |= set(re.findall(r'else "([a-z-]+)"', source))  # rule = "a" if … else "b"
    documented = {name for name, _ in rules_doc.rules()}
    assert raised - documented == set(), "rules raised but not documented"
    assert documented - raised == {"unknown-ignorable-type"}, "documented but never raised"


def test_every_place_listing_admission_verdicts_knows_every_rejection() -> None:
    """The dashboard, the runbook and the ADR name each verdict that refuses an event."""
    from sessionstream.core.admission import MEANING, REJECTIONS, Verdict

    assert set(MEANING) == set(Verdict)
    root = DOCS.parent
    app = (root / "dashboard" / "static" / "app.js").read_text(encoding="utf-8")
    ops = (DOCS / "operations.md").read_text(encoding="utf-8")
    adr = (DOCS / "adr" / "0001-log-in-kafka-fenced-writers-admission-rule.md").read_text(
        encoding="utf-8")
    for v in REJECTIONS:
        assert f"{v.value}:" in app, f"dashboard/static/app.js does not explain {v.value}"
        assert f"`{v.value}`" in ops, f"docs/operations.md does not name {v.value}"
        assert f"`{v.value}`" in adr, f"docs/adr/0001 does not name {v.value}"
