"""sessionstream: the session store for fleets of AI agents.

The package itself is the pure core: events and catalog, the session log with its
write-time invariants, the message surface, request assembly, projections,
recovery, fork, admission and codecs. It performs no network I/O; Kafka and Redis
live in ``producers`` and ``streams``.
"""

__version__ = "0.1.0"
