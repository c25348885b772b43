"""The package's layers, and the rule that every import points down.

The core imports only the standard library and itself (fastavro in the codec alone). Above
it, each layer may import the layers below and never one above: the composition root
(``sessionstream.cli``) is the top and nothing imports it; the public face
(``sessionstream/__init__.py``) hands names on lazily. Every import statement of every module
counts, at module level or inside a function (a lazy import is an arrow too).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.unit.layout import imports_of, modules, package_imports

STDLIB = frozenset(sys.stdlib_module_names)
#: Modules of the core allowed one third-party import each, and which.
THIRD_PARTY = {"sessionstream.core.codec": {"fastavro"}}
#: The standard library's network and process modules are edges too.
EDGE_STDLIB = {"socket", "subprocess", "urllib", "http", "ssl", "asyncio", "selectors"}

#: From the ground up. A module belongs to the last layer whose prefix names it; the
#: package's own top-level modules (client configs, the native bridge) and governance form
#: the layer above the core.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("sessionstream.core",),
    ("sessionstream.governance", "sessionstream.kafka_config", "sessionstream.redisconn",
     "sessionstream.registry", "sessionstream.native", "sessionstream._version"),
    ("sessionstream.localstack",),
    ("sessionstream.producers",),
    ("sessionstream.streams",),
    ("sessionstream.dashboard",),
    ("sessionstream.integrations",),
    ("sessionstream.cli",),
)
FACE = "sessionstream"


def layer_of(module: str) -> int:
    if module == FACE:
        return len(LAYERS)
    for index, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def upward_imports() -> list[tuple[str, str]]:
    """Every (importer, imported) pair whose import runs from a lower layer up."""
    return sorted((m, d) for m in modules() for d in package_imports(m)
                  if layer_of(d) > layer_of(m))


def test_every_module_is_in_a_layer() -> None:
    for module in modules():
        layer_of(module)


def test_no_import_runs_from_a_lower_layer_up() -> None:
    assert upward_imports() == []


def test_nothing_imports_the_composition_root_or_the_face() -> None:
    importers = {(m, d) for m in modules() for d in package_imports(m)
                 if (d == FACE or d.startswith("sessionstream.cli"))
                 and not m.startswith("sessionstream.cli")}
    assert importers == set()


def test_the_layer_check_sees_a_lazy_upward_import(tmp_path: Path) -> None:
    """A guard for the guard: an import inside a function counts, and the real tree is read."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from sessionstream.streams.sink import X\n",
                      encoding="utf-8")
    assert "sessionstream.streams.sink" in imports_of(module)
    assert layer_of("sessionstream.streams.sink") > layer_of("sessionstream.producers.writer")
    assert {"sessionstream.core.events", "sessionstream.producers.writer",
            "sessionstream.cli.main", "sessionstream.localstack.stack"} <= modules().keys()


def _allowed_in_core(name: str, module: str) -> bool:
    top = name.split(".")[0]
    if name == "sessionstream.core" or name.startswith("sessionstream.core."):
        return True
    if top == "__future__":
        return True
    if top in STDLIB:
        return top not in EDGE_STDLIB
    return top in THIRD_PARTY.get(module, set())


def test_the_core_imports_only_the_standard_library_and_itself() -> None:
    offenders = {
        module: sorted(n for n in imports_of(path) if not _allowed_in_core(n, module))
        for module, path in modules().items() if layer_of(module) == 0
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_fastavro_appears_only_in_the_codec() -> None:
    users = {m for m, p in modules().items() if layer_of(m) == 0
             and any(n.startswith("fastavro") for n in imports_of(p))}
    assert users <= {"sessionstream.core.codec"}


def test_the_rule_is_checked_on_a_real_tree() -> None:
    """A guard for the guard: the core holds the modules the rule is about."""
    core = {m for m in modules() if layer_of(m) == 0}
    assert {"sessionstream.core.events", "sessionstream.core.session",
            "sessionstream.core.admission", "sessionstream.core.codec"} <= core


def test_no_module_imports_a_top_level_edge_name() -> None:
    """The repository's folders install under ``sessionstream``; a bare ``producers``,
    ``streams`` or ``dashboard`` import would name another distribution's module."""
    bare = {m: sorted(n for n in imports_of(p)
                      if n.split(".")[0] in {"producers", "streams", "dashboard", "cli",
                                             "integrations"})
            for m, p in modules().items()}
    assert {k: v for k, v in bare.items() if v} == {}


def test_one_module_imports_the_native_extension() -> None:
    importers = {m for m, p in modules().items()
                 if {"sessionstream._native", "sessionstream_native"} & imports_of(p)}
    assert importers == {"sessionstream.native"}
