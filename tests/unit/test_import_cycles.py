"""The package's modules import each other without cycles (imports inside functions and
under ``TYPE_CHECKING`` count too: a lazy import hides a cycle, it does not remove it).

The graph is read from the package as it installs (``tests/unit/layout.py``: the
``package-dir`` mapping of ``pyproject.toml``), so a module is known by the name it is
imported with (``sessionstream.streams.replay``), never by a folder's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.layout import imports_in, modules

#: Every package of the install, each checked on its own.
PACKAGES = ["sessionstream", "sessionstream.core", "sessionstream.governance",
            "sessionstream.producers", "sessionstream.streams", "sessionstream.dashboard",
            "sessionstream.integrations", "sessionstream.cli", "sessionstream.localstack"]


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``known`` it imports, anywhere in its body."""
    return {name: set(imports_in(path, known.keys()) & known.keys()) - {name}
            for name, path in known.items()}


def within(package: str, known: dict[str, Path]) -> dict[str, Path]:
    return {m: p for m, p in known.items() if m == package or m.startswith(package + ".")}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (the modules in order), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_cycle_finder_sees_a_cycle_through_a_lazy_import() -> None:
    graph = {"d.app": {"d.timeline"}, "d.timeline": {"d.app"}, "d.auth": set()}
    assert cycle(graph) == ["d.app", "d.timeline", "d.app"]
    assert cycle({"d.app": {"d.timeline"}, "d.timeline": set()}) is None


def test_the_graph_is_read_from_the_installed_layout() -> None:
    graph = import_graph(modules())
    # every package is found under its import name, with its edges
    for package in PACKAGES:
        assert within(package, modules()), f"no module of {package}: the guard sees nothing"
    assert "sessionstream.streams.processor" in graph["sessionstream.streams.replay"]
    assert "sessionstream.dashboard.timeline" in graph["sessionstream.dashboard.app"]
    assert len(within("sessionstream.streams", modules())) > 20
    assert sum(map(len, graph.values())) > 500


def test_a_planted_cycle_fails_the_guard(tmp_path: Path) -> None:
    """Two modules of the streams package that import each other, one lazily inside a
    function and one under TYPE_CHECKING, are a cycle the guard names."""
    a, b = "sessionstream.streams.planted_a", "sessionstream.streams.planted_b"
    (tmp_path / "planted_a.py").write_text(
        "def f() -> None:\n    from sessionstream.streams import planted_b  # noqa: F401\n")
    (tmp_path / "planted_b.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    from sessionstream.streams.planted_a import f  # noqa: F401\n")
    known = {**modules(), a: tmp_path / "planted_a.py", b: tmp_path / "planted_b.py"}
    planted = {a: known[a], b: known[b]}
    found = cycle(import_graph(planted))
    assert found is not None and set(found) == {a, b}
    # through a third module of the package too
    (tmp_path / "planted_b.py").write_text("from sessionstream.streams import replay\n")
    replay = within("sessionstream.streams", modules())["sessionstream.streams.replay"]
    (tmp_path / "replay.py").write_text(
        replay.read_text(encoding="utf-8") + "\nfrom sessionstream.streams import planted_a\n")
    planted["sessionstream.streams.replay"] = tmp_path / "replay.py"
    found = cycle(import_graph(planted))
    assert found is not None and {a, b, "sessionstream.streams.replay"} <= set(found)


@pytest.mark.parametrize("package", PACKAGES)
def test_the_package_has_no_import_cycle(package: str) -> None:
    found = cycle(import_graph(within(package, modules())))
    assert found is None, "import cycle: " + " -> ".join(found or [])
