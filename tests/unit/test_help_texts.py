"""The command line's help speaks of the product's own documents: no help text sends a user
to the semantics specification the project is built from (its sections are numbered §x.y;
users do not have it), and every document a help text names ships in docs/."""

from __future__ import annotations

import re
from pathlib import Path

import click

from sessionstream.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def help_texts() -> dict[str, str]:
    """Every command's and option's help, by command path."""
    out: dict[str, str] = {}

    def walk(cmd: click.Command, path: str) -> None:
        texts = [cmd.help or "", cmd.short_help or "", cmd.epilog or ""]
        texts += [p.help or "" for p in cmd.params if isinstance(p, click.Option)]
        out[path] = "\n".join(texts)
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")

    walk(main, "sessionstream")
    return out


def test_help_never_names_the_specification() -> None:
    texts = help_texts()
    assert len(texts) > 30 and "sessionstream compaction report" in texts
    bad = {path: text for path, text in texts.items()
           if "§" in text or re.search(r"\bthe seed('s)? (chapter|spec|book)", text, re.I)}
    assert bad == {}


def test_the_documents_help_names_exist() -> None:
    for path, text in help_texts().items():
        for doc in re.findall(r"docs/[\w./-]+\.md", text):
            assert (ROOT / doc).is_file(), f"{path} names {doc}, which does not exist"
