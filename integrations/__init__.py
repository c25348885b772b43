"""Session backends for the agent frameworks users already run (optional extras)."""
