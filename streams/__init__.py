"""Stream processors (faust-streaming) that fold the event log into Redis."""
