"""Small LangGraph graphs the saver's tests run (no model: plain Python nodes)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph


class Counter(TypedDict):
    log: Annotated[list[str], operator.add]
    n: int


def _step(state: Counter) -> dict[str, Any]:
    return {"log": ["step"], "n": state["n"] + 1}


def counter_graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    """START -> a -> b -> c -> END; each node appends "step" to ``log`` and counts."""
    g = StateGraph(Counter)
    for name in ("a", "b", "c"):
        g.add_node(name, _step)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=checkpointer)
