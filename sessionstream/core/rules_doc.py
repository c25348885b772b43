"""The session rule names as a Markdown table, generated from ``sessionstream.core.session``.

The rule table in the :mod:`sessionstream.core.session` docstring is the source of truth
(``InvariantViolation.rule`` values); docs/architecture.md embeds the rendered table
between ``<!-- rules:begin -->`` and ``<!-- rules:end -->``, and a unit test keeps
the two in sync. Rewrite the section with ``python -m sessionstream.core.rules_doc``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from sessionstream.core import session

BEGIN = "<!-- rules:begin -->"
END = "<!-- rules:end -->"
_FRAME = re.compile(r"^=+\s+=+\s*$")  # the RST simple-table frame lines
_ROW = re.compile(r"^([a-z][a-z-]+)\s+(\S.*)$")


def rules() -> list[tuple[str, str]]:
    """(rule, meaning) rows of the table in the session module's docstring, in order."""
    lines = (session.__doc__ or "").splitlines()
    frames = [i for i, line in enumerate(lines) if _FRAME.match(line)]
    if len(frames) < 2:
        raise ValueError("sessionstream.core.session's docstring has no rule table")
    rows = []
    for line in lines[frames[0] + 1 : frames[-1]]:
        m = _ROW.match(line.strip())
        if m is None:
            raise ValueError(f"unreadable rule table row: {line!r}")
        rows.append((m.group(1), m.group(2).strip()))
    return rows


def render() -> str:
    """The generated section, markers included."""
    out = [
        BEGIN,
        "<!-- generated from the sessionstream.core.session docstring by "
        "`python -m sessionstream.core.rules_doc`; do not edit by hand -->",
        "",
        "| rule | refused when |",
        "|---|---|",
        *(f"| `{name}` | {meaning} |" for name, meaning in rules()),
        END,
    ]
    return "\n".join(out)


def embedded(text: str) -> str:
    """The generated section as it stands in ``text`` (empty if absent)."""
    start, end = text.find(BEGIN), text.find(END)
    return text[start : end + len(END)] if 0 <= start < end else ""


def rewrite(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    current = embedded(text)
    if not current:
        raise SystemExit(f"{path}: no {BEGIN} … {END} section to rewrite")
    path.write_text(text.replace(current, render()), encoding="utf-8")


if __name__ == "__main__":
    rewrite(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/architecture.md"))
