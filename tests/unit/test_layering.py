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


#: The edge packages; the composition root (``sessionstream/cli``) alone may import them.
EDGES = {"producers", "streams", "dashboard"}
COMPOSITION_ROOT = PACKAGE / "cli"


def _edge_imports(path: Path) -> list[str]:
    """The edge modules ``path`` imports, also inside functions (a lazy import is one too)."""
    return sorted(m for m in _imports(path) if m.split(".")[0] in EDGES)


def test_the_package_outside_the_cli_imports_no_edge_package() -> None:
    """Below the composition root the arrows point down: governance, the local stack and
    cluster managers, the Redis/Kafka config builders never import producers, streams or
    dashboard (governance gets what it needs from them through ports the CLI wires)."""
    offenders = {
        str(path.relative_to(PACKAGE)): _edge_imports(path)
        for path in PACKAGE.rglob("*.py") if COMPOSITION_ROOT not in path.parents
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_edge_import_check_sees_lazy_imports(tmp_path: Path) -> None:
    """A guard for the guard: an import inside a function counts, a name that merely
    starts like an edge (``streamsx``) does not, and the tree checked is the real one."""
    module = tmp_path / "m.py"
    module.write_text("import streamsx\n\ndef f():\n    from producers.writer import W\n"
                      "    import dashboard.app\n", encoding="utf-8")
    assert _edge_imports(module) == ["dashboard.app", "producers.writer"]
    checked = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
               if COMPOSITION_ROOT not in p.parents}
    assert {"governance/service.py", "governance/opener.py", "devcluster.py"} <= checked
