"""One of two LangGraph processes writing one thread at the same time, the overlap
forced: ``python -m tests.langgraph_racer THREAD ROLE DIR``.

``holder`` runs the counter graph through a saver with ``durable=False``, so its last
write keeps the thread's lease, creates ``DIR/held``, waits for ``DIR/tried`` (at most
60 s) and closes (the writes become durable, the lease is given back). ``challenger``
waits for ``DIR/held``, runs the counter graph through a durable saver while the holder
holds the thread, and creates ``DIR/tried``. Each prints one JSON line:
``{"result": "ok" | "WriterConflict", "name": ROLE, "detail": ...}``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from sessionstream.integrations.langgraph import SessionStreamSaver, WriterConflict
from tests.langgraph_graphs import counter_graph


def _wait_for(path: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def main(thread_id: str, role: str, where: Path) -> dict[str, str]:
    saver = SessionStreamSaver.fleet(durable=role != "holder")
    graph = counter_graph(saver)
    if role == "challenger":
        _wait_for(where / "held")
    try:
        graph.invoke({"log": [f"from {role}"], "n": 0},
                     {"configurable": {"thread_id": thread_id}})
    except WriterConflict as exc:
        result = {"result": "WriterConflict", "name": role, "detail": str(exc)}
    else:
        result = {"result": "ok", "name": role, "detail": ""}
    if role == "holder":
        (where / "held").touch()
        _wait_for(where / "tried")
    else:
        (where / "tried").touch()
    saver.close()
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))))
