"""The edge packages' modules import each other without cycles (imports inside functions
count too: a lazy import hides a cycle, it does not remove it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imports_within(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, anywhere in its body."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).glob("*.py")):
        name = f"{package}.{path.stem}"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == package:  # from sessionstream.dashboard import timeline
                    deps |= {f"{package}.{a.name}" for a in node.names}
                elif node.module.startswith(package + "."):
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith(package + ".")}
        graph[name] = deps - {name}
    return graph


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


@pytest.mark.parametrize("package", ["dashboard", "streams"])
def test_the_package_has_no_import_cycle(package: str) -> None:
    assert cycle(imports_within(package)) is None
