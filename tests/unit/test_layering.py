"""The core imports only the standard library and itself; fastavro in the codec alone.

The rule has no exemption list: every import statement of every module under
``sessionstream/core`` — at module level or inside a function — is checked. The
composition root (``sessionstream/cli``) and server management
(``sessionstream/devstack.py``) live outside the core, above it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sessionstream"
CORE = PACKAGE / "core"
STDLIB = frozenset(sys.stdlib_module_names)
#: Modules of the core allowed one third-party import each, and which.
THIRD_PARTY = {"codec.py": {"fastavro"}}
#: The standard library's network and process modules are edges too.
EDGE_STDLIB = {"socket", "subprocess", "urllib", "http", "ssl", "asyncio", "selectors"}


def _imports(path: Path) -> set[str]:
    """Every absolute module an ``import`` in ``path`` names (anywhere in the file)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _allowed(module: str, path: Path) -> bool:
    top = module.split(".")[0]
    if module == "sessionstream.core" or module.startswith("sessionstream.core."):
        return True
    if top == "__future__":
        return True
    if top in STDLIB:
        return top not in EDGE_STDLIB
    return top in THIRD_PARTY.get(path.name, set())


def test_the_core_imports_only_the_standard_library_and_itself() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(m for m in _imports(path) if not _allowed(m, path))
        for path in CORE.rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_fastavro_appears_only_in_the_codec() -> None:
    users = {p.name for p in CORE.rglob("*.py")
             if any(m.startswith("fastavro") for m in _imports(p))}
    assert users <= {"codec.py"}


def test_the_rule_is_checked_on_a_real_tree() -> None:
    """A guard for the guard: the core folder exists and holds the modules the rule is about."""
    names = {p.name for p in CORE.rglob("*.py")}
    assert {"events.py", "session.py", "admission.py", "codec.py", "surface.py"} <= names


def test_edges_are_not_imported_by_the_package_root() -> None:
    """``import sessionstream`` stays as light as the core: it names no edge package."""
    root = _imports(PACKAGE / "__init__.py")
    assert not any(m.split(".")[0] in {"producers", "streams", "dashboard"} for m in root)
