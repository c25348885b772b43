"""The local servers: one Kafka 4 (KRaft) broker and Redis (``stack``), the cluster profile
(``cluster``) and a schema registry (``registry``), on loopback for development and tests."""
