"""The pure core of sessionstream.

Events and catalog, the session log with its write-time invariants, the message
surface, request assembly, projections, recovery, fork, admission, compaction policy
and codecs. Every module here imports only the standard library and this package
(fastavro in :mod:`sessionstream.core.codec` alone); a unit test enforces it. Kafka,
Redis and servers live outside: ``producers``, ``streams``, ``dashboard``,
:mod:`sessionstream.localstack.stack` and :mod:`sessionstream.cli`.
"""
