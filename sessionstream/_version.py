"""The version of the distribution (one place, read by the face and by ``--version``)."""

__version__ = "0.1.0"
