"""One racing LangGraph process: ``python -m tests.langgraph_racer THREAD START_AT NAME``.

Waits for the wall clock to reach START_AT (so two processes start together), runs the
counter graph on THREAD through the fleet saver (``SessionStreamSaver.fleet()``, settings
from the environment), holds the thread two seconds more, closes; prints one JSON line:
``{"result": "ok" | "WriterConflict", "name": NAME, "detail": ...}``.
"""

from __future__ import annotations

import json
import sys
import time

from sessionstream.integrations.langgraph import SessionStreamSaver, WriterConflict
from tests.langgraph_graphs import counter_graph


def main(thread_id: str, start_at: float, name: str) -> dict[str, str]:
    saver = SessionStreamSaver.fleet()
    graph = counter_graph(saver)
    while time.time() < start_at:
        time.sleep(0.001)
    try:
        graph.invoke({"log": [f"from {name}"], "n": 0},
                     {"configurable": {"thread_id": thread_id}})
    except WriterConflict as exc:
        saver.close()
        return {"result": "WriterConflict", "name": name, "detail": str(exc)}
    time.sleep(2.0)  # still holding the thread while the other process tries
    saver.close()
    return {"result": "ok", "name": name, "detail": ""}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], float(sys.argv[2]), sys.argv[3])))
