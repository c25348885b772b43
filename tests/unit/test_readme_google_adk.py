"""The README's Google ADK example runs as printed (offline, on the memory store)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_adk_example_runs_and_prints_what_its_comment_says() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Google ADK sessions on sessionstream", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), "README.md", "exec"), {"__name__": "readme"})
    assert out.getvalue().strip() == "Where is my order? {'user:lang': 'en'}"
