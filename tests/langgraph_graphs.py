"""Small LangGraph graphs the saver's tests run (no model: plain Python nodes)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from langgraph.channels.delta import DeltaChannel
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


def _concat(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    return [*state, *(x for w in writes for x in w)]


class Deltas(TypedDict):
    items: Annotated[list[str], DeltaChannel(_concat, snapshot_frequency=3)]
    n: int


def _add(state: Deltas) -> dict[str, Any]:
    return {"items": [f"i{state['n']}"], "n": state["n"] + 1}


def delta_graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    """START -> a -> b -> END; ``items`` is a DeltaChannel (a snapshot every 3 updates),
    so reading a checkpoint walks its parent chain (get_delta_channel_history)."""
    g = StateGraph(Deltas)
    g.add_node("a", _add)
    g.add_node("b", _add)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=checkpointer)


REPLY = "a reply of a model, long enough to look like one; " * 4


def chat_graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    """START -> model -> END over ``MessagesState``: a user message in, one fixed reply
    out (no model called)."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import MessagesState

    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"reply {len(state['messages'])}: {REPLY}")]}

    g = StateGraph(MessagesState)
    g.add_node("model", model)
    g.add_edge(START, "model")
    g.add_edge("model", END)
    return g.compile(checkpointer=checkpointer)
