"""The web dashboard over the Redis projections (reads only Redis; live via SSE)."""
