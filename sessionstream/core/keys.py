"""Redis key names, in one place, Redis-Cluster ready.

Every key about one session shares the hash tag ``{<tenant>/<session_id>}``, so one
script call that writes all of a session's views, states and watermark never
crosses slots. Keys about a whole tenant (the session list, the change feed) use
the tag ``{<tenant>}`` and are written in a separate call.
"""

from __future__ import annotations

DEFAULT_PREFIX = "ss"


def session_tag(tenant: str, session_id: str) -> str:
    return "{" + tenant + "/" + session_id + "}"


def session_key(prefix: str, tenant: str, session_id: str, what: str) -> str:
    """``<prefix>:{<tenant>/<session>}:<what>`` e.g. what = "lease", "views:g1"."""
    return f"{prefix}:{session_tag(tenant, session_id)}:{what}"


def tenant_key(prefix: str, tenant: str, what: str) -> str:
    """``<prefix>:{<tenant>}:<what>`` e.g. what = "sessions", "changes"."""
    return f"{prefix}:{{{tenant}}}:{what}"
