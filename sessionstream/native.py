"""The one bridge to the compiled extension, ``sessionstream._native`` (the Rust crate in
``native/``, built into the wheel by ``pip install``): the only module that imports it.

``ext`` is the extension module, or None when it cannot be imported; ``WHY_NOT`` then says
why and how to fix it, once for every caller. The writer's append path, the readers'
decoder, the fold, the sink's packer and replay take the members they use from ``ext``
through :func:`member`, so a build without one of them falls back as a whole.
"""

from __future__ import annotations

import logging
import os
from typing import Any

INSTALL_HINT = ("reinstall sessionstream where Rust's cargo is on PATH (`pip install "
                "--force-reinstall sessionstream`, or `make install` in a checkout)")

ext: Any  # the extension module (untyped: compiled), or None
WHY_NOT: str | None
try:
    import sessionstream._native as _ext
except ImportError as exc:  # pragma: no cover - depends on the install
    ext = None
    WHY_NOT = (f"the native extension sessionstream._native cannot be imported ({exc}); "
               f"{INSTALL_HINT}")
else:
    ext, WHY_NOT = _ext, None
    # The extension draws event ids from a buffer of random bytes: a forked child must
    # not reuse its parent's (as events.uuid4_ids drops its pieces).
    if hasattr(getattr(_ext, "Appender", None), "after_fork"):
        os.register_at_fork(after_in_child=_ext.Appender.after_fork)


def available() -> bool:
    """Whether the extension is importable."""
    return ext is not None


def member(name: str) -> Any:
    """The extension's ``name`` (a class or function), or None without it."""
    return getattr(ext, name, None) if ext is not None else None


_warned: set[str] = set()


def warn_fallback(log: logging.Logger, what: str, reason: str | None) -> None:
    """Log once per process and ``what`` that it runs the Python reference, why, and how to
    fix it (a silent fallback costs ~7x on the worker)."""
    if what in _warned:
        return
    _warned.add(what)
    log.warning("%s runs the Python reference fold, not the native one: %s", what,
                reason or WHY_NOT or "the native path cannot serve this configuration")


__all__ = ["INSTALL_HINT", "WHY_NOT", "available", "ext", "member", "warn_fallback"]
