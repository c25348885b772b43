"""One turn of a LangGraph conversation in a process of its own, as a stateless handler
serves it: ``python -m tests.langgraph_turn THREAD N``.

Builds the fleet saver (``SessionStreamSaver.fleet()``, settings from the environment)
and the chat graph, sends the user message ``question N``, prints one JSON line
(``{"messages": <count after the turn>, "last": <the reply>}``) and exits without
closing anything: no framework closes its checkpointer between requests.
"""

from __future__ import annotations

import json
import sys

from sessionstream.integrations.langgraph import SessionStreamSaver
from tests.langgraph_graphs import chat_graph


def main(thread_id: str, n: int) -> dict[str, object]:
    graph = chat_graph(SessionStreamSaver.fleet())
    out = graph.invoke({"messages": [("user", f"question {n}")]},
                       {"configurable": {"thread_id": thread_id}})
    return {"messages": len(out["messages"]), "last": out["messages"][-1].content}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
