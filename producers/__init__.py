"""Agent-side writers: everything that talks to Kafka on behalf of agent harnesses."""
