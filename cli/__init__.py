"""The ``sessionstream`` command: the composition root, outside the pure core."""
