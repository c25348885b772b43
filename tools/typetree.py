"""Lay out the package as it installs, as a tree of links, for tools that resolve modules by
folder (mypy): setuptools' ``package-dir`` maps the repository's top-level folders into
``sessionstream``, which such tools cannot follow. Usage: ``python tools/typetree.py DIR``."""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lay_out(dest: Path) -> Path:
    """Link every mapped folder of ``pyproject.toml`` under ``dest``; returns the package dir."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"][
        "package-dir"]
    shutil.rmtree(dest, ignore_errors=True)
    top = dest / "sessionstream"
    top.mkdir(parents=True)
    for entry in (ROOT / mapping["sessionstream"]).iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name != "sessionstream":
            (top / name.split(".", 1)[1]).symlink_to(ROOT / folder)
    return top


if __name__ == "__main__":
    print(lay_out(Path(sys.argv[1]).resolve()))
