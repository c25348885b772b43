"""sessionstream: the session store for fleets of AI agents.

``sessionstream.core`` is the pure core (events and catalog, the session log with its
write-time invariants, the message surface, request assembly, projections, recovery,
fork, admission, compaction policy and codecs): it performs no I/O beyond files.
Kafka and Redis live in ``producers``, ``streams`` and ``dashboard``; the
``sessionstream`` command (``sessionstream.cli``) is the composition root that wires
them, and ``sessionstream.devstack`` runs the local servers.
"""

__version__ = "0.1.0"
