"""The package as it installs: every module's import name and file, read from the
``package-dir`` mapping in ``pyproject.toml`` (the repository's top-level folders are
subpackages of ``sessionstream``), and the ``sessionstream`` modules each one imports."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Collection
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@cache
def package_dirs() -> dict[str, Path]:
    """Import name of a mapped package -> its folder."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    return {name: ROOT / folder for name, folder in setuptools["package-dir"].items()}


@cache
def modules() -> dict[str, Path]:
    """Every module of the installed package: import name -> file."""
    found: dict[str, Path] = {}
    for name, folder in package_dirs().items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((name, *parts))] = path
    return found


@cache
def imports_of(path: Path) -> frozenset[str]:
    """Every absolute module an import in ``path`` names, anywhere in the file (a lazy import
    inside a function counts); ``from pkg import mod`` names ``pkg.mod`` when that is a module."""
    return imports_in(path, modules().keys())


def imports_in(path: Path, known: Collection[str]) -> frozenset[str]:
    """:func:`imports_of` with ``known`` as the package's modules."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{a.name}" for a in node.names} & set(known)
            names.update(submodules)
            if len(submodules) < len(node.names):  # some names are not modules
                names.add(node.module)
    return frozenset(names)


def package_imports(name: str) -> set[str]:
    """The modules of the package that module ``name`` imports."""
    known = modules()
    return {m for m in imports_of(known[name]) if m in known} - {name}
